package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A launcher with a user namespace starts its inits inside it. The
// spawner, the init binary started once as root of a new user namespace
// with Launcher.UserNamespace's mapping, starts every one of them as its
// child, with a plain vfork (a child that needs no new user namespace of
// its own shares its parent's memory until it execs). An init is then born
// in the namespace: its command is forked the same way, and neither the
// exec nor the init's start pays for making a user namespace and writing
// its mapping, which costs a fork that copies the process and a round trip
// with the child. What needs the host's privileges is done by the launcher
// and handed over as descriptors: the runtime's and the workspace's
// id-mapped clones.
//
// The spawner runs an execute-only copy of the init binary (a memfd the
// launcher made): an init exec'd from a file its user namespace's root
// cannot read has the host's root as its owner in /proc (the kernel moves
// the process's dumpable owner to the nearest namespace that maps the
// file's owner), so the command, root of the same namespace, can neither
// write to /proc/1 nor trace or inspect its init.

// spawnerArg0 is the spawner's argv[0]; its descriptors are the socket to
// the launcher and the init binary's copy.
const (
	spawnerArg0   = "layerfs-sandbox-spawner"
	spawnerSockFD = 3
	spawnerExeFD  = 4
)

// spawnRequest asks the spawner for an init: fds, sent with it, become the
// init's descriptors 0, 1, 2, ... in order.
type spawnRequest struct {
	ID      uint64   `json:"id"`                // names the init in the answers
	Network bool     `json:"network,omitempty"` // keep the host's network namespace
	Env     []string `json:"env"`
}

// spawnMessage is what the spawner sends back: a started init's pid (with
// its pidfd) or why it could not start one, and later each init's end.
type spawnMessage struct {
	// ID is the request's: pids are not names, since the kernel may give
	// a new init the pid of one whose end the launcher has not read yet.
	ID     uint64 `json:"id"`
	Pid    int    `json:"pid,omitempty"`
	Error  string `json:"error,omitempty"`
	Exited int    `json:"exited,omitempty"`
	Status uint32 `json:"status,omitempty"` // a wait status
	CPU    int64  `json:"cpu_ns,omitempty"` // user and system time
}

// spawner is the launcher's side of its spawner.
type spawner struct {
	cmd  *exec.Cmd
	conn *net.UnixConn

	mu      sync.Mutex // one request at a time
	lastID  uint64     // the last request's ID; guarded by mu
	started chan spawned

	exitMu sync.Mutex
	exits  map[uint64]chan spawnMessage // by ID, made by whichever comes first
	done   chan struct{}                // closed when the spawner is gone
}

type spawned struct {
	pid   int
	pidfd int
	err   error
}

