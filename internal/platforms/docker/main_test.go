package docker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestMain makes this test binary the namespace sandbox init too (the
// overhead benchmark compares the two launches), starts Docker when CI asks
// for strictness and none runs, and checks, after every test, that nothing
// was left behind: containers, volumes, images, mounts or processes.
func TestMain(m *testing.M) {
	if sandbox.InitMain() {
		return
	}
	if testenv.Strict() && os.Geteuid() == 0 {
		ensureDocker()
	}
	dir, err := os.MkdirTemp("", "layerfs-supervise-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	supervisorBin, err = buildSupervisor(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docker tests: build layerfs-supervise:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if err := shared.down(); err != nil {
		fmt.Fprintln(os.Stderr, "docker tests: Down:", err)
		code = 1
	}
	if err := checkLeftovers(); err != nil {
		fmt.Fprintln(os.Stderr, "docker tests: left behind:", err)
		code = 1
	}
	os.Exit(code)
}

// supervisorBin is a static build of cmd/layerfs-supervise, the supervisor
// most tests use (TestLifecycle uses the fallback: this test binary).
var supervisorBin string

// buildSupervisor builds cmd/layerfs-supervise into dir, static.
func buildSupervisor(dir string) (string, error) {
	out := filepath.Join(dir, "layerfs-supervise")
	cmd := exec.Command(testenv.GoTool(), "build", "-o", out, "layerfs.dev/layerfs/cmd/layerfs-supervise")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	return out, cmd.Run()
}

// ensureDocker runs scripts/ensure-docker (idempotent) from the checkout.
func ensureDocker() {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "ensure-docker")
	cmd := exec.Command(script)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "docker tests: scripts/ensure-docker:", err)
	}
}

// shared is the Platform most tests use: bringing one up hashes the image
// root, so tests share it; lifecycle tests make their own.
var shared sharedPlatform

type sharedPlatform struct {
	mu sync.Mutex
	p  *Platform
}

func (s *sharedPlatform) get(t *testing.T) *Platform {
	t.Helper()
	testenv.RequireDocker(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		p := New(Options{Supervisor: supervisorBin})
		// Not t.Context(): the shared Platform outlives the test that brings it up.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		require.NoError(t, p.Up(ctx), "Up")
		s.p = p
	}
	return s.p
}

func (s *sharedPlatform) down() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return nil
	}
	return s.p.Down(context.Background())
}

var dockerCgroup = regexp.MustCompile(`docker[/-]([0-9a-f]{64})`)

// checkLeftovers reports what this test binary left: its containers and
// volumes, root-dir images, FUSE mounts, and processes in the cgroup of a
// container that no longer exists (a supervisor or command that escaped).
func checkLeftovers() error {
	var problems []string
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			// Id-mapped clones of this process's Platforms (owners are
			// "PID-random"), not those of a test binary running beside.
			if strings.Contains(line, fuseTestName) || strings.Contains(line, " "+idmapRoot+"/"+strconv.Itoa(os.Getpid())+"-") {
				problems = append(problems, "mount: "+line)
			}
		}
	}
	cli, err := client.NewClientWithOpts(client.WithHost(DefaultHost), client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		if len(problems) > 0 {
			return fmt.Errorf("%s", strings.Join(problems, "\n"))
		}
		return nil // no engine: the docker tests skipped
	}
	mine := fmt.Sprintf("%d-", os.Getpid())
	all, err := cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, c := range all {
		live[c.ID] = true
		if strings.HasPrefix(c.Labels[labelOwner], mine) {
			problems = append(problems, "container: "+c.ID[:12]+" "+strings.Join(c.Names, ","))
		}
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", labelWorkspace))})
	if err != nil {
		return err
	}
	for _, v := range vs.Volumes {
		problems = append(problems, "volume: "+v.Name)
	}
	imgs, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelImage+"=rootdir"))})
	if err != nil {
		return err
	}
	for _, im := range imgs {
		problems = append(problems, "image: "+im.ID)
	}
	// An exec cgroup under a container that is gone kept docker from
	// removing the container's cgroup.
	for _, ctrl := range []string{"memory", "pids"} {
		left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", ctrl, "*", "*", execCgroupPrefix+"*"))
		for _, d := range left {
			if id := filepath.Base(filepath.Dir(d)); !live[id] {
				problems = append(problems, "cgroup: "+d)
			}
		}
	}
	// Other test binaries create and remove containers meanwhile, so a
	// process counts only if it outlives its container by seconds.
	suspects := orphanProcesses(live)
	if len(suspects) > 0 {
		time.Sleep(3 * time.Second)
		all, err = cli.ContainerList(ctx, container.ListOptions{All: true})
		if err != nil {
			return err
		}
		for _, c := range all {
			live[c.ID] = true
		}
		for pid, desc := range orphanProcesses(live) {
			if suspects[pid] != "" {
				problems = append(problems, desc)
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("\n%s", strings.Join(problems, "\n"))
	}
	return nil
}

// orphanProcesses maps the pids of host processes in the cgroup of a
// container not in live to a description.
func orphanProcesses(live map[string]bool) map[string]string {
	out := map[string]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil {
			continue
		}
		if m := dockerCgroup.FindSubmatch(b); m != nil && !live[string(m[1])] {
			cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			out[e.Name()] = fmt.Sprintf("process %s %q of removed container %.12s", e.Name(), cmdline, m[1])
		}
	}
	return out
}
