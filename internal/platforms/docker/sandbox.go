package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/fsids"
	"layerfs.dev/layerfs/internal/outputcap"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/docker/supervise"
	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/internal/portfwd"
)

// Errors of Exec; a workspace or spec that breaks the contract is
// platforms.ErrBadSpec.
var (
	// ErrSupervisor: the in-container supervisor ended without reporting
	// (it could not start, or was killed from the host).
	ErrSupervisor = errors.New("exec supervisor failed")
)

// workspaceDir is where every container sees its workspace.
const workspaceDir = platforms.WorkspaceDir

// stopGrace is how long the host waits, after the supervisor's own
// deadline, before it signals the supervisor, and then again before it
// kills the exec's processes itself.
const stopGrace = 5 * time.Second

// Sandbox is one attached workspace: a running container whose /workspace
// is the workspace's host path. Exec may be called concurrently.
type Sandbox struct {
	cli      *client.Client
	cg       *cgroupV1 // nil: no per-exec limits
	log      *slog.Logger
	id       string // container id
	ws       platforms.Workspace
	hostname string
	rootImg  string // the Workspace.RootDir image, removed on Close
	// ids is the user namespace each command runs in (nil: the host's,
	// for the reason noUserNS), filter the seccomp filter it loads there,
	// and clone the id-mapped clone of the workspace the container binds,
	// unmounted on Close.
	ids      *userns.Range
	noUserNS string
	filter   string
	clone    string

	mu     sync.Mutex
	closed bool

	net   netState
	netns *os.File // the container's network namespace, once a port was asked
}

var (
	_ platforms.Sandbox    = (*Sandbox)(nil)
	_ platforms.PortDialer = (*Sandbox)(nil)
)

