package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/seccomp/bpfload"
)

// sandboxKind is what an init prepared and so which execs it can serve:
// its network, its root and its user namespace.
type sandboxKind struct {
	network bool
	image   string // the root's image directory, "" for the host's runtime
	// writable: the image directory is the workspace's own copy-on-write
	// root, cloned read-write (Config.RootWritable).
	writable bool
	inNS     bool // in the launcher's user namespace
	// egress is the key of the egress its namespace is linked to ("" for
	// none).
	egress string
}

// initProc is one started init: its process, the launcher's end of its
// control socket, its cgroup (nil without cgroups) and the sandbox it
// prepared. It serves one exec at a time; between execs it waits in the
// warm pool or in a Session.
type initProc struct {
	pid    int
	proc   process
	p      *initConn
	cg     *execCgroup
	kind   sandboxKind
	pooled bool    // started ahead, by the warm pool
	sent   uint64  // execs sent to it
	kept   bool    // taken from a Session: it has served an exec before
	link   NetLink // its egress link, or nil

	// A warm init's priority: it warms up at warmNice and gets the
	// launcher's back once it is ready, or when an exec takes it first.
	niceMu   sync.Mutex
	taken    bool // an exec took it, or it is discarded: the reader leaves it
	restored bool // its priority is the launcher's again

	discarded sync.Once

	// spare are the pipes of the next exec, made ahead, off an exec's
	// path (by the warm pool's refill, and after each exec of a kept
	// init); nil when there are none. ended: the init is discarded or
	// reaped, and no more are made.
	endsMu sync.Mutex
	spare  *execEnds
	ended  bool
}

// makeSpare makes the pipes of the init's next exec, unless it has them.
func (ip *initProc) makeSpare() {
	ip.endsMu.Lock()
	defer ip.endsMu.Unlock()
	if ip.ended || ip.spare != nil {
		return
	}
	if e, err := newExecEnds(nil); err == nil {
		ip.spare = e
	}
}

// takeEnds returns the pipes for an exec whose stdin is the file stdin
// (nil: a pipe), made ahead or now.
func (ip *initProc) takeEnds(stdin *os.File) (*execEnds, error) {
	ip.endsMu.Lock()
	e := ip.spare
	ip.spare = nil
	ip.endsMu.Unlock()
	if e == nil {
		return newExecEnds(stdin)
	}
	if stdin != nil {
		e.inW.Close()
		e.theirs[msgStdin].Close()
		e.inW, e.theirs[msgStdin] = nil, stdin
	}
	return e, nil
}

// dropSpare closes the pipes made ahead, and no more are made.
func (ip *initProc) dropSpare() {
	ip.endsMu.Lock()
	defer ip.endsMu.Unlock()
	ip.ended = true
	if e := ip.spare; e != nil {
		e.closeTheirs(nil)
		e.closeOurs()
		ip.spare = nil
	}
}

// process is how the launcher ends and waits for an init: its own child,
// or one its spawner started.
type process interface {
	kill() error
	// wait returns once the process has ended, with its wait status and
	// the CPU time it and everything it reaped used.
	wait() (unix.WaitStatus, time.Duration, error)
}

// childInit is an init the launcher started itself.
type childInit struct{ cmd *exec.Cmd }

func (c childInit) kill() error { return c.cmd.Process.Kill() }

func (c childInit) wait() (unix.WaitStatus, time.Duration, error) {
	awaitExit(c.cmd.Process.Pid)
	err := c.cmd.Wait()
	ps := c.cmd.ProcessState
	if ps == nil {
		return 0, 0, err
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	return unix.WaitStatus(ws), ps.UserTime() + ps.SystemTime(), nil
}

// initConn is the launcher's end of an init's control socket
// (SOCK_SEQPACKET, non-blocking, so that waiting on it takes no thread)
// and what a reader goroutine has received on it.
type initConn struct {
	// ctl is the launcher's end; a resident init renews its control
	// socket (renewControl), so its users take it with conn.
	ctlMu     sync.Mutex
	ctl       *os.File
	ctlClosed bool
	sendMu    sync.Mutex      // held by a resident init's senders and its renewal
	renewed   chan struct{}   // a renewed socket came (capacity 1)
	readies   atomic.Uint64   // ready messages received
	ready     chan struct{}   // a ready message came (capacity 1)
	reports   chan initReport // the reports, in order
	// ptys are the terminal masters of execs with one (ptyMessage), each
	// received before its exec's report.
	ptys chan *os.File
	done chan struct{} // closed once the socket has ended
	// jobs are the report channels of a resident init's jobs, by job.
	jobsMu  sync.Mutex
	jobs    map[uint64]chan initReport
	jobPtys map[uint64]chan *os.File // the terminal masters of jobs with one
	theirs  *os.File                 // the init's end, until it is started
	first   func()                   // called at the first ready message
	closing sync.Once
}

func newInitConn() (*initConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox socket: %w", err)
	}
	// The init's end blocks: it waits for its execs.
	if err := unix.SetNonblock(fds[1], false); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("sandbox socket: %w", err)
	}
	return &initConn{
		ctl: os.NewFile(uintptr(fds[0]), "init"), theirs: os.NewFile(uintptr(fds[1]), "init"),
		ready: make(chan struct{}, 1), reports: make(chan initReport, 4), done: make(chan struct{}),
		ptys: make(chan *os.File, 1), renewed: make(chan struct{}, 1),
	}, nil
}

