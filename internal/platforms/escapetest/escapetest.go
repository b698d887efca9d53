package escapetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/loopfs"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/testenv"
)

// Case is one attempt to get out of the sandbox.
type Case struct {
	Name string
	// Probe is the probe's arguments; Shell, when set, is a shell body run
	// instead (for attempts through ordinary tools such as unshare(1)),
	// which must exit non-zero.
	Probe []string
	Shell string
	UID   int // run as this uid (0: root inside the sandbox)
	// Mechanism is what stops it, for the log and docs/security.md.
	Mechanism string
	// Control cases must be allowed.
	Control bool
	// Errnos, when set, are the only refusals accepted (EPERM where the
	// seccomp filter must be what refuses).
	Errnos []string
	// Absent names a workspace path (as the sandbox sees it) that must
	// not exist on the host after the case.
	Absent string
	// Host, when set, checks on the host after the run that nothing
	// changed; it returns a problem or "".
	Host func() string
	// UserNS cases hold only where the sandbox runs in a user namespace
	// of its own; elsewhere (docker without userns-remap) they are run and
	// reported, not failed.
	UserNS bool
}

// hostFixture is what the suite sets up on the host for the cases to aim at.
type hostFixture struct {
	marker   string // a file that exists only on the host
	unixSock string // a listening unix socket, as the daemon's
	abstract string // a listening abstract unix socket
	tcp      string // a listening TCP address on 127.0.0.1
	pid      int    // this process, as the daemon
}