// Attach creates and starts the workspace's container. Close the Sandbox
// before unmounting a FUSE workspace: the container's bind mount holds the
// FUSE connection, and go-fuse's Unmount was seen here to block until the
// container is removed.
func (p *Platform) Attach(ctx context.Context, w platforms.Workspace) (platforms.Sandbox, error) {
	cli, st, err := p.current()
	if err != nil {
		return nil, err
	}
	if err := w.Validate(); err != nil {
		return nil, fmt.Errorf("docker: attach: %w", err)
	}
	s := &Sandbox{cli: cli, ws: w, cg: p.cg, log: p.log}
	img := st.image.ID
	var rootMounts []mount.Mount
	if w.RootDir != "" && w.RootWritable {
		if img, rootMounts, err = p.ownRoot(ctx, cli, st, w.RootDir); err != nil {
			return nil, fmt.Errorf("docker: attach %s: %w", w.ID, err)
		}
	} else if w.RootDir != "" {
		if img, err = p.rootDirImage(ctx, cli, st, w.RootDir); err != nil {
			return nil, fmt.Errorf("docker: attach %s: %w", w.ID, err)
		}
		s.rootImg = img
		p.mu.Lock()
		if p.rootImages == nil {
			p.rootImages = map[string]bool{}
		}
		p.rootImages[img] = true
		p.mu.Unlock()
	}

	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	name := "layerfs-" + w.ID + "-" + hex.EncodeToString(rnd[:])
	bind, clone, ids, err := p.sandboxNS(st, w, name)
	if err != nil {
		s.removeRootImage(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("docker: attach %s: %w", w.ID, err)
	}
	s.ids, s.noUserNS, s.clone, s.filter = ids, st.userNS.why, clone, st.userNS.filter
	labels := map[string]string{labelWorkspace: w.ID, labelOwner: p.owner, labelPidNS: pidNamespace()}
	cfg := &container.Config{
		Image:      img,
		Cmd:        []string{supervisorPath, "idle"},
		Env:        []string{"PATH=" + imagePath},
		WorkingDir: workspaceDir,
		User:       "0:0",
		Labels:     labels,
	}
	pids := p.opts.Pids
	hc := &container.HostConfig{
		NetworkMode: "none",
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: bind, Target: workspaceDir,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
			{Type: mount.TypeBind, Source: st.supervisor, Target: supervisorPath, ReadOnly: true},
		},
		Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", p.opts.TmpBytes)},
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", "seccomp=" + st.seccomp},
		IpcMode:        container.IPCModePrivate,
		LogConfig:      container.LogConfig{Type: "none"},
		Resources: container.Resources{
			Memory:     p.opts.MemoryBytes,
			MemorySwap: p.opts.MemoryBytes, // no swap on top
			PidsLimit:  &pids,
		},
	}
	hc.Mounts = append(hc.Mounts, rootMounts...)
	if ids != nil {
		// The supervisor (the container's root, the host's uid 0) forks
		// each command into a user namespace with ids' mapping: writing a
		// mapping of more than its own id takes CAP_SETUID and CAP_SETGID
		// in the host's namespace, and the fork a profile that allows
		// it. The command has neither; see supervise.
		hc.CapAdd = []string{"CAP_SETUID", "CAP_SETGID"}
		hc.SecurityOpt = []string{"no-new-privileges", "seccomp=" + st.userNS.seccomp}
	}
	if w.Network {
		hc.NetworkMode = "host" // the host's network, as the contract says
	} else {
		cfg.Hostname = platforms.DefaultHostname
	}
	created, err := cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		s.removeRootImage(context.WithoutCancel(ctx))
		s.dropClone()
		return nil, fmt.Errorf("docker: attach %s: create container: %w", w.ID, err)
	}
	s.id = created.ID
	p.mu.Lock()
	if p.containers == nil {
		p.containers = map[string]bool{}
	}
	p.containers[s.id] = true
	p.mu.Unlock()
	if err := cli.ContainerStart(ctx, s.id, container.StartOptions{}); err != nil {
		cerr := s.Close(context.WithoutCancel(ctx))
		return nil, errors.Join(fmt.Errorf("docker: attach %s: start container: %w", w.ID, err), cerr)
	}
	ins, err := cli.ContainerInspect(ctx, s.id)
	if err != nil {
		cerr := s.Close(context.WithoutCancel(ctx))
		return nil, errors.Join(fmt.Errorf("docker: attach %s: inspect container: %w", w.ID, err), cerr)
	}
	s.hostname = ins.Config.Hostname
	if w.RootDir != "" && w.RootWritable {
		if err := pivotRoot(ctx, ins.State); err != nil {
			cerr := s.Close(context.WithoutCancel(ctx))
			return nil, errors.Join(fmt.Errorf("docker: attach %s: %w", w.ID, err), cerr)
		}
	}
	s.net = netState{p: p, pid: ins.State.Pid, mode: w.Mode(), events: w.NetEvents}
	if err := s.SetNetwork(ctx, w.Mode(), w.Egress); err != nil {
		cerr := s.Close(context.WithoutCancel(ctx))
		return nil, errors.Join(fmt.Errorf("docker: attach %s: %w", w.ID, err), cerr)
	}
	p.log.Debug("docker attach", "workspace", w.ID, "container", s.id[:12], "host_path", w.HostPath)
	return s, nil
}

// rootDirImage imports a Workspace.RootDir as an image, after checking that
// the supervisor can run on it.
func (p *Platform) rootDirImage(ctx context.Context, cli *client.Client, st upState, dir string) (string, error) {
	if err := supervisorRunsIn(st, dir); err != nil {
		return "", err
	}
	r, err := rootDirFS(dir)
	if err != nil {
		return "", fmt.Errorf("%w: %w", platforms.ErrBadSpec, err)
	}
	b, err := ensureImage(ctx, cli, rootDirRepo, "rootdir", r)
	if err != nil {
		return "", err
	}
	return b.ID, nil
}