// startSpawner starts exe as the spawner in a new user namespace with
// mapping r.
func startSpawner(exe string, r IDRange) (_ *spawner, err error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	bin, err := executeOnlyCopy(exe)
	if err != nil {
		return nil, err
	}
	defer bin.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("spawner: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "spawner")
	defer theirs.Close()
	ours := os.NewFile(uintptr(fds[0]), "spawner")
	defer ours.Close() // net.FileConn dups it
	c, err := net.FileConn(ours)
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("spawner: %w", err)
	}
	s := &spawner{conn: c.(*net.UnixConn), started: make(chan spawned, 1), exits: map[uint64]chan spawnMessage{}, done: make(chan struct{})}
	s.cmd = &exec.Cmd{
		// Exec'd from the copy, never by exe's path: the spawner is the
		// namespace's root, an unprivileged uid on the host, which may not
		// traverse the directory the binary was installed in (a 0700 home,
		// a private temporary directory). Collection on: unlike an init,
		// the spawner lives as long as the launcher.
		Path: "/proc/self/fd/" + strconv.Itoa(spawnerExeFD), Args: []string{spawnerArg0}, Env: []string{"HOME=/"}, Dir: "/",
		ExtraFiles: []*os.File{theirs, bin},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER, UidMappings: r.Mapping(), GidMappings: r.Mapping(),
			GidMappingsEnableSetgroups: true,
			// Root of the namespace, with its capabilities there.
			Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	// Started from a goroutine of its own, hence from a thread that no
	// goroutine holds locked: its parent-death signal fires when the
	// thread that forked it ends, and the runtime ends a thread only when
	// a goroutine locked to it returns.
	started := make(chan error, 1)
	go func() { started <- s.cmd.Start() }()
	if err := <-started; err != nil {
		s.conn.Close()
		return nil, fmt.Errorf("spawner: start %s in a user namespace: %w", exe, err)
	}
	go s.read()
	return s, nil
}

// userNS opens the spawner's user namespace (/proc/PID/ns/user), which
// keeps the namespace once the spawner is gone.
func (s *spawner) userNS() (*os.File, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/ns/user")
	if err != nil {
		return nil, fmt.Errorf("spawner: %w", err)
	}
	return f, nil
}

// executeOnlyCopy copies the binary exe into a memfd that only its owner,
// the host's root, may read (see the package comment on the spawner).
func executeOnlyCopy(exe string) (*os.File, error) {
	src, err := os.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("init binary: %w", err)
	}
	defer src.Close()
	fd, err := unix.MemfdCreate(initArg0, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("init binary: %w", err)
	}
	f := os.NewFile(uintptr(fd), initArg0)
	_, err = f.ReadFrom(src)
	if err == nil {
		err = f.Chmod(0o711)
	}
	if err == nil {
		// Sealed, so that nothing can change the binary under the inits.
		_, err = unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("init binary: copy %s: %w", exe, err)
	}
	return f, nil
}

// read receives the spawner's messages until it is gone: through the
// runtime's poller, so that no P waits in a blocking call (see package
// maxprocs).
func (s *spawner) read() {
	defer close(s.done)
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		pidfd := -1
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
			if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
				pidfd = fds[0]
			}
		}
		var m spawnMessage
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			if pidfd >= 0 {
				unix.Close(pidfd)
			}
			return
		}
		switch {
		case m.Exited > 0:
			select {
			case s.exit(m.ID) <- m:
			default: // a second end for one init: never blocks the reader
			}
		case m.Error != "":
			s.started <- spawned{err: errors.New(m.Error)}
		case pidfd < 0:
			s.started <- spawned{err: errors.New("no pidfd came with the init's pid")}
		default:
			unix.CloseOnExec(pidfd)
			s.started <- spawned{pid: m.Pid, pidfd: pidfd}
		}
	}
}

// exit is the channel for the end of the init of request id.
func (s *spawner) exit(id uint64) chan spawnMessage {
	s.exitMu.Lock()
	defer s.exitMu.Unlock()
	c, ok := s.exits[id]
	if !ok {
		c = make(chan spawnMessage, 1)
		s.exits[id] = c
	}
	return c
}

// spawn asks for an init with descriptors fds (0, 1, 2, ...) and
// environment env, in fresh PID, UTS, IPC and (unless network) network
// namespaces of the spawner's user namespace.
func (s *spawner) spawn(network bool, env []string, fds []int) (*spawnedInit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastID++
	id := s.lastID
	b, err := json.Marshal(spawnRequest{ID: id, Network: network, Env: env})
	if err != nil {
		return nil, err
	}
	if _, _, err := s.conn.WriteMsgUnix(b, unix.UnixRights(fds...), nil); err != nil {
		return nil, fmt.Errorf("spawner: %w", err)
	}
	select {
	case r := <-s.started:
		if r.err != nil {
			return nil, fmt.Errorf("spawner: %w", r.err)
		}
		return &spawnedInit{s: s, id: id, pid: r.pid, pidfd: r.pidfd}, nil
	case <-s.done:
		return nil, errors.New("spawner: gone")
	}
}

// gone reports whether the spawner has ended.
func (s *spawner) gone() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// close stops the spawner; inits it started get SIGKILL (their parent's
// death signal).
func (s *spawner) close() {
	s.conn.Close()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// spawnedInit is an init the spawner started.
type spawnedInit struct {
	s   *spawner
	id  uint64
	pid int

	mu    sync.Mutex
	pidfd int // -1 once wait has returned: a kill after it must not reach a new owner of the number
}

func (i *spawnedInit) kill() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.pidfd < 0 {
		return nil // it has ended
	}
	return unix.PidfdSendSignal(i.pidfd, unix.SIGKILL, nil, 0)
}

