package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/criu"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/userns"
	"layerfs.dev/layerfs/wire/errclass"
)

// A restore makes a fresh sandbox of a checkpoint: its own PID, network,
// IPC, UTS and mount namespaces, a new cgroup with the checkpointed
// limits, a user namespace of its own with the launcher's mapping (CRIU
// makes it from the images: a restore cannot join an existing one), the
// seccomp filter as it was, and the workspace cfg names at /workspace.
//
// CRIU runs from a helper (this binary as restorerArg0), started in the
// new cgroup before it does anything: the helper unshares a private mount
// namespace, builds the restored root's skeleton on a tmpfs there (the
// root's top-level entries and the init's binary), attaches the clones the
// launcher made of the runtime, the device nodes and the workspace (id-
// mapped with the launcher's user namespace, whose mapping the restored
// one repeats), and execs criu. The restored init becomes the launcher's
// child (criu's --restore-sibling); whatever fails, the helper's mount
// namespace goes with it, and criu kills what it restored.

// restorerArg0 is the restore helper's argv[0].
const restorerArg0 = "layerfs-sandbox-restore"

// restoreTimeout bounds a restore's criu.
const restoreTimeout = 2 * time.Minute

// imagesKey stages the images themselves (not a mount of the sandbox).
const imagesKey = ".images"

// restorerConfig is the helper's, on its stdin.
type restorerConfig struct {
	Stage  string            `json:"stage"` // an empty directory of the host
	Root   []checkpointEntry `json:"root"`
	Mounts []stagedMount     `json:"mounts"`
	Argv   []string          `json:"argv"`
}

// stagedMount is a detached mount the helper attaches at Stage/m/Key.
type stagedMount struct {
	Key  string `json:"key"`
	FD   int    `json:"fd"`
	File bool   `json:"file,omitempty"`
}

// restorerMain is the helper; it execs criu or exits.
func restorerMain() {
	runtime.LockOSThread()
	var cfg restorerConfig
	if err := json.NewDecoder(os.Stdin).Decode(&cfg); err != nil {
		os.Exit(0) // the launcher gave up before it sent the config
	}
	if err := stageRestore(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "restore: "+err.Error())
		os.Exit(125)
	}
	err := syscall.Exec(cfg.Argv[0], cfg.Argv, os.Environ())
	fmt.Fprintln(os.Stderr, "restore: exec criu: "+err.Error())
	os.Exit(125)
}