// closeChild closes the init's end, once the init has it.
func (c *initConn) closeChild() {
	if c.theirs != nil {
		c.theirs.Close()
		c.theirs = nil
	}
}

// closeParent closes the launcher's end (closing twice is harmless).
func (c *initConn) closeParent() {
	c.closeChild()
	c.closing.Do(func() {
		c.ctlMu.Lock()
		c.ctl.Close()
		c.ctlClosed = true
		c.ctlMu.Unlock()
	})
}

// read receives the init's messages until its socket ends.
func (c *initConn) read() {
	defer close(c.done)
	rc, err := c.conn().SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		var n, oobn int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		if err != nil || rerr != nil || n == 0 {
			return
		}
		if oobn > 0 && string(buf[:n]) == controlMessage {
			if rc = c.takeControl(oob[:oobn]); rc == nil {
				return
			}
			continue
		}
		if oobn > 0 {
			if !c.takePty(buf[:n], oob[:oobn]) {
				return
			}
			continue
		}
		if n == len(readyMessage) && buf[0] == readyMessage[0] {
			if c.readies.Add(1) == 1 && c.first != nil {
				c.first()
			}
			select {
			case c.ready <- struct{}{}:
			default:
			}
			continue
		}
		var r initReport
		if json.Unmarshal(buf[:n], &r) != nil {
			return
		}
		if r.Job != 0 {
			c.jobsMu.Lock()
			ch := c.jobs[r.Job]
			c.jobsMu.Unlock()
			if ch != nil {
				select {
				case ch <- r:
				default: // more than a job's two reports: the init's error
				}
			}
			continue
		}
		c.reports <- r
	}
}

// takePty receives a terminal master (ptyMessage); false when the message
// is anything else, which ends the conversation with the init.
func (c *initConn) takePty(msg, oob []byte) bool {
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob); err == nil {
		for _, m := range msgs {
			if fs, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, fs...)
			}
		}
	}
	name, job, isJob := strings.Cut(string(msg), ":")
	if name != ptyMessage || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return false
	}
	// Non-blocking, so that reads wait in the poller and Close ends them.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		return false
	}
	ptys := c.ptys
	if isJob {
		id, _ := strconv.ParseUint(job, 10, 64)
		c.jobsMu.Lock()
		ptys = c.jobPtys[id]
		c.jobsMu.Unlock()
		if ptys == nil { // no such job waits for one: the init's error
			unix.Close(fds[0])
			return false
		}
	}
	select {
	case ptys <- os.NewFile(uintptr(fds[0]), "pty"):
	default: // one per exec: a second is the init's error
		unix.Close(fds[0])
		return false
	}
	return true
}

// job registers a resident init's job: its reports come on the channel
// returned.
func (c *initConn) job(id uint64) <-chan initReport {
	ch := make(chan initReport, 2)
	c.jobsMu.Lock()
	if c.jobs == nil {
		c.jobs = map[uint64]chan initReport{}
	}
	c.jobs[id] = ch
	c.jobsMu.Unlock()
	return ch
}

// jobPty registers a resident init's job with a terminal: its master
// comes on the channel returned.
func (c *initConn) jobPty(id uint64) <-chan *os.File {
	ch := make(chan *os.File, 1)
	c.jobsMu.Lock()
	if c.jobPtys == nil {
		c.jobPtys = map[uint64]chan *os.File{}
	}
	c.jobPtys[id] = ch
	c.jobsMu.Unlock()
	return ch
}

// dropJob forgets a job; a terminal master that came for it and was not
// taken is closed.
func (c *initConn) dropJob(id uint64) {
	c.jobsMu.Lock()
	delete(c.jobs, id)
	ptys := c.jobPtys[id]
	delete(c.jobPtys, id)
	c.jobsMu.Unlock()
	if ptys != nil {
		select {
		case m := <-ptys:
			m.Close()
		default:
		}
	}
}