// wait waits for the init's end and releases its pidfd.
func (i *spawnedInit) wait() (unix.WaitStatus, time.Duration, error) {
	defer func() {
		i.mu.Lock()
		if i.pidfd >= 0 {
			unix.Close(i.pidfd)
			i.pidfd = -1
		}
		i.mu.Unlock()
	}()
	c := i.s.exit(i.id)
	defer func() {
		i.s.exitMu.Lock()
		delete(i.s.exits, i.id)
		i.s.exitMu.Unlock()
	}()
	select {
	case m := <-c:
		return unix.WaitStatus(m.Status), time.Duration(m.CPU), nil
	case <-i.s.done:
		return 0, 0, errors.New("spawner: gone before the init ended")
	}
}

// spawnerMain is the spawner's whole life: it starts an init for each
// request and reports each init's end, until the launcher closes the
// socket.
func spawnerMain() {
	// Every init is forked from this thread, in the small mount namespace
	// it enters.
	runtime.LockOSThread()
	enterSmallRoot()
	// Neither its socket nor the binary may reach an init. The binary
	// moves above any descriptor an init is given (they are dup'ed to 0,
	// 1, 2, ... in the child before it execs the binary by its /proc path).
	unix.CloseOnExec(spawnerSockFD)
	exe, err := unix.FcntlInt(spawnerExeFD, unix.F_DUPFD_CLOEXEC, 1024)
	if err != nil {
		os.Exit(1)
	}
	unix.Close(spawnerExeFD)
	started := make(chan struct{}, 1<<16)
	reg := &inits{ids: map[int]uint64{}}
	go reg.reap(started)
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(64*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(spawnerSockFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			os.Exit(0) // the launcher is gone
		}
		var fds []int
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if fs, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, fs...)
				}
			}
		}
		var req spawnRequest
		reply := spawnMessage{}
		pidfd := -1
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			reply.Error = "bad request: " + err.Error()
		} else if reply.Pid, pidfd, err = reg.start(exe, req, fds); err != nil {
			reply.Error = err.Error()
		} else {
			started <- struct{}{}
		}
		reply.ID = req.ID
		for _, fd := range fds {
			unix.Close(fd)
		}
		b, _ := json.Marshal(reply)
		var rights []byte
		if pidfd >= 0 {
			rights = unix.UnixRights(pidfd)
		}
		err = unix.Sendmsg(spawnerSockFD, b, rights, nil, 0)
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		if err != nil {
			os.Exit(0)
		}
	}
}

// startInit starts the init binary's copy (fd exe) as an init with req's
// environment and descriptors fds, and returns its pid and a pidfd.
func startInit(exe int, req spawnRequest, fds []int) (pid, pidfd int, err error) {
	files := make([]uintptr, len(fds))
	for i, fd := range fds {
		files[i] = uintptr(fd)
	}
	pidfd = -1
	pid, err = syscall.ForkExec("/proc/self/fd/"+strconv.Itoa(exe), []string{initArg0}, &syscall.ProcAttr{
		Dir: "/", Env: req.Env, Files: files,
		Sys: &syscall.SysProcAttr{
			Cloneflags: initCloneflags(req.Network), Setsid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd,
		},
	})
	if err != nil {
		return 0, -1, fmt.Errorf("start init: %w", err)
	}
	return pid, pidfd, nil
}

// inits names the spawner's inits by pid, for the reaper: the ID of the
// request that started each.
type inits struct {
	mu  sync.Mutex
	ids map[int]uint64
}

// start starts an init (startInit) and names it, before the reaper can see
// it end.
func (r *inits) start(exe int, req spawnRequest, fds []int) (pid, pidfd int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, pidfd, err = startInit(exe, req, fds)
	if err == nil {
		r.ids[pid] = req.ID
	}
	return pid, pidfd, err
}