// supervisorRunsIn checks that the supervisor can run in the root
// directory dir: a dynamically linked one needs its interpreter there.
func supervisorRunsIn(st upState, dir string) error {
	_, interp, _, err := elfNeeds(st.supervisor)
	if err != nil {
		return fmt.Errorf("supervisor %s: %w", st.supervisor, err)
	}
	if interp != "" {
		if _, err := os.Stat(filepath.Join(dir, interp)); err != nil {
			return fmt.Errorf("%w: root dir %s lacks %s, which the dynamically linked supervisor %s needs "+
				"(build it with CGO_ENABLED=0)", platforms.ErrBadSpec, dir, interp, st.supervisor)
		}
	}
	return nil
}

// ownRoot gives a container the workspace's own copy-on-write root (a
// writable RootDir, kernel overlayfs over an image's tree on this host):
// the container's image holds only the root's top-level shape (its
// symlinks, such as /bin -> usr/bin, and empty directories and files, a
// few hundred bytes, built once per shape), every top-level directory
// and file of the root is bound over it read-write, and the whole root at
// rootBind, which Attach then makes the container's root (pivotRoot), so
// what an exec installs, a new top-level directory included, lands in the
// workspace's root, and opening costs no copy of the image.
func (p *Platform) ownRoot(ctx context.Context, cli *client.Client, st upState, dir string) (string, []mount.Mount, error) {
	if err := supervisorRunsIn(st, dir); err != nil {
		return "", nil, err
	}
	r, binds, err := rootShapeFS(dir)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", platforms.ErrBadSpec, err)
	}
	if err := runtimeFiles(dir, st); err != nil {
		return "", nil, err
	}
	if err := pivotPoints(dir, st); err != nil {
		return "", nil, err
	}
	b, err := ensureImage(ctx, cli, rootDirRepo, "rootshape", r)
	if err != nil {
		return "", nil, err
	}
	var mounts []mount.Mount
	for _, name := range binds {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: filepath.Join(dir, name), Target: "/" + name,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: dir, Target: rootBind,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	return b.ID, mounts, nil
}

// rootBind is where a container binds its workspace's whole root, to make
// it its root (pivotRoot).
const rootBind = supervisorDir + "/root"

// pivotMounts are the container's own mounts that pivotRoot moves into
// the workspace's root: those Docker makes (with what is mounted below
// them), the workspace and the supervisor.
var pivotMounts = []string{"/proc", "/dev", "/sys", "/tmp", workspaceDir,
	"/etc/resolv.conf", "/etc/hostname", "/etc/hosts", supervisorPath}

// pivotPoints makes in the root dir the mount points pivotRoot moves the
// container's mounts to, where it lacks them, as the sandboxes' root (see
// runtimeFiles; the /etc files are runtimeFiles's).
func pivotPoints(dir string, st upState) error {
	mk := func() error {
		for _, m := range pivotMounts {
			if strings.HasPrefix(m, "/etc/") {
				continue
			}
			p := filepath.Join(dir, m)
			fi, err := os.Lstat(p)
			switch {
			case err == nil && m == supervisorPath && fi.Mode().IsRegular(), err == nil && m != supervisorPath && fi.IsDir():
				continue
			case err == nil:
				return fmt.Errorf("%w: root dir %s: %s is a %s, where the sandbox mounts its own", platforms.ErrBadSpec, dir, m, fi.Mode().Type())
			case !errors.Is(err, os.ErrNotExist):
				return fmt.Errorf("root dir %s: %w", dir, err)
			}
			if m != supervisorPath {
				if err := os.Mkdir(p, 0o755); err != nil {
					return fmt.Errorf("root dir %s: make %s to mount over: %w", dir, m, err)
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return fmt.Errorf("root dir %s: %w", dir, err)
			}
			fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o755)
			if err != nil {
				return fmt.Errorf("root dir %s: make %s to mount over: %w", dir, m, err)
			}
			unix.Close(fd)
		}
		return nil
	}
	if st.userNS.ns != nil {
		return fsids.Do(st.userNS.ids.Host, mk)
	}
	return mk()
}