// stageRestore builds what criu restores onto (see above).
func stageRestore(cfg *restorerConfig) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("new mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", cfg.Stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	root := filepath.Join(cfg.Stage, "root")
	for _, d := range []string{root, filepath.Join(cfg.Stage, "m")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	for _, e := range cfg.Root {
		if strings.Contains(e.Name, "/") || e.Name == ".." || e.Name == "." || e.Name == "" {
			return fmt.Errorf("a root entry named %q", e.Name)
		}
		p := filepath.Join(root, e.Name)
		var err error
		switch {
		case e.Link != "":
			err = os.Symlink(e.Link, p)
		case e.File:
			err = os.WriteFile(p, nil, 0o444)
		default:
			err = os.Mkdir(p, 0o755)
		}
		if err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if err := copyFile("/proc/self/exe", root+restoredExe); err != nil {
		return fmt.Errorf("the init's binary: %w", err)
	}
	for _, m := range cfg.Mounts {
		p := filepath.Join(cfg.Stage, "m", m.Key)
		var err error
		if m.File {
			err = os.WriteFile(p, nil, 0o444)
		} else {
			err = os.Mkdir(p, 0o755)
		}
		if err == nil {
			err = unix.MoveMount(m.FD, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH)
		}
		if err != nil {
			return fmt.Errorf("stage %s: %w", m.Key, err)
		}
		unix.Close(m.FD)
	}
	null, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	return unix.Dup3(null, 0, 0)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// RestoreOptions are one restore's.
type RestoreOptions struct {
	// Dir holds the checkpoint's images; WorkDir gets criu's log and the
	// helper's staging directory.
	Dir, WorkDir string
	// Output gives each restored service's output writers, by its pid
	// inside the sandbox; nil discards it.
	Output func(pid int) (stdout, stderr io.Writer)
}

// RestoreStats are what a restore cost.
type RestoreStats struct {
	// Criu is how long criu said forking and restoring took; Total the
	// whole restore, from the call to the services' running.
	Criu, Total time.Duration
}

// ErrServicesRun: a restore into a Session whose sandbox runs services.
var ErrServicesRun = errclass.New(errclass.Conflict, "services run in the workspace's sandbox already")

// Restore restores the checkpoint in opt.Dir as the Session's resident
// sandbox, with cfg's workspace at /workspace (cfg's network and root dir
// must be the checkpointed sandbox's; its Spec is not used: the limits
// are the checkpoint's), and returns its services, running. A restore
// that fails leaves no process, no mount and no cgroup.
func (s *Session) Restore(ctx context.Context, cfg Config, opt RestoreOptions) ([]*Service, RestoreStats, error) {
	t0 := time.Now()
	var meta checkpointMeta
	b, err := os.ReadFile(filepath.Join(opt.Dir, metaFile))
	if err == nil {
		err = json.Unmarshal(b, &meta)
	}
	if err != nil {
		return nil, RestoreStats{}, fmt.Errorf("%w: checkpoint: %w", errclass.Corrupt, err)
	}
	if cfg.Network != meta.Network || (cfg.RootDir != "") != (meta.Image != "") {
		return nil, RestoreStats{}, fmt.Errorf("%w: restore into a sandbox with another network or root than the checkpoint's", platforms.ErrBadSpec)
	}
	cfg.Spec.MemoryBytes, cfg.Spec.Pids, cfg.Spec.MilliCPUs = meta.Limits.MemoryBytes, meta.Limits.Pids, meta.Limits.MilliCPUs
	if len(cfg.Spec.Argv) == 0 {
		cfg.Spec.Argv = []string{"true"}
	}
	cfg, ic, err := s.l.jobConfig(cfg)
	if err != nil {
		return nil, RestoreStats{}, err
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	s.mu.Lock()
	busy := s.res != nil
	s.mu.Unlock()
	if busy {
		return nil, RestoreStats{}, ErrServicesRun
	}
	rs := &restore{l: s.l, s: s, cfg: cfg, ic: ic, meta: &meta, opt: opt, hold: make(chan bool, 1), reaped: make(chan struct{})}
	defer rs.cleanup()
	if err := rs.run(ctx); err != nil {
		return nil, RestoreStats{}, err
	}
	svcs := rs.adopt()
	return svcs, RestoreStats{Criu: rs.criu.Took(), Total: time.Since(t0)}, nil
}

// restore is one Session.Restore's state.
type restore struct {
	l    *Launcher
	s    *Session
	cfg  Config
	ic   initConfigX
	meta *checkpointMeta
	opt  RestoreOptions

	criu     *criu.Restore
	stageDir string
	cg       *execCgroup
	conn     *initConn
	pipes    map[uint64][2]*os.File // by job: stdout's and stderr's read ends
	files    []*os.File             // closed by cleanup
	pid      int
	proc     *os.Process
	ok       bool
	// hold says whether the thread that started the helper must wait for
	// reaped (the restored init's end) before it may end.
	hold   chan bool
	reaped chan struct{}
}

// run restores the sandbox: pid and proc are its init once it returns nil.
// handOver makes the restore's cgroup and the descriptors the restored
// tree takes in place of those it held outside itself: a new control
// socket for the init, new output pipes for each service.
func (rs *restore) handOver() error {
	l, meta := rs.l, rs.meta
	var err error
	if rs.cg, err = l.cg.create(l.cgroupName(), true, meta.Limits.MilliCPUs > 0); err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	if rs.conn, err = newInitConn(); err != nil {
		return err
	}
	rs.criu = &criu.Restore{Dir: rs.opt.Dir, WorkDir: rs.opt.WorkDir, Mounts: map[string]string{}}
	rs.criu.Inherit = append(rs.criu.Inherit, criu.Inherit{File: rs.conn.theirs, Resource: "socket:[" + strconv.FormatUint(meta.Control, 10) + "]"})
	rs.pipes = map[uint64][2]*os.File{}
	for _, j := range meta.Services {
		var ends [2]*os.File
		for i, ino := range []uint64{j.Stdout, j.Stderr} {
			r, w, err := os.Pipe()
			if err != nil {
				if i == 1 {
					ends[0].Close()
				}
				return fmt.Errorf("%w: restore: %w", ErrSetup, err)
			}
			rs.files = append(rs.files, w)
			ends[i] = r
			rs.criu.Inherit = append(rs.criu.Inherit, criu.Inherit{File: w, Resource: "pipe:[" + strconv.FormatUint(ino, 10) + "]"})
		}
		rs.pipes[j.Job] = ends
	}
	return nil
}

func (rs *restore) run(ctx context.Context) error {
	l, meta := rs.l, rs.meta
	if err := rs.handOver(); err != nil {
		return err
	}
	staged, err := rs.stage()
	if err != nil {
		return err
	}
	// A directory the restored user namespace's root can reach (criu
	// opens the staged mounts once in it); what the helper mounts on it
	// stays in the helper's mount namespace.
	stage, err := os.MkdirTemp("", "layerfs-restore-"+strconv.Itoa(os.Getpid())+"-")
	if err == nil {
		rs.stageDir = stage
		err = os.Chmod(stage, 0o755)
	}
	if err != nil {
		return fmt.Errorf("%w: restore: %w", ErrSetup, err)
	}
	rc := restorerConfig{Stage: stage, Root: meta.Root}
	cmd := exec.Command(l.exe())
	cmd.Args = []string{restorerArg0}
	for _, in := range rs.criu.Inherit {
		cmd.ExtraFiles = append(cmd.ExtraFiles, in.File)
	}
	for _, sm := range staged {
		rc.Mounts = append(rc.Mounts, stagedMount{Key: sm.key, FD: 3 + len(cmd.ExtraFiles), File: sm.file})
		cmd.ExtraFiles = append(cmd.ExtraFiles, sm.f)
	}
	rs.criu.Root = filepath.Join(stage, "root")
	for k := range rs.criu.Mounts {
		rs.criu.Mounts[k] = filepath.Join(stage, "m", k)
	}
	if _, ok := rs.criu.Mounts[imagesKey]; ok {
		delete(rs.criu.Mounts, imagesKey)
		rs.criu.Dir = filepath.Join(stage, "m", imagesKey)
	}
	if rc.Argv, err = rs.criu.Argv(3); err != nil {
		return err
	}
	// A file, not a pipe: criu's restored tasks must not hold a pipe the
	// launcher waits on.
	stderr, err := os.Create(filepath.Join(rs.opt.WorkDir, "helper.err"))
	if err != nil {
		return fmt.Errorf("%w: restore: %w", ErrSetup, err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("%w: restore: %w", ErrSetup, err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// The restored init is the child of the thread that started the
	// helper, and dies with it (its parent-death signal): that thread
	// stays locked to this goroutine until the init is reaped.
	errc := make(chan error, 1)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			runtime.UnlockOSThread()
			return
		}
		started <- nil
		errc <- cmd.Wait()
		if <-rs.hold {
			<-rs.reaped
		}
		runtime.UnlockOSThread()
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("%w: restore helper: %w", ErrSetup, err)
	}
	for _, sm := range staged {
		sm.f.Close()
	}
	err = rs.cg.add(cmd.Process.Pid)
	if err == nil && meta.Limits.MilliCPUs > 0 {
		err = rs.cg.addCPU(cmd.Process.Pid)
	}
	if err == nil {
		err = rs.cg.limit(meta.Limits.MemoryBytes, meta.Limits.Pids, meta.Limits.MilliCPUs)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		stdin.Close()
		<-errc
		return fmt.Errorf("%w: restore: %w", ErrSetup, err)
	}
	// criu gets a bound: a restore that hangs (criu loops over some
	// damaged images) is killed with the cgroup's processes by cleanup.
	kill := func() { _ = cmd.Process.Kill() }
	stop := context.AfterFunc(ctx, kill)
	bound := time.AfterFunc(restoreTimeout, kill)
	err = json.NewEncoder(stdin).Encode(rc)
	stdin.Close()
	defer stop()
	defer bound.Stop()
	if werr := <-errc; werr != nil || err != nil {
		b, _ := os.ReadFile(stderr.Name())
		if s := strings.TrimSpace(string(b)); strings.HasPrefix(s, "restore:") {
			return fmt.Errorf("%w: %s", ErrSetup, s)
		}
		return rs.criu.Failed(ctx, errors.Join(err, werr))
	}
	if rs.pid, err = rs.criu.Pid(); err != nil {
		return err
	}
	rs.proc, _ = os.FindProcess(rs.pid)
	return nil
}

// adopt makes the restored init the Session's resident sandbox and
// returns its services, whose output is copied from now on.
func (rs *restore) adopt() []*Service {
	l, s := rs.l, rs.s
	rs.ok = true
	rs.hold <- true
	rs.conn.closeChild()
	ip := &initProc{pid: rs.pid, proc: restoredInit{p: rs.proc, reaped: rs.reaped}, p: rs.conn, cg: rs.cg,
		kind: sandboxKind{network: rs.meta.Network, image: rs.meta.Image, inNS: l.userNS != nil}}
	ip.listen(nil)
	l.track(ip.pid, true)
	_ = os.WriteFile("/proc/"+strconv.Itoa(ip.pid)+"/oom_score_adj", []byte("-1000"), 0)
	r := &residentInit{l: l, s: s, ip: ip, cfg: rs.cfg, done: make(chan struct{}), active: 1, services: map[*Service]bool{}}
	r.seq.Store(rs.meta.Seq)
	var out []*Service
	for _, j := range rs.meta.Services {
		var stdout, stderr io.Writer = io.Discard, io.Discard
		if rs.opt.Output != nil {
			stdout, stderr = rs.opt.Output(j.Pid)
		}
		p := rs.pipes[j.Job]
		delete(rs.pipes, j.Job)
		sv := &Service{r: r, job: j.Job, pid: j.Pid, started: j.Started, done: make(chan struct{}), oom0: rs.cg.oomKills(),
			stdout: stdout, stderr: stderr, outIno: fileInode(p[0]), errIno: fileInode(p[1])}
		ch := ip.p.job(j.Job)
		r.services[sv] = true
		r.active++
		go sv.watch(ch, &execEnds{outR: p[0], errR: p[1]})
		out = append(out, sv)
	}
	s.mu.Lock()
	s.res = r
	s.mu.Unlock()
	r.release()
	return out
}

// cleanup closes what the restore holds; after a failure, it also ends
// whatever was restored and removes the cgroup.
func (rs *restore) cleanup() {
	for _, f := range rs.files {
		f.Close()
	}
	if rs.stageDir != "" {
		_ = os.Remove(rs.stageDir)
	}
	if rs.ok {
		return
	}
	select {
	case rs.hold <- false:
	default:
	}
	for _, p := range rs.pipes {
		p[0].Close()
		p[1].Close()
	}
	if rs.conn != nil {
		rs.conn.closeParent()
	}
	if rs.proc != nil {
		_ = rs.proc.Kill()
		_, _ = rs.proc.Wait()
	}
	if rs.cg != nil {
		for _, d := range rs.cg.dirs() {
			_ = killCgroup(d)
		}
		_ = rs.cg.remove()
	}
	reapCriuZombies()
}

// reapCriuZombies reaps this process's children that ended as criu's own
// (its loader's name): a partly restored root of a failed restore is this
// process's child (criu's --restore-sibling) that nothing waits for. A
// restored init has its program's name by then, and the criu commands a
// dump runs are reaped by their own Wait before they could be listed here
// for long; so only what a failed restore left is taken.
func reapCriuZombies() {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			st, _ := os.ReadFile("/proc/" + f + "/stat")
			// pid (comm) state ...
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && strings.HasPrefix(string(st[i:]), ") Z") &&
				strings.Contains(string(st[:i]), "(ld-linux") {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			}
		}
	}
}

// restoredInit is a restored init: the launcher's child (criu's
// --restore-sibling).
type restoredInit struct {
	p      *os.Process
	reaped chan struct{} // closed once it is reaped
}

func (r restoredInit) kill() error { return r.p.Kill() }

func (r restoredInit) wait() (unix.WaitStatus, time.Duration, error) {
	ps, err := r.p.Wait()
	select {
	case <-r.reaped:
	default:
		close(r.reaped)
	}
	if ps == nil {
		return 0, 0, err
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	return unix.WaitStatus(ws), ps.UserTime() + ps.SystemTime(), nil
}

// stagedFile is a detached mount for the helper.
type stagedFile struct {
	key  string
	f    *os.File
	file bool
}

// stage makes the external mounts' clones: the runtime's entries and the
// workspace id-mapped as the launcher's sandboxes are, device nodes as
// they are.
func (rs *restore) stage() ([]stagedFile, error) {
	l := rs.l
	idmap := -1
	if l.userNS != nil {
		idmap = int(l.userNS.Fd())
	}
	var out []stagedFile
	keep := func(key string, fd int, file bool) {
		f := os.NewFile(uintptr(fd), key)
		rs.files = append(rs.files, f)
		out = append(out, stagedFile{key: key, f: f, file: file})
		rs.criu.Mounts[key] = ""
	}
	if idmap >= 0 {
		// The images, as the restored user namespace's root sees them:
		// criu reads some of them once it is in that namespace.
		_ = filepath.WalkDir(rs.opt.Dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				_ = os.Chmod(p, 0o644)
			} else if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
		fd, err := cloneTree(unix.AT_FDCWD, rs.opt.Dir, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, 0)
		if err == nil {
			if err = userns.IDMap(fd, idmap); err != nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%w: restore: the images: %w", ErrSetup, err)
		}
		keep(imagesKey, fd, false)
	}
	var entries map[string]rootEntry
	for _, m := range rs.meta.Mounts {
		switch {
		case m.Workspace:
			ws, _, err := l.cloneWorkspace(rs.cfg, rs.ic)
			if err != nil {
				return nil, err
			}
			keep(m.Key, ws, false)
		case m.Device != "":
			if !strings.HasPrefix(m.Device, "/dev/") || strings.Contains(m.Device, "..") {
				return nil, fmt.Errorf("%w: checkpoint: a device %q", errclass.Corrupt, m.Device)
			}
			fd, err := cloneTree(unix.AT_FDCWD, m.Device, m.Attrs, 0)
			if err != nil {
				return nil, fmt.Errorf("%w: restore: %s: %w", ErrSetup, m.Device, err)
			}
			keep(m.Key, fd, true)
		case m.Entry != "":
			if entries == nil {
				es, err := rootEntries(rs.meta.Image, false, idmap)
				entries = map[string]rootEntry{}
				for _, e := range es {
					entries[e.name] = e
				}
				if err != nil {
					closeEntries(es)
					return nil, fmt.Errorf("%w: restore: %w", ErrSetup, err)
				}
				defer func() {
					for _, e := range entries {
						if e.tree >= 0 {
							unix.Close(e.tree)
						}
					}
				}()
			}
			e, ok := entries[m.Entry]
			if !ok || e.tree < 0 {
				return nil, fmt.Errorf("%w: restore: the root has no %s now", ErrSetup, m.Entry)
			}
			keep(m.Key, e.tree, e.isFile)
			e.tree = -1
			entries[m.Entry] = e
		}
	}
	return out, nil
}