// reap waits for each init started (one token on started each) to end and
// tells the launcher, naming it by its request. It learns the pid of a
// child that ended before reaping it (WNOWAIT), so that the pid cannot
// pass to a new init meanwhile; a child that is not a named init (one whose
// exec failed, which the fork reaps itself) is reaped and not told.
func (r *inits) reap(started <-chan struct{}) {
	for range started {
		for {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				os.Exit(1)
			}
			pid := int(siginfoPid(&info))
			r.mu.Lock()
			id, ok := r.ids[pid]
			delete(r.ids, pid)
			r.mu.Unlock()
			var ws unix.WaitStatus
			var ru unix.Rusage
			if _, err := unix.Wait4(pid, &ws, 0, &ru); err != nil || !ok {
				continue
			}
			cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			b, _ := json.Marshal(spawnMessage{ID: id, Exited: pid, Status: uint32(ws), CPU: int64(cpu)})
			if err := unix.Sendmsg(spawnerSockFD, b, nil, nil, 0); err != nil {
				os.Exit(0)
			}
			break
		}
	}
}

// siginfoPid is the si_pid of a SIGCHLD siginfo, which x/sys/unix does not
// name: the first field of the union that follows si_signo, si_errno and
// si_code, aligned to a pointer.
func siginfoPid(info *unix.Siginfo) int32 {
	off := 3 * unsafe.Sizeof(int32(0))
	if align := unsafe.Alignof(uintptr(0)); off%align != 0 {
		off += align - off%align
	}
	return *(*int32)(unsafe.Add(unsafe.Pointer(info), off))
}

// enterSmallRoot moves the calling (locked) thread into a mount namespace
// that holds only what an init needs before it has built its root: /proc
// (to exec the init binary's copy and list its descriptors; a fully
// visible procfs is also what lets the init mount its own), /dev (/dev/null
// for the masks, the devices the init binds where mknod is refused), /sys
// (cloned for an init that keeps the host's network), an empty /tmp,
// where the init stages its root, and the host's runtime (hostRuntime),
// on a read-only tmpfs. An init copies
// the namespace it starts in to make its own: the host's, which holds
// every workspace's mounts, costs in proportion to them, to copy and then
// to detach. Where it cannot be made, inits start in the host's, as
// before.
func enterSmallRoot() {
	ns, err := smallRoot()
	if err != nil {
		return
	}
	_ = enterNS(ns)
	unix.Close(ns)
}

// smallRoot builds enterSmallRoot's namespace on a thread of its own
// (which ends with it: it is in the namespace) and returns an fd of it.
func smallRoot() (int, error) {
	type result struct {
		ns  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ns, err := buildSmallRoot()
		ch <- result{ns, err}
	}()
	r := <-ch
	return r.ns, r.err
}

func buildSmallRoot() (int, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return -1, err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return -1, err
	}
	if err := unix.Mount("tmpfs", stagingDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16k"); err != nil {
		return -1, err
	}
	// The host's runtime too, read-only, for an init binary that is
	// linked dynamically (its loader and libraries): a few mounts more.
	if err := unix.Mkdir(stagingDir+"/tmp", 0o755); err != nil {
		return -1, err
	}
	for _, d := range append([]string{"proc", "dev", "sys"}, hostRuntime...) {
		var st unix.Stat_t
		if err := unix.Lstat("/"+d, &st); err != nil {
			continue // no such entry on this host
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			buf := make([]byte, 4096)
			n, err := unix.Readlink("/"+d, buf)
			if err != nil {
				return -1, err
			}
			if err := unix.Symlink(string(buf[:n]), stagingDir+"/"+d); err != nil {
				return -1, err
			}
			continue
		}
		if err := unix.Mkdir(stagingDir+"/"+d, 0o755); err != nil {
			return -1, err
		}
		if err := unix.Mount("/"+d, stagingDir+"/"+d, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return -1, err
		}
	}
	if err := pivot(stagingDir, true); err != nil {
		return -1, err
	}
	return unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
}