// pivotRoot makes the workspace's root bound at rootBind the root of the
// container whose state is st (its first process), from the host (nsenter into its
// mount and pid namespaces, as this host's root: the container has no capability
// to mount), with the container's own mounts moved into it; see
// supervise's pivot. Execs then see the workspace's root as theirs, new
// top-level names included.
func pivotRoot(ctx context.Context, st *container.State) error {
	if st == nil || st.Pid <= 0 {
		return errors.New("make the workspace's root the container's: the container has no process")
	}
	pid := st.Pid
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("%w: a workspace's own root on docker needs nsenter (util-linux) on the daemon's host: %w", platforms.ErrUnavailable, err)
	}
	// In its pid namespace too, so that its /proc is the pivot's own.
	args := append([]string{fmt.Sprintf("--mount=/proc/%d/ns/mnt", pid), fmt.Sprintf("--pid=/proc/%d/ns/pid", pid), "--",
		supervisorPath, "pivot", rootBind}, pivotMounts...)
	out, err := exec.CommandContext(ctx, nsenter, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("make the workspace's root the container's: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// runtimeFiles are the files Docker binds its own over in a container's
// /etc: they must be there for it to bind them (it cannot create one in a
// root whose layers are id-mapped for the sandboxes' user namespace).
var dockerBindFiles = []string{"etc/resolv.conf", "etc/hosts", "etc/hostname"}

// runtimeFiles makes the empty files Docker binds over in the root dir
// where its /etc lacks them, as the sandboxes' root (their owner inside,
// 0, is the id the root's layers map).
func runtimeFiles(dir string, st upState) error {
	if _, err := os.Stat(filepath.Join(dir, "etc")); err != nil {
		return nil // no /etc: Docker makes its own
	}
	mk := func() error {
		for _, f := range dockerBindFiles {
			if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
				continue // opened for writing, it would be copied up
			}
			fd, err := unix.Open(filepath.Join(dir, f), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return fmt.Errorf("root dir %s: make %s for Docker to bind over: %w", dir, f, err)
			}
			unix.Close(fd)
		}
		return nil
	}
	if st.userNS.ns != nil {
		return fsids.Do(st.userNS.ids.Host, mk)
	}
	return mk()
}

// Close removes the container (and a root-dir image no one else uses).
// Calling it again does nothing.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.netns != nil {
		s.netns.Close()
		s.netns = nil
	}
	s.mu.Unlock()
	var err error
	if s.id != "" {
		err = s.cli.ContainerRemove(ctx, s.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if gone(err) {
			err = nil // Down (or a cleanup of dead owners) got there first
		}
		if err != nil {
			err = fmt.Errorf("docker: close %s: remove container %s: %w", s.ws.ID, s.id[:12], err)
		}
	}
	s.removeRootImage(ctx)
	s.dropClone()
	return errors.Join(err, s.net.close())
}

// DialPort connects to port in the container's network namespace
// (platforms.PortDialer), where every exec of the workspace runs: the
// namespace of the container's first process, which the engine runs on
// this host, entered by the daemon (see internal/portfwd).
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if err := portfwd.CheckPort(port); err != nil {
		return nil, err
	}
	if s.ws.Network {
		return nil, fmt.Errorf("docker: port %d of %s: %w", port, s.ws.ID, platforms.ErrHostNetwork)
	}
	ns, err := s.containerNetNS(ctx)
	if err != nil {
		return nil, fmt.Errorf("docker: port %d of %s: %w", port, s.ws.ID, err)
	}
	c, err := portfwd.Dial(ctx, ns, port)
	if err != nil {
		return nil, fmt.Errorf("docker: port %d of workspace %s: %w", port, s.ws.ID, err)
	}
	return c, nil
}

