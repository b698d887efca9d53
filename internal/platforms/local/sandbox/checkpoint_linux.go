package sandbox

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/criu"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire/errclass"
)

// sandboxMount is one mount of a sandbox's mount namespace, as a
// checkpoint sees it.
type sandboxMount struct {
	point  string // as the sandbox sees it
	root   string // the mount's root within its file system
	fstype string
	source string
	opts   string // the mount's own options (ro, nosuid, ...)
}

// ownFS are the file systems a sandbox mounts itself: a restore makes
// them again (a tmpfs with what it held). Any other mount is external: a
// clone of the host's (the runtime, the workspace, a device node) that a
// restore binds anew.
var ownFS = map[string]bool{"tmpfs": true, "proc": true, "sysfs": true, "devpts": true, "mqueue": true}

// sandboxMounts reads the mounts of pid's mount namespace.
func sandboxMounts(pid int) ([]sandboxMount, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []sandboxMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		i := 6
		for i < len(fs) && fs[i] != "-" {
			i++
		}
		if i+2 >= len(fs) {
			return nil, fmt.Errorf("mountinfo of %d: %q", pid, sc.Text())
		}
		out = append(out, sandboxMount{point: unescapeMount(fs[4]), root: unescapeMount(fs[3]), fstype: fs[i+1], source: fs[i+2], opts: fs[5]})
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountKey is the key an external mount at point is dumped under.
func mountKey(point string) string {
	if point == "/" {
		return "root"
	}
	return strings.ReplaceAll(strings.TrimPrefix(point, "/"), "/", ".")
}

// controlMessage carries a resident init's renewed control socket.
const controlMessage = "ctl"

// A checkpoint holds the init's control socket as a socket of the
// sandbox's own network namespace whose peer is outside (CRIU finds
// sockets by their namespace): a resident init asked to (residentSignal's
// Renew) makes a new socket pair in its namespace, sends one end on the
// old socket and takes the other as its control socket. The launcher sends
// nothing else meanwhile (initConn.sendMu), so no message is left behind
// on the old socket.

// renewControl is the init's side of the renewal.
func (r *resident) renewControl() {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return // the launcher's renewal fails by its timeout
	}
	defer unix.Close(fds[1])
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	err = unix.Sendmsg(ctlFD, []byte(controlMessage), unix.UnixRights(fds[0]), nil, 0)
	unix.Close(fds[0])
	if err == nil {
		_ = unix.Dup3(fds[1], ctlFD, unix.O_CLOEXEC)
	}
}

// conn is the launcher's end of the control socket.
func (c *initConn) conn() *os.File {
	c.ctlMu.Lock()
	defer c.ctlMu.Unlock()
	return c.ctl
}

// sending takes the control socket for one message to a resident init;
// done gives it back.
func (c *initConn) sending() (ctl *os.File, done func()) {
	c.sendMu.Lock()
	return c.conn(), c.sendMu.Unlock
}

// takeControl takes a renewed control socket from the message's rights and
// returns it for the reader, or nil when the message is no renewal.
func (c *initConn) takeControl(oob []byte) syscall.RawConn {
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob); err == nil {
		for _, m := range msgs {
			if fs, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, fs...)
			}
		}
	}
	if len(fds) != 1 || unix.SetNonblock(fds[0], true) != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil
	}
	f := os.NewFile(uintptr(fds[0]), "init")
	rc, err := f.SyscallConn()
	c.ctlMu.Lock()
	if c.ctlClosed || err != nil {
		c.ctlMu.Unlock()
		f.Close()
		return nil
	}
	old := c.ctl
	c.ctl = f
	c.ctlMu.Unlock()
	old.Close()
	select {
	case c.renewed <- struct{}{}:
	default:
	}
	return rc
}

// renewControl has a resident init renew its control socket in its own
// network namespace and waits for the new one.
func (c *initConn) renewControl(ctx context.Context) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	select { // a stale notice
	case <-c.renewed:
	default:
	}
	b, _ := json.Marshal(residentSignal{Renew: true})
	if err := sendSignal(c.conn(), b); err != nil {
		return fmt.Errorf("%w: renew the control socket: %w", platforms.ErrClosed, err)
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-c.renewed:
		return nil
	case <-c.done:
		return fmt.Errorf("%w: the sandbox ended", platforms.ErrClosed)
	case <-t.C:
		return fmt.Errorf("%w: the sandbox did not renew its control socket", ErrSetup)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A checkpoint of a Session's resident sandbox: its init and everything
// it runs (the services, their memory, files in /tmp and /dev/shm, IPC,
// sockets on the sandbox's own lo), dumped by CRIU (package criu) into a
// directory of images, with checkpointMeta beside them; a restore makes a
// fresh sandbox of it (checkpoint_restore_linux.go).

// metaFile is checkpointMeta's file in the images' directory.
const metaFile = "layerfs-sandbox.json"

// restoredExe is where a restored sandbox's root holds the init's binary,
// which a restored init runs from (criu.RelinkMemfdExe).
const restoredExe = "/.layerfs-init"

// checkpointMeta is what a restore needs beside CRIU's images.
type checkpointMeta struct {
	Network  bool              `json:"network,omitempty"`
	Image    string            `json:"image,omitempty"` // the root's image directory, "" for the host's runtime
	Limits   checkpointLimits  `json:"limits"`
	Seq      uint64            `json:"seq"`      // the last job id
	Control  uint64            `json:"control"`  // the init's control socket's inode
	Services []checkpointJob   `json:"services"` // by job
	Mounts   []checkpointMount `json:"mounts"`   // external
	Root     []checkpointEntry `json:"root"`     // the root's top-level entries
	ExeSize  int64             `json:"exe_size"`
}

type checkpointLimits struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	Pids        int   `json:"pids,omitempty"`
	MilliCPUs   int   `json:"milli_cpus,omitempty"`
}