// Cases is the suite, given the host fixture.
func cases(h hostFixture) []Case {
	const seccomp = "seccomp filter (internal/seccomp)"
	eperm := []string{"EPERM"}
	return []Case{
		{Name: "open_by_handle_at on the host's root", Probe: []string{"open-by-handle"}, Errnos: eperm,
			Mechanism: seccomp + "; no CAP_DAC_READ_SEARCH"},
		{Name: "name_to_handle_at", Probe: []string{"name-to-handle"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "mount", Probe: []string{"mount"}, Errnos: eperm, Mechanism: seccomp + "; no CAP_SYS_ADMIN"},
		{Name: "unshare(CLONE_NEWNS)", Probe: []string{"unshare-mnt"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "unshare(CLONE_NEWUSER)", Probe: []string{"unshare-user"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "clone(CLONE_NEWUSER)", Probe: []string{"clone-newuser"}, Errnos: eperm, Mechanism: seccomp + " (clone flags)"},
		{Name: "unshare -m (util-linux)", Shell: "unshare -m true", Mechanism: seccomp},
		{Name: "setns into PID 1's mount namespace", Probe: []string{"setns", "1"}, Mechanism: seccomp + "; PID 1 not dumpable"},
		{Name: "chroot", Probe: []string{"chroot"}, Errnos: eperm, Mechanism: seccomp + "; no CAP_SYS_CHROOT"},
		{Name: "bpf", Probe: []string{"bpf"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "perf_event_open", Probe: []string{"perf-event-open"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "keyctl", Probe: []string{"keyctl"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "add_key", Probe: []string{"add-key"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "userfaultfd", Probe: []string{"userfaultfd"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "io_uring_setup", Probe: []string{"io-uring-setup"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "kexec_load", Probe: []string{"kexec-load"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "init_module", Probe: []string{"init-module"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "reboot", Probe: []string{"reboot"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "swapon", Probe: []string{"swapon"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "acct", Probe: []string{"acct"}, Errnos: eperm, Mechanism: seccomp},
		{Name: "AF_VSOCK socket", Probe: []string{"vsock"}, Errnos: eperm, Mechanism: seccomp + " (socket domains)"},
		{Name: "host path through /proc/PID/root", Probe: []string{"proc-root", h.marker},
			Mechanism: "PID namespace; private mount namespace; the init is not dumpable"},
		{Name: "ptrace of the daemon", Probe: []string{"ptrace", strconv.Itoa(h.pid)},
			Mechanism: "PID namespace (the daemon has no pid inside)", Host: func() string { return tracerOf(h.pid) }},
		{Name: "write /proc/sys", Probe: []string{"write", "/proc/sys/vm/swappiness"}, Mechanism: "/proc/sys read-only"},
		{Name: "write /proc/sysrq-trigger", Probe: []string{"write", "/proc/sysrq-trigger"}, Mechanism: "read-only or masked"},
		{Name: "write /sys", Probe: []string{"write", "/sys/kernel/mm/transparent_hugepage/enabled"}, Mechanism: "/sys read-only"},
		{Name: "read /proc/kcore", Probe: []string{"read", "/proc/kcore"}, Mechanism: "masked; no CAP_SYS_RAWIO"},
		{Name: "read /proc/timer_list", Probe: []string{"read", "/proc/timer_list"}, Mechanism: "masked"},
		{Name: "read /proc/keys", Probe: []string{"read", "/proc/keys"}, Mechanism: "masked"},
		{Name: "mknod in the workspace", Probe: []string{"mknod", "/workspace/.probe-null"}, Mechanism: "no CAP_MKNOD; nodev",
			Absent: "/workspace/.probe-null"},
		{Name: "mknod in /tmp", Probe: []string{"mknod", "/tmp/null"}, Mechanism: "no CAP_MKNOD; nodev"},
		{Name: "setuid-root program in the workspace", Probe: []string{"setuid-exec", "/workspace/.probe-suid"}, UID: 65534,
			Mechanism: "nosuid workspace mount; no_new_privs"},
		{Name: "hard link to a file outside the workspace", Probe: []string{"hardlink", "/etc/passwd", "/workspace/.probe-link"},
			Mechanism: "mount boundary (EXDEV); read-only root", Absent: "/workspace/.probe-link"},
		{Name: "the daemon's unix socket", Probe: []string{"connect-unix", h.unixSock}, Mechanism: "mount namespace (the path is not there)"},
		{Name: "an abstract unix socket of the host", Probe: []string{"connect-unix", h.abstract}, Mechanism: "network namespace"},
		{Name: "the host's loopback TCP", Probe: []string{"connect-tcp", h.tcp}, Mechanism: "network namespace"},
		{Name: "fill the workspace past its quota", Shell: "dd if=/dev/zero of=/workspace/.fill bs=1M count=256 status=none; rc=$?; rm -f /workspace/.fill; exit $rc",
			Mechanism: "the workspace's own sized file system (a workspace quota)"},
		{Name: "uid 0 inside is the host's uid 0", Probe: []string{"host-root"}, UserNS: true,
			Mechanism: "user namespace: /proc/self/uid_map maps 0 to an unprivileged host uid"},
		{Name: "write a host root file: /proc/1/oom_score_adj", Probe: []string{"write", "/proc/1/oom_score_adj"}, UserNS: true,
			Mechanism: "user namespace: the host's uid 0 (owner, mode 0644) is not the sandbox's"},
		{Name: "read a 0600 file of an unmapped host uid", Probe: []string{"read", "/workspace/" + foreignName},
			Mechanism: "no capabilities over ids outside the user namespace (no capabilities at all without one)"},
		{Name: "control: an AF_INET socket", Probe: []string{"socket-inet"}, Control: true},
		{Name: "control: write the workspace", Probe: []string{"write-workspace"}, Control: true},
	}
}

// Run brings p up, attaches a workspace, runs every case and brings p down.
func Run(t *testing.T, p platforms.Platform) {
	sh, ok := p.(platforms.SandboxHost)
	if !ok {
		t.Fatalf("%s: the escape suite needs a SandboxHost platform", p.Name())
	}
	probe := buildProbe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := p.Up(ctx); err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Down(context.Background()); err != nil {
			t.Errorf("Down: %v", err)
		}
	})
	id, err := p.Identity(ctx)
	if err != nil {
		t.Fatalf("Identity: %v", err)
	}
	t.Logf("platform %s: %s", id.Platform, id.Details)

	h := fixture(t)
	for _, kind := range []string{"directory", "overlay"} {
		t.Run(kind, func(t *testing.T) { runOn(t, ctx, p, sh, kind, probe, h) })
	}
}

// runOn runs every case on a workspace of kind: "directory", a directory
// of its own file system (what a sandbox sees of a FUSE workspace: a mount
// it can id-map itself), or "overlay", kernel overlayfs (the default data
// path) over a plain lower directory and an upper on that file system,
// over id-mapped layers where the platform maps ids (platforms.IDMapper).
func runOn(t *testing.T, ctx context.Context, p platforms.Platform, sh platforms.SandboxHost, kind, probe string, h hostFixture) {
	ws, idmapped := workspace(t, p, kind, func(dir string) {
		if err := os.Chmod(dir, 0o755); err != nil { // the setuid case runs as another uid
			t.Fatal(err)
		}
		copyFile(t, probe, filepath.Join(dir, ".probe"), 0o755)
		copyFile(t, probe, filepath.Join(dir, ".probe-suid"), 0o4755)
		foreign := filepath.Join(dir, foreignName)
		if err := os.WriteFile(foreign, []byte("host only\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(foreign, foreignID, foreignID); err != nil {
			t.Fatal(err)
		}
	})

	var b [4]byte
	_, _ = rand.Read(b[:])
	sb, err := sh.Attach(ctx, platforms.Workspace{ID: "escape-" + hex.EncodeToString(b[:]), HostPath: ws, IDMapped: idmapped})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer func() {
		if err := sb.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()

	userNS := uidMap(t, ctx, sb)
	t.Logf("uid_map in the sandbox: %q", userNS)
	hasUserNS := !strings.HasPrefix(userNS, "0 0 ")
	if m, ok := p.(platforms.IDMapper); ok {
		_, _, _, err := m.IDMap()
		switch {
		case err != nil:
			testenv.Skip(t, p.Name()+" has no user namespace here: "+err.Error())
		case !hasUserNS:
			t.Errorf("%s runs sandboxes in a user namespace, but one on the %s workspace got none (uid_map %q)",
				p.Name(), kind, userNS)
		}
	}

	var report strings.Builder
	for _, c := range cases(h) {
		t.Run(c.Name, func(t *testing.T) {
			if c.UserNS && !hasUserNS {
				fmt.Fprintf(&report, "  %-45s %-18s %s\n", c.Name, "not held", "no user namespace on "+p.Name())
				t.Logf("not held here: %s has no user namespace of its own (uid_map %q)", p.Name(), userNS)
				return
			}
			got := runCase(t, ctx, sb, ws, c)
			fmt.Fprintf(&report, "  %-45s %-18s %s\n", c.Name, got, c.Mechanism)
		})
	}
	t.Logf("escape suite on %s, %s workspace:\n%s", p.Name(), kind, report.String())
}

// workspace makes a workspace of kind (see runOn) on a file system of its
// own of quotaSize, as the engine makes for a workspace with a quota, and
// returns its host path and whether it was mounted over id-mapped layers.
// fill puts the fixture's files into its directory (the overlay's lower)
// before anything is mounted over it: through id-mapped layers the host's
// root could not create them.
func workspace(t *testing.T, p platforms.Platform, kind string, fill func(dir string)) (string, bool) {
	fsDir := quotaWorkspace(t)
	if kind == "directory" {
		fill(fsDir)
		return fsDir, false
	}
	tmp := t.TempDir()
	lower, target := filepath.Join(tmp, "lower"), filepath.Join(tmp, "mnt")
	for _, d := range []string{lower, target, filepath.Join(fsDir, "upper"), filepath.Join(fsDir, "work")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fill(lower)
	var idmap *kerneloverlay.IDMap
	if m, ok := p.(platforms.IDMapper); ok {
		if ns, root, _, err := m.IDMap(); err == nil {
			idmap = &kerneloverlay.IDMap{UserNS: ns, Root: root}
		}
	}
	var err error
	if idmap != nil {
		err = kerneloverlay.MountIDMapped(lower, fsDir, target, idmap)
	} else {
		err = kerneloverlay.MountDirs(lower, filepath.Join(fsDir, "upper"), filepath.Join(fsDir, "work"), target, false)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the file system under it (cleanups run last first)
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the overlay: %v", err)
		}
	})
	return target, idmap != nil
}

// foreignName is the workspace file of foreignID.
const foreignName = ".probe-foreign"

// foreignID owns a workspace file that no sandbox's user namespace maps
// (they map 0-65535).
const foreignID = 70000

// uidMap is the first line of /proc/self/uid_map in the sandbox,
// normalised to "inside host size".
func uidMap(t *testing.T, ctx context.Context, sb platforms.Sandbox) string {
	var out, errb bytes.Buffer
	res, err := sb.Exec(ctx, platforms.ExecSpec{Argv: []string{"cat", "/proc/self/uid_map"}, Timeout: time.Minute}, &out, &errb)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("read uid_map: %v, exit %d, %s", err, res.ExitCode, errb.String())
	}
	line, _, _ := strings.Cut(out.String(), "\n")
	return strings.Join(strings.Fields(line), " ")
}

// runCase runs one case and returns what the sandbox answered.
func runCase(t *testing.T, ctx context.Context, sb platforms.Sandbox, ws string, c Case) string {
	spec := platforms.ExecSpec{UID: c.UID, GID: c.UID, Timeout: time.Minute}
	if c.Shell != "" {
		spec.Argv = platforms.ShellArgv(c.Shell)
	} else {
		spec.Argv = append([]string{"/workspace/.probe"}, c.Probe...)
	}
	var out, errb bytes.Buffer
	res, err := sb.Exec(ctx, spec, &out, &errb)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	stdout := strings.TrimSpace(out.String())
	got := stdout
	switch {
	case c.Shell != "":
		got = fmt.Sprintf("exit %d", res.ExitCode)
		if res.ExitCode == 0 {
			t.Errorf("%q succeeded; want it refused (stderr %q)", c.Shell, errb.String())
		}
	case res.ExitCode == 2:
		t.Fatalf("probe could not run the case: %s", errb.String())
	case c.Control:
		if res.ExitCode != 3 || stdout != "allowed" {
			t.Errorf("control case: got exit %d %q (stderr %q), want allowed", res.ExitCode, stdout, errb.String())
		}
	default:
		errno, refused := strings.CutPrefix(stdout, "refused: ")
		if res.ExitCode != 0 || !refused {
			t.Errorf("ESCAPE: got exit %d %q (stderr %q), want refused", res.ExitCode, stdout, errb.String())
		} else if len(c.Errnos) > 0 && !contains(c.Errnos, errno) {
			t.Errorf("refused with %s, want one of %v (the mechanism named is %s)", errno, c.Errnos, c.Mechanism)
		}
		got = strings.TrimPrefix(stdout, "refused: ")
		if got != stdout {
			got = "refused " + got
		}
	}
	if c.Absent != "" {
		p := filepath.Join(ws, strings.TrimPrefix(c.Absent, "/workspace/"))
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists on the host after the case", p)
			_ = os.Remove(p)
		}
	}
	if c.Host != nil {
		if msg := c.Host(); msg != "" {
			t.Error(msg)
		}
	}
	return got
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// tracerOf reports a tracer attached to pid, or "".
func tracerOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "read status: " + err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "TracerPid:"); ok && strings.TrimSpace(v) != "0" {
			return "the daemon is traced by pid " + strings.TrimSpace(v)
		}
	}
	return ""
}

// fixture makes the host-side targets: a marker file, a unix socket at a
// path, an abstract socket and a TCP listener, all served until the test
// ends.
func fixture(t *testing.T) hostFixture {
	dir, err := os.MkdirTemp("", "escapetest-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := hostFixture{marker: filepath.Join(dir, "host-only"), unixSock: filepath.Join(dir, "daemon.sock"), pid: os.Getpid()}
	if err := os.WriteFile(h.marker, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	h.abstract = "@layerfs-escapetest-" + hex.EncodeToString(b[:])
	for _, l := range []struct{ network, addr string }{{"unix", h.unixSock}, {"unix", h.abstract}, {"tcp", "127.0.0.1:0"}} {
		ln, err := net.Listen(l.network, l.addr)
		if err != nil {
			t.Fatalf("listen %s %s: %v", l.network, l.addr, err)
		}
		if l.network == "tcp" {
			h.tcp = ln.Addr().String()
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	return h
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, mode); err != nil { // after the write, which clears setuid
		t.Fatal(err)
	}
}

// quotaSize is the size of the workspace's file system: what a workspace
// with a quota gets from the engine (engine/quota.go).
const quotaSize = 64 << 20

// quotaWorkspace is a workspace directory on a file system of its own of
// quotaSize, as the engine makes for a workspace with a quota.
func quotaWorkspace(t *testing.T) string {
	dir := t.TempDir()
	img, ws := filepath.Join(dir, "ws.img"), filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := loopfs.Make(ctx, img, "ext4", quotaSize, "-m", "0"); err != nil {
		if errors.Is(err, loopfs.ErrToolMissing) {
			testenv.Skip(t, err.Error())
		}
		t.Fatal(err)
	}
	if err := loopfs.Mount(ctx, img, ws, "ext4"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := loopfs.Unmount(ws); err != nil {
			t.Errorf("unmount the workspace's file system: %v", err)
		}
	})
	return ws
}

// buildProbe builds ./probe, static, into a directory of the test's.
func buildProbe(t *testing.T) string { return buildTool(t, "probe") }

// buildTool builds the command in the suite's directory name, static, into
// a directory of the test's.
func buildTool(t *testing.T, name string) string {
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(testenv.GoTool(), "build", "-o", out, "layerfs.dev/layerfs/internal/platforms/escapetest/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v: %s", name, err, msg)
	}
	return out
}