// containerNetNS opens the container's network namespace, once: by the
// pid of its first process, which is the container's while the container
// runs (checked again once it is open).
func (s *Sandbox) containerNetNS(ctx context.Context) (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, platforms.ErrClosed
	}
	if s.netns != nil {
		return s.netns, nil
	}
	pid := func() (int, error) {
		ins, err := s.cli.ContainerInspect(ctx, s.id)
		switch {
		case err != nil:
			return 0, fmt.Errorf("%w: inspect container: %w", platforms.ErrClosed, err)
		case ins.State == nil || !ins.State.Running || ins.State.Pid <= 0:
			return 0, fmt.Errorf("%w: container %s is not running", platforms.ErrClosed, s.id[:12])
		}
		return ins.State.Pid, nil
	}
	before, err := pid()
	if err != nil {
		return nil, err
	}
	ns, err := os.Open("/proc/" + strconv.Itoa(before) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("%w: the container's network namespace (is the Docker engine on this host?): %w", platforms.ErrNoPorts, err)
	}
	if after, err := pid(); err != nil || after != before {
		ns.Close()
		return nil, fmt.Errorf("%w: container %s changed while its namespace was opened", platforms.ErrClosed, s.id[:12])
	}
	s.netns = ns
	return ns, nil
}

// dropClone unmounts the workspace's id-mapped clone, if it has one.
func (s *Sandbox) dropClone() {
	if s.clone == "" {
		return
	}
	if err := dropClone(s.clone); err != nil {
		s.log.Warn("docker: id-mapped workspace left behind", "workspace", s.ws.ID, "err", err)
	}
}

func (s *Sandbox) removeRootImage(ctx context.Context) {
	if s.rootImg != "" {
		// In use by another workspace's container: a conflict, left for Down.
		_ = pruneImageID(ctx, s.cli, s.rootImg)
	}
}

// Exec runs spec.Argv in the workspace's container through the supervisor.
func (s *Sandbox) Exec(ctx context.Context, spec platforms.ExecSpec, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	usage := s.net.usage()
	res, err := s.exec(ctx, spec, stdout, stderr)
	res.Network = usage()
	return res, err
}

// exec is Exec without its network usage.
func (s *Sandbox) exec(ctx context.Context, spec platforms.ExecSpec, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	start := time.Now()
	var res platforms.ExecResult
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return res, fmt.Errorf("docker: exec in %s: %w", s.ws.ID, platforms.ErrClosed)
	}
	spec, err := spec.Normalize()
	if err != nil {
		return res, fmt.Errorf("docker: exec in %s: %w", s.ws.ID, err)
	}
	if spec.Terminal != nil {
		return res, fmt.Errorf("docker: exec in %s: %w", s.ws.ID, platforms.ErrNoTerminal)
	}
	opts, err := s.execOptions(spec)
	if err != nil {
		return res, fmt.Errorf("docker: exec in %s: %w", s.ws.ID, err)
	}

	limited := s.cg != nil && (spec.MemoryBytes > 0 || spec.Pids > 0 || spec.MilliCPUs > 0)
	if limited {
		opts.AttachStdin = true
		opts.Cmd = slices.Insert(opts.Cmd, 3, "wait")
	}

	created, err := s.cli.ContainerExecCreate(ctx, s.id, opts)
	if err != nil {
		return res, fmt.Errorf("docker: exec in %s: create: %w", s.ws.ID, err)
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return res, fmt.Errorf("docker: exec in %s: start: %w", s.ws.ID, err)
	}
	defer hj.Close()
	if limited {
		cg, err := s.limitAndRelease(ctx, created.ID, spec, &hj)
		if cg != nil {
			defer func() {
				if rerr := cg.remove(); rerr != nil {
					s.log.Warn("docker: exec cgroup left behind", "err", rerr)
				}
			}()
		}
		if err != nil {
			return res, fmt.Errorf("docker: exec in %s: limits: %w", s.ws.ID, err)
		}
	}
	if spec.Stdin == nil && limited {
		_ = hj.CloseWrite()
	}
	if spec.Stdin != nil {
		go func() {
			// A command that exits without reading all its input makes
			// this copy fail; that is not an error of the exec.
			_, _ = io.Copy(hj.Conn, spec.Stdin)
			_ = hj.CloseWrite()
		}()
	}
	outW, errCap := outputcap.Pair(stdout, stderr, spec.OutputLimit)
	errW := &tailWriter{next: errCap, keep: supervise.TrailerLen}
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(outW, errW, hj.Reader)
		done <- err
	}()

	timedOut, stopErr := s.await(ctx, created.ID, &hj, done, spec.Timeout)
	res.TimedOut = timedOut

	tr, terr := supervise.DecodeTrailer(errW.tail())
	if terr != nil {
		_, _ = errCap.Write(errW.tail()) // it was the command's, or the engine's, stderr
		res.ExitCode = s.exitCode(ctx, created.ID)
		res.Wall = time.Since(start)
		res.Launch = res.Wall
		if stopErr != nil {
			return res, stopErr
		}
		return res, fmt.Errorf("docker: exec %q in %s: %w (exit code %d)", spec.Argv[0], s.ws.ID, ErrSupervisor, res.ExitCode)
	}
	res.ExitCode = tr.Exit
	res.UserNamespace = "none: " + s.noUserNS
	if s.ids != nil {
		res.UserNamespace = s.ids.String()
	}
	if tr.Signal != 0 {
		res.Signal = unix.SignalName(unix.Signal(tr.Signal))
	}
	res.TimedOut = res.TimedOut || tr.Flags&supervise.FlagTimedOut != 0
	res.OutputTruncated = outW.Truncated() || errCap.Truncated()
	res.Command = tr.Command
	res.Wall = time.Since(start)
	res.Launch = res.Wall - res.Command
	if stopErr != nil {
		return res, stopErr
	}
	if err := errors.Join(outW.Err(), errCap.Err()); err != nil {
		return res, fmt.Errorf("docker: exec in %s: write output: %w", s.ws.ID, err)
	}
	return res, nil
}