// awaitReady returns once the init has said ready for its next exec (it
// has said so once more than it was sent execs), or why it never will.
func (ip *initProc) awaitReady(ctx context.Context) error {
	for ip.p.readies.Load() <= ip.sent {
		select {
		case <-ip.p.ready:
		case <-ip.p.done:
			return errors.New("the init ended")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// report waits for the report of the exec sent last; ok is false when the
// init ended without one.
func (ip *initProc) report() (initReport, bool) {
	select {
	case r := <-ip.p.reports:
		return r, true
	case <-ip.p.done:
		select { // a report sent just before the end
		case r := <-ip.p.reports:
			return r, true
		default:
			return initReport{}, false
		}
	}
}

// spawn starts an init of kind in fresh PID, UTS, IPC and (unless
// network) network namespaces, in cgroup cg: cloned straight into it where
// that is v2 and the launcher starts it, moved into it right after the
// start otherwise (the init's preparation, which runs nothing of an exec,
// may have begun by then). Its root is made of the image's entries, or of
// the host's runtime, cloned here (id-mapped in the launcher's user
// namespace, where the spawner starts it).
func (l *Launcher) spawn(kind sandboxKind, cg *execCgroup, env ...string) (*initProc, error) {
	idmap := -1
	if kind.inNS {
		idmap = int(l.userNS.Fd())
	}
	entries, err := rootEntries(kind.image, kind.writable, idmap)
	if err != nil {
		closeEntries(entries)
		return nil, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	rootVar, trees := entriesEnv(entries)
	defer func() {
		for _, t := range trees {
			t.Close()
		}
	}()
	conn, err := newInitConn()
	if err != nil {
		return nil, err
	}
	env = append(env, rootVar)
	if kind.network {
		env = append(env, networkEnv+"=1")
	}
	if kind.image != "" {
		env = append(env, imageEnv+"="+kind.image)
	}
	if len(l.SyscallFilter) > 0 {
		env = append(env, seccompEnv+"="+bpfload.Encode(l.SyscallFilter))
	}
	if kind.inNS {
		env = append(env, userNSEnv+"="+l.UserNamespace.Arg())
	}
	ip := &initProc{p: conn, cg: cg, kind: kind}
	if kind.inNS {
		err = l.spawnInNS(ip, append(initEnv(), env...), trees)
	} else {
		err = l.spawnChild(ip, append(initEnv(), env...), trees)
	}
	conn.closeChild()
	if err != nil {
		conn.closeParent()
		return nil, fmt.Errorf("%w: start init: %w", ErrSetup, err)
	}
	if cg != nil && (kind.inNS || cg.fd < 0) {
		if err := cg.add(ip.pid); err != nil {
			ip.discard()
			return nil, fmt.Errorf("%w: %w", ErrSetup, err)
		}
	}
	return ip, nil
}

// listen starts reading the init's messages; first, if not nil, runs at
// its first ready message.
func (ip *initProc) listen(first func()) {
	ip.p.first = first
	go ip.p.read()
}

// initCloneflags are the namespaces an init is started in, by the launcher
// or its spawner: PID, UTS, IPC and, unless it keeps the host's network,
// network. No mount namespace: the init's main thread stays in the host's
// (the starter's). A copy made at the start would hold every mount of the
// moment, a workspace's FUSE mount among them, for as long as the init
// lives, and that mount's unmount would wait for it; the init makes its
// own for the root.
func initCloneflags(network bool) uintptr {
	flags := uintptr(unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC)
	if !network {
		flags |= unix.CLONE_NEWNET
	}
	return flags
}

// spawnChild starts ip's init as the launcher's own child.
func (l *Launcher) spawnChild(ip *initProc, env []string, trees []*os.File) error {
	cmd := &exec.Cmd{
		Path:       l.exe(),
		Args:       []string{initArg0},
		Env:        env,
		Dir:        "/", // never the workspace: see the package comment
		Stdin:      l.devNull,
		Stdout:     l.devNull,
		Stderr:     l.devNull,
		ExtraFiles: append([]*os.File{ip.p.theirs}, trees...),
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: initCloneflags(ip.kind.network),
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if ip.cg != nil && ip.cg.fd >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = ip.cg.fd
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ip.pid, ip.proc = cmd.Process.Pid, childInit{cmd}
	return nil
}

// spawnInNS has the spawner start ip's init in the launcher's user
// namespace.
func (l *Launcher) spawnInNS(ip *initProc, env []string, trees []*os.File) error {
	sp, err := l.spawnerNow()
	if err != nil {
		return err
	}
	null := int(l.devNull.Fd())
	fds := []int{null, null, null, int(ip.p.theirs.Fd())}
	for _, t := range trees {
		fds = append(fds, int(t.Fd()))
	}
	si, err := sp.spawn(ip.kind.network, env, fds)
	if err != nil {
		return err
	}
	ip.pid, ip.proc = si.pid, si
	return nil
}

// discard kills an init that will not be used again, reaps it, closes its
// socket and removes its cgroup. It may be called more than once.
func (ip *initProc) discard() {
	ip.discarded.Do(func() {
		// No renice once it may be reaped: its pid could be another's.
		ip.niceMu.Lock()
		ip.taken = true
		ip.niceMu.Unlock()
		_ = ip.proc.kill()
		_, _, _ = ip.proc.wait()
		ip.dropSpare()
		ip.p.closeParent()
		if ip.cg != nil {
			_ = ip.cg.remove()
		}
		if ip.link != nil {
			ip.link.Close()
		}
	})
}

// gone reports whether the init has died while waiting: its end of the
// socket is closed.
func (ip *initProc) gone() bool {
	select {
	case <-ip.p.done:
		return true
	default:
	}
	rc, err := ip.p.ctl.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, 0)
		gone = err == nil && n == 1 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
	})
	return gone
}

// execEnds are the launcher's ends of one exec's pipes and the init's,
// which go to the init in the exec's message.
type execEnds struct {
	cfgW, outR, errR, inW *os.File // ours (inW nil when stdin is a file)
	theirs                [msgFDs]*os.File
}

// newExecEnds makes the pipes of one exec: its config, stdout, stderr and,
// unless stdin is a file the command reads directly, stdin.
func newExecEnds(stdin *os.File) (*execEnds, error) {
	e := &execEnds{}
	pairs := []struct {
		ours   **os.File
		theirs int
		read   bool // the init reads its end
	}{{&e.cfgW, msgConfig, true}, {&e.outR, msgStdout, false}, {&e.errR, msgStderr, false}}
	if stdin == nil {
		pairs = append(pairs, struct {
			ours   **os.File
			theirs int
			read   bool
		}{&e.inW, msgStdin, true})
	} else {
		e.theirs[msgStdin] = stdin
	}
	for _, pair := range pairs {
		r, w, err := os.Pipe()
		if err != nil {
			e.closeTheirs(stdin)
			e.closeOurs()
			return nil, fmt.Errorf("sandbox pipes: %w", err)
		}
		if pair.read {
			*pair.ours, e.theirs[pair.theirs] = w, r
		} else {
			*pair.ours, e.theirs[pair.theirs] = r, w
		}
	}
	return e, nil
}

// closeTheirs closes the init's ends (not keep, a file of the caller's).
func (e *execEnds) closeTheirs(keep *os.File) {
	for i, f := range e.theirs {
		if f != nil && f != keep {
			f.Close()
		}
		e.theirs[i] = nil
	}
}

// closeOurs closes the launcher's ends (closing twice is harmless).
func (e *execEnds) closeOurs() {
	for _, f := range []*os.File{e.cfgW, e.outR, e.errR, e.inW} {
		if f != nil {
			f.Close()
		}
	}
}

// send sets the exec's limits on the init's cgroup, then sends the init
// the exec's message (the workspace's clone ws and the init's ends of the
// exec's pipes) and writes its config: the init runs nothing of the exec
// before it has them. It closes the init's ends and the config pipe.
func (ip *initProc) send(mem int64, milliCPUs int, ic initConfigX, ws int, ends *execEnds, stdin *os.File) error {
	var err error
	if ip.cg != nil && milliCPUs > 0 {
		err = ip.cg.addCPU(ip.pid)
	}
	if ip.cg != nil && err == nil {
		err = ip.cg.limit(mem, ic.pids, milliCPUs)
	}
	if err == nil {
		fds := []int{ws}
		for _, f := range ends.theirs[msgConfig:] {
			fds = append(fds, int(f.Fd()))
		}
		err = sendExec(ip.p.ctl, ic.Hostname, fds)
	}
	ends.closeTheirs(stdin)
	if err == nil {
		ip.sent++
		err = json.NewEncoder(ends.cfgW).Encode(ic)
	}
	if cerr := ends.cfgW.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: send config: %w", ErrSetup, err)
	}
	return nil
}

// sendExec sends an exec's message (see msgWorkspace) on the launcher's
// (non-blocking) end of the init's socket.
func sendExec(f *os.File, hostname string, fds []int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte(hostname), unix.UnixRights(fds...), nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	})
	return cmp.Or(err, serr)
}

// initEnv is the environment every init starts with (the command's own is
// built by the init). HOME, because packages linked into a daemon-sized
// binary may need it in their init functions before InitMain runs (lima's
// do). GOGC=off: an init allocates little before its first exec, so a
// collection would only cost it time (an init kept for more execs turns
// collection on); updatemaxprocs=0 keeps the runtime from stopping the
// world to follow a change of the exec cgroup's CPU limit, and
// containermaxprocs=0 from holding the host's cgroup files open (which a
// checkpoint of the sandbox could not hold).
func initEnv() []string {
	return []string{"HOME=/", "GOGC=off", "GODEBUG=updatemaxprocs=0,containermaxprocs=0"}
}