// checkpointJob is one service: its job, pid inside the sandbox, start
// and the inodes of its output pipes.
type checkpointJob struct {
	Job     uint64    `json:"job"`
	Pid     int       `json:"pid"`
	Started time.Time `json:"started"`
	Stdout  uint64    `json:"stdout"`
	Stderr  uint64    `json:"stderr"`
}

// checkpointMount is an external mount: the runtime's entry Entry, the
// host's device node Device, or the workspace.
type checkpointMount struct {
	Key       string `json:"key"`
	Point     string `json:"point"`
	Entry     string `json:"entry,omitempty"`
	Device    string `json:"device,omitempty"`
	Workspace bool   `json:"workspace,omitempty"`
	File      bool   `json:"file,omitempty"`
	Attrs     uint64 `json:"attrs,omitempty"` // a device's MOUNT_ATTR_*
}

// checkpointEntry is a top-level entry of the sandbox's root.
type checkpointEntry struct {
	Name string `json:"name"`
	Link string `json:"link,omitempty"`
	File bool   `json:"file,omitempty"`
}

// CheckpointOptions are one checkpoint's.
type CheckpointOptions struct {
	// Dir receives the images (empty or absent); WorkDir criu's logs.
	Dir, WorkDir string
	// Stop ends the sandbox once dumped; else it runs on.
	Stop bool
	// Frozen runs while every process of the sandbox is frozen and the
	// images are complete (criu.Dump's Frozen).
	Frozen func(ctx context.Context) error
}

// CheckpointStats are what a checkpoint cost.
type CheckpointStats = criu.DumpStats

// ErrNoServices: a checkpoint of a Session that runs no services.
var ErrNoServices = errclass.New(errclass.Invalid, "no services run in the workspace's sandbox")

// Checkpoint dumps the Session's resident sandbox into opt.Dir. What the
// sandbox holds that cannot be checkpointed (criu.Scan's problems, an
// exec running beside the services) is refused before anything is frozen.
func (s *Session) Checkpoint(ctx context.Context, opt CheckpointOptions) (CheckpointStats, error) {
	if _, err := criu.Binary(); err != nil {
		return CheckpointStats{}, err
	}
	s.startMu.Lock() // no service starts meanwhile
	defer s.startMu.Unlock()
	s.mu.Lock()
	r := s.res
	s.mu.Unlock()
	if r == nil || !r.acquire() {
		return CheckpointStats{}, ErrNoServices
	}
	defer r.release()
	r.mu.Lock()
	execs := r.active - 1 - len(r.services)
	svcs := make([]*Service, 0, len(r.services))
	for sv := range r.services {
		svcs = append(svcs, sv)
	}
	r.mu.Unlock()
	if execs > 0 {
		return CheckpointStats{}, fmt.Errorf("%w: %d exec(s) run beside the services; checkpoint once they are done", criu.ErrUnsupported, execs)
	}
	if r.cfg.RootWritable && r.cfg.RootDir != "" {
		return CheckpointStats{}, fmt.Errorf("%w: a sandbox whose root is the workspace's own writable copy", criu.ErrUnsupported)
	}
	meta, err := r.checkpointMeta(svcs)
	if err != nil {
		return CheckpointStats{}, err
	}
	pid := r.ip.pid
	if meta.Control, err = r.renewControl(ctx); err != nil {
		return CheckpointStats{}, err
	}
	ps, err := criu.Scan(pid, func(hostPid, fd int) bool { return hostPid == pid && fd == ctlFD })
	if err != nil {
		return CheckpointStats{}, fmt.Errorf("%w: checkpoint: %w", ErrSetup, err)
	}
	if len(ps) > 0 {
		return CheckpointStats{}, criu.ProblemsError(ps)
	}
	ext := make([]criu.ExternalMount, len(meta.Mounts))
	for i, m := range meta.Mounts {
		ext[i] = criu.ExternalMount{Mountpoint: m.Point, Key: m.Key}
	}
	if err := os.MkdirAll(opt.Dir, 0o700); err != nil {
		return CheckpointStats{}, fmt.Errorf("%w: checkpoint: %w", ErrSetup, err)
	}
	d := &criu.Dump{Pid: pid, Dir: opt.Dir, WorkDir: opt.WorkDir, LeaveRunning: !opt.Stop,
		Mounts: ext, ExternalUnix: []uint64{meta.Control}, Frozen: opt.Frozen}
	st, err := d.Run(ctx)
	if err != nil {
		return st, err
	}
	if opt.Stop {
		go r.close()
	}
	if _, err := criu.RelinkMemfdExe(opt.Dir, restoredExe, meta.ExeSize, 0o100755); err != nil {
		return st, err
	}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(opt.Dir, metaFile), b, 0o600); err != nil {
		return st, fmt.Errorf("%w: checkpoint: %w", ErrSetup, err)
	}
	return st, nil
}