// limitAndRelease puts the exec's supervisor into cgroups with the spec's
// limits, then lets it start the command by a newline on its stdin. When
// that fails it closes hj, so the supervisor reads EOF and exits without
// starting the command. The cgroup it returns, even with an error, is the
// caller's to remove.
func (s *Sandbox) limitAndRelease(ctx context.Context, execID string, spec platforms.ExecSpec, hj *types.HijackedResponse) (*execCgroup, error) {
	cg, err := s.limit(ctx, execID, spec)
	if err == nil {
		_, err = hj.Conn.Write([]byte{'\n'})
	}
	if err != nil {
		hj.Close()
	}
	return cg, err
}

// await waits for the exec's output to end (done), stopping the exec when
// ctx ends or its timeout and a grace have passed. timedOut says the
// backstop stopped it; err is the exec's failure to report, if any.
func (s *Sandbox) await(ctx context.Context, execID string, hj *types.HijackedResponse, done chan error, timeout time.Duration) (timedOut bool, err error) {
	backstop := time.NewTimer(timeout + stopGrace)
	defer backstop.Stop()
	var readErr error
	select {
	case readErr = <-done:
	case <-ctx.Done():
		s.stop(ctx, execID, hj, done)
		return false, fmt.Errorf("docker: exec in %s: %w", s.ws.ID, ctx.Err())
	case <-backstop.C:
		timedOut = true
		readErr = s.stop(ctx, execID, hj, done)
	}
	if readErr != nil {
		return timedOut, fmt.Errorf("docker: exec in %s: read output: %w", s.ws.ID, readErr)
	}
	return timedOut, nil
}

// exitCode is the exit code the engine reports for the exec, -1 when it
// cannot say.
func (s *Sandbox) exitCode(ctx context.Context, execID string) int {
	ins, err := s.cli.ContainerExecInspect(context.WithoutCancel(ctx), execID)
	if err != nil {
		return -1
	}
	return ins.ExitCode
}