// checkpointMeta describes r's sandbox for a restore.
func (r *residentInit) checkpointMeta(svcs []*Service) (checkpointMeta, error) {
	spec := r.cfg.Spec
	m := checkpointMeta{Network: r.cfg.Network, Image: r.ip.kind.image, Seq: r.seq.Load(),
		Limits: checkpointLimits{MemoryBytes: spec.MemoryBytes, Pids: spec.Pids, MilliCPUs: spec.MilliCPUs}}
	for _, sv := range svcs {
		m.Services = append(m.Services, checkpointJob{Job: sv.job, Pid: sv.pid, Started: sv.started, Stdout: sv.outIno, Stderr: sv.errIno})
	}
	fi, err := os.Stat(r.l.exe())
	if err != nil {
		return m, fmt.Errorf("%w: checkpoint: the init's binary: %w", ErrSetup, err)
	}
	m.ExeSize = fi.Size()
	if f, err := elf.Open(r.l.exe()); err == nil {
		dynamic := false
		for _, p := range f.Progs {
			dynamic = dynamic || p.Type == elf.PT_INTERP
		}
		f.Close()
		if dynamic {
			return m, fmt.Errorf("%w: the sandbox's init (%s) is linked dynamically, with libraries from outside the sandbox; build it with CGO_ENABLED=0", criu.ErrUnsupported, r.l.exe())
		}
	}
	ms, err := sandboxMounts(r.ip.pid)
	if err != nil {
		return m, fmt.Errorf("%w: checkpoint: %w", ErrSetup, err)
	}
	for _, sm := range ms {
		if ownFS[sm.fstype] {
			continue
		}
		cm := checkpointMount{Key: mountKey(sm.point), Point: sm.point}
		switch {
		case sm.point == "/workspace":
			cm.Workspace = true
		case sm.fstype == "devtmpfs":
			cm.Device, cm.File, cm.Attrs = "/dev"+sm.root, true, mountAttrs(sm.opts)
		case strings.Count(sm.point, "/") == 1:
			cm.Entry = strings.TrimPrefix(sm.point, "/")
		default:
			return m, fmt.Errorf("%w: a mount at %s (%s) the sandbox did not make", criu.ErrUnsupported, sm.point, sm.fstype)
		}
		m.Mounts = append(m.Mounts, cm)
	}
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(r.ip.pid) + "/root")
	if err != nil {
		return m, fmt.Errorf("%w: checkpoint: the sandbox's root: %w", ErrSetup, err)
	}
	for _, e := range ents {
		if "/"+e.Name() == restoredExe { // a restored sandbox's: a restore puts it back
			continue
		}
		ce := checkpointEntry{Name: e.Name(), File: e.Type().IsRegular()}
		if e.Type()&os.ModeSymlink != 0 {
			ce.Link, _ = os.Readlink("/proc/" + strconv.Itoa(r.ip.pid) + "/root/" + e.Name())
		}
		m.Root = append(m.Root, ce)
	}
	return m, nil
}

// renewControl renews the init's control socket and returns its inode
// once the init holds it.
func (r *residentInit) renewControl(ctx context.Context) (uint64, error) {
	pid := r.ip.pid
	old, err := fdInode(pid, ctlFD)
	if err == nil {
		err = r.ip.p.renewControl(ctx)
	}
	for i := 0; err == nil; i++ {
		// The init takes the new socket right after it sent its end.
		ino, err := fdInode(pid, ctlFD)
		switch {
		case err != nil:
		case ino != old:
			return ino, nil
		case i == 1000:
			err = errors.New("the init kept its control socket")
		default:
			time.Sleep(100 * time.Microsecond)
			continue
		}
		return 0, fmt.Errorf("%w: checkpoint: %w", ErrSetup, err)
	}
	return 0, err
}

// mountAttrs are the MOUNT_ATTR_* flags of mountinfo's options.
func mountAttrs(opts string) uint64 {
	var a uint64
	for _, o := range strings.Split(opts, ",") {
		switch o {
		case "ro":
			a |= unix.MOUNT_ATTR_RDONLY
		case "nosuid":
			a |= unix.MOUNT_ATTR_NOSUID
		case "nodev":
			a |= unix.MOUNT_ATTR_NODEV
		case "noexec":
			a |= unix.MOUNT_ATTR_NOEXEC
		}
	}
	return a
}

// fdInode is the inode of descriptor fd of pid.
func fdInode(pid, fd int) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/fd/"+strconv.Itoa(fd), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// fileInode is the inode of f.
func fileInode(f *os.File) uint64 {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return 0
	}
	return st.Ino
}