// limit puts the exec's supervisor into cgroups with the spec's limits.
func (s *Sandbox) limit(ctx context.Context, execID string, spec platforms.ExecSpec) (*execCgroup, error) {
	pid, err := s.supervisorPid(ctx, execID)
	if err != nil {
		return nil, err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return s.cg.limit(pid, execCgroupPrefix+hex.EncodeToString(rnd[:]), spec.MemoryBytes, int64(spec.Pids), spec.MilliCPUs)
}

// supervisorPid waits until the engine reports the exec's pid, which it
// does only once the process runs, and checks that it is a supervisor.
func (s *Sandbox) supervisorPid(ctx context.Context, execID string) (int, error) {
	deadline := time.Now().Add(stopGrace)
	for delay := 200 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		ins, err := s.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return 0, err
		}
		// Until runc has exec'd it, the process is "runc init".
		if ins.Pid > 0 && isSupervisor(ins.Pid) {
			return ins.Pid, nil
		}
		if time.Now().After(deadline) {
			if ins.Pid > 0 {
				return 0, fmt.Errorf("exec pid %d is not a supervisor visible from this host", ins.Pid)
			}
			return 0, fmt.Errorf("exec %s did not start", execID[:12])
		}
		time.Sleep(delay)
	}
}

// execOptions turns a normalized spec into the docker exec that runs it
// under the supervisor.
func (s *Sandbox) execOptions(spec platforms.ExecSpec) (container.ExecOptions, error) {
	if spec.Hostname != "" && spec.Hostname != s.hostname {
		return container.ExecOptions{}, fmt.Errorf("%w: hostname %q: docker sets one hostname (%q) per workspace container", platforms.ErrBadSpec, spec.Hostname, s.hostname)
	}
	user := strconv.Itoa(spec.UID) + ":" + strconv.Itoa(spec.GID)
	o := container.ExecOptions{
		User:         user,
		AttachStdin:  spec.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Env:          spec.Env,
		WorkingDir:   spec.Workdir(),
		Cmd:          append([]string{supervisorPath, "exec", strconv.FormatInt(int64(spec.Timeout), 10), "--"}, spec.Argv...),
	}
	if spec.OpenFiles > 0 {
		o.Cmd = slices.Insert(o.Cmd, 3, "nofile="+strconv.Itoa(spec.OpenFiles))
	}
	if s.ids != nil {
		// The supervisor stays the container's root, to make the command's
		// namespace; the command takes the spec's ids inside it.
		o.User = "0:0"
		o.Cmd = slices.Insert(o.Cmd, 3, "userns="+s.ids.Arg(), "as="+user)
		o.Env = append(slices.Clone(o.Env), supervise.FilterEnv+"="+s.filter)
	}
	return o, nil
}

// stop ends an exec that the host gave up waiting for. Docker has no API to
// kill an exec, so the host signals the supervisor (a process it can see:
// the engine runs on this host), which kills its whole tree and reports;
// if the supervisor does not finish, the host kills the tree itself; and if
// the stream still does not end, it drops the connection.
func (s *Sandbox) stop(ctx context.Context, execID string, hj interface{ Close() }, done <-chan error) error {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopGrace)
	ins, err := s.cli.ContainerExecInspect(ictx, execID)
	cancel()
	pid := 0
	if err == nil && isSupervisor(ins.Pid) {
		pid = ins.Pid
	}
	if pid > 0 {
		_ = unix.Kill(pid, unix.SIGTERM)
		select {
		case err := <-done:
			return err
		case <-time.After(stopGrace):
		}
		for _, p := range append(supervise.Descendants(pid), pid) {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		select {
		case err := <-done:
			return err
		case <-time.After(stopGrace):
		}
	}
	hj.Close()
	<-done
	if err != nil {
		return fmt.Errorf("%w: exec %s did not stop (pid %d): inspect: %w", ErrSupervisor, execID[:12], pid, err)
	}
	return fmt.Errorf("%w: exec %s did not stop (pid %d)", ErrSupervisor, execID[:12], pid)
}

// tailWriter passes on all but the last keep bytes written to it.
type tailWriter struct {
	next io.Writer
	keep int
	buf  []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.keep; over > 0 {
		if _, err := t.next.Write(t.buf[:over]); err != nil {
			return 0, err
		}
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailWriter) tail() []byte { return t.buf }

// isSupervisor tells whether host pid is a supervisor, so that a pid from an
// engine in another PID namespace is never signalled here by mistake.
func isSupervisor(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := strings.Cut(string(b), "\x00")
	return path.Base(argv0) == supervise.Name
}
