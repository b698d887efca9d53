package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/seccomp/bpfload"
)

// initProc is one started init, the launcher's ends of its pipes and its
// cgroup (nil without cgroups).
type initProc struct {
	pid    int
	proc   process
	p      *pipes
	cg     *execCgroup
	pooled bool // started ahead, by the warm pool

	// A warm init's priority: it warms up at warmNice and gets the
	// launcher's back once it is ready, or when an exec takes it first.
	niceMu   sync.Mutex
	taken    bool // an exec took it, or it is discarded: restoreWhenReady leaves it
	restored bool // its priority is the launcher's again
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

// spawn starts an init in fresh PID, UTS, IPC and (unless network)
// network namespaces, in cgroup cg: cloned straight into it where that is
// v2 and the launcher starts it, moved into it right after the start
// otherwise (the init waits for its config, so it runs nothing of the exec
// before). Its root is made of image's entries, or of the host's runtime
// when image is empty, cloned here (id-mapped when inNS). With inNS the
// spawner starts it in the launcher's user namespace. stdin, when it is a
// file, is given to the init as is; otherwise the init reads the stdin
// pipe.
func (l *Launcher) spawn(network bool, cg *execCgroup, stdin io.Reader, image string, inNS bool, env ...string) (*initProc, error) {
	idmap := -1
	if inNS {
		idmap = int(l.userNS.Fd())
	}
	entries, err := rootEntries(image, idmap)
	if err != nil {
		closeEntries(entries)
		return nil, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	rootVar, trees := entriesEnv(entries)
	defer func() {
		for _, t := range trees {
			t.Close()
		}
	}()
	p, err := newPipes()
	if err != nil {
		return nil, err
	}
	env = append(env, rootVar)
	if len(l.SyscallFilter) > 0 {
		env = append(env, seccompEnv+"="+bpfload.Encode(l.SyscallFilter))
	}
	if inNS {
		env = append(env, userNSEnv+"="+l.UserNamespace.Arg())
	}
	stdinFile := p.inR
	if f, ok := stdin.(*os.File); ok {
		stdinFile = f
	}
	ip := &initProc{p: p, cg: cg}
	if inNS {
		err = l.spawnInNS(ip, network, append(initEnv(), env...), stdinFile, trees)
	} else {
		err = l.spawnChild(ip, network, append(initEnv(), env...), stdinFile, trees)
	}
	p.closeChild()
	if err != nil {
		p.closeParent()
		return nil, fmt.Errorf("%w: start init: %v", ErrSetup, err)
	}
	if cg != nil && (inNS || cg.fd < 0) {
		if err := cg.add(ip.pid); err != nil {
			ip.discard()
			return nil, fmt.Errorf("%w: %v", ErrSetup, err)
		}
	}
	return ip, nil
}

// initCloneflags are the namespaces an init is started in, by the launcher
// or its spawner: PID, UTS, IPC and, unless it keeps the host's network,
// network. No mount namespace: the init's main thread stays in the host's
// (the starter's). A copy made at the start would hold every mount of the
// moment, a workspace's FUSE mount among them, for as long as a warm init
// waits, and that mount's unmount would wait for it; the init makes its
// own for the root.
func initCloneflags(network bool) uintptr {
	flags := uintptr(unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC)
	if !network {
		flags |= unix.CLONE_NEWNET
	}
	return flags
}

// spawnChild starts ip's init as the launcher's own child.
func (l *Launcher) spawnChild(ip *initProc, network bool, env []string, stdin *os.File, trees []*os.File) error {
	cmd := &exec.Cmd{
		Path:       l.exe(),
		Args:       []string{initArg0},
		Env:        env,
		Dir:        "/", // never the workspace: see the package comment
		Stdin:      stdin,
		Stdout:     ip.p.outW,
		Stderr:     ip.p.errW,
		ExtraFiles: append([]*os.File{ip.p.cfgR, ip.p.repW, ip.p.wsTheirs}, trees...),
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: initCloneflags(network),
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
func (l *Launcher) spawnInNS(ip *initProc, network bool, env []string, stdin *os.File, trees []*os.File) error {
	sp, err := l.spawnerNow()
	if err != nil {
		return err
	}
	fds := []int{int(stdin.Fd()), int(ip.p.outW.Fd()), int(ip.p.errW.Fd()), int(ip.p.cfgR.Fd()), int(ip.p.repW.Fd()), int(ip.p.wsTheirs.Fd())}
	for _, t := range trees {
		fds = append(fds, int(t.Fd()))
	}
	si, err := sp.spawn(network, env, fds)
	if err != nil {
		return err
	}
	ip.pid, ip.proc = si.pid, si
	return nil
}

// discard kills an init that will not be used, reaps it and removes its
// cgroup.
func (ip *initProc) discard() {
	// No renice once it may be reaped: its pid could be another's.
	ip.niceMu.Lock()
	ip.taken = true
	ip.niceMu.Unlock()
	_ = ip.proc.kill()
	_, _, _ = ip.proc.wait()
	ip.p.closeParent()
	if ip.cg != nil {
		_ = ip.cg.remove()
	}
}

// take returns a warm init for an exec without network, or nil. Run tops
// the pool up once the exec is done (topUp), so that Warm inits are kept
// ready; the replacements warm up at the lowest CPU priority (see
// warmOne), so they use what later commands leave free rather than
// compete with them.
func (l *Launcher) take() *initProc {
	if l.Warm <= 0 {
		return nil
	}
	for {
		select {
		case ip := <-l.pool:
			l.mu.Lock()
			delete(l.warmPids, ip.pid)
			l.mu.Unlock()
			if !ip.gone() {
				ip.pooled = true
				ip.take(ownNice())
				return ip
			}
			l.logger().Warn("sandbox warm init died while waiting", "pid", ip.pid)
			ip.discard()
		default:
			return nil
		}
	}
}

// gone reports whether the init has died while waiting: nothing reads its
// config pipe any more.
func (ip *initProc) gone() bool {
	rc, err := ip.p.cfgW.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, 0)
		gone = err == nil && n == 1 && fds[0].Revents&unix.POLLERR != 0
	})
	return gone
}

// topUp starts as many inits as the pool lacks, in the background.
func (l *Launcher) topUp() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ; !l.closed && len(l.pool)+l.warming < l.Warm; l.warming++ {
		l.refills.Add(1)
		go l.warmOne()
	}
}

func (l *Launcher) warmOne() {
	defer l.refills.Done()
	nice := ownNice()
	if l.lowersNice {
		// The launcher's own part of a refill (the cgroup, the root's
		// clones, the spawn) runs at warmNice too: it ran beside the
		// answer of the exec that started it and the call after that
		// (commit of a small change, right after an exec, 0.45 ms slower
		// at the median of three rounds).
		runtime.LockOSThread()
		_ = unix.Setpriority(unix.PRIO_PROCESS, 0, warmNice)
		defer func() {
			// Else the thread ends with the goroutine rather than run
			// others at warmNice.
			if unix.Setpriority(unix.PRIO_PROCESS, 0, nice) == nil {
				runtime.UnlockOSThread()
			}
		}()
	}
	var cg *execCgroup
	if l.cg.hasMemory() || l.cg.hasPids() || l.cg.hasCPU() {
		var err error
		// No v1 cpu cgroup ahead: few execs ask for a CPU limit, and one
		// more cgroup made and removed per init cost the pool's refills
		// (and so sustained throughput); send makes it when asked.
		cg, err = l.cg.create(l.cgroupName(), true, false)
		if err == nil {
			// The default pids limit, which most execs keep, now rather
			// than on the exec's path (send writes another).
			if err = cg.limit(0, platforms.DefaultPids, 0); err != nil {
				_ = cg.remove()
			}
		}
		if err != nil {
			l.logger().Warn("sandbox warm init", "err", err)
			l.mu.Lock()
			l.warming--
			l.mu.Unlock()
			return
		}
	}
	ip, err := l.spawn(false, cg, nil, "", l.userNS != nil, prewarmEnv+"=1")
	if err != nil && cg != nil {
		_ = cg.remove()
	}
	if err == nil {
		// Warming runs only on CPU that no command wants. The priority
		// comes back once the init only waits, or when an exec takes it
		// before: either way before it runs anything of an exec.
		renice(ip.pid, warmNice)
		go ip.restoreWhenReady(nice)
	}
	l.mu.Lock()
	l.warming--
	if err == nil && !l.closed {
		select {
		case l.pool <- ip:
			l.warmPids[ip.pid] = true
			l.mu.Unlock()
			return
		default:
		}
	}
	l.mu.Unlock()
	if err != nil {
		l.logger().Warn("sandbox warm init", "err", err)
		return
	}
	ip.discard()
}

// Close stops keeping warm inits and kills those that are waiting, and
// stops the spawner once no exec is in flight. Execs in flight are not
// affected; Run still works afterwards, starting every init on demand.
func (l *Launcher) Close(ctx context.Context) error {
	l.init()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	done := make(chan struct{})
	go func() {
		l.refills.Wait()
		for {
			select {
			case ip := <-l.pool:
				l.mu.Lock()
				delete(l.warmPids, ip.pid)
				l.mu.Unlock()
				ip.discard()
				continue
			default:
			}
			break
		}
		l.mu.Lock()
		l.stopSpawnerIfIdle()
		l.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sandbox close: %w", ctx.Err())
	}
}

// send sets the exec's limits on the init's cgroup and then sends it the
// workspace's clone ws with the hostname, and its config: the init runs nothing of the exec
// before it has them.
func (ip *initProc) send(mem int64, milliCPUs int, ic initConfigX, ws int) error {
	var err error
	if ip.cg != nil && milliCPUs > 0 {
		err = ip.cg.addCPU(ip.pid)
	}
	if ip.cg != nil && err == nil {
		err = ip.cg.limit(mem, ic.pids, milliCPUs)
	}
	if err == nil {
		// With the hostname: a warm init's mounter sets it when it mounts
		// the workspace, while the init reads the config.
		err = sendWorkspace(ip.p.wsOurs, ic.Hostname, ws)
	}
	if err == nil {
		err = json.NewEncoder(ip.p.cfgW).Encode(ic)
	}
	if cerr := ip.p.cfgW.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: send config: %v", ErrSetup, err)
	}
	return nil
}

// sendWorkspace sends the workspace's clone ws and the hostname on the
// launcher's (non-blocking) end of the init's socket.
func sendWorkspace(f *os.File, hostname string, ws int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte(hostname), unix.UnixRights(ws), nil, 0)
		return !errors.Is(serr, unix.EAGAIN)
	})
	return cmp.Or(err, serr)
}

// warmNice is the nice value of inits warming up.
const warmNice = 19

// restoreWhenReady gives a warm init the nice value nice once it says it
// is ready (prewarmed, blocked on its config), unless an exec took it
// first: renicing an init's threads took 0.07 ms at the median on an exec's
// path. It returns without a word when the init dies or its socket is
// closed.
func (ip *initProc) restoreWhenReady(nice int) {
	var b [1]byte
	if n, err := ip.p.wsOurs.Read(b[:]); n != 1 || err != nil {
		return
	}
	ip.niceMu.Lock()
	defer ip.niceMu.Unlock()
	if !ip.taken {
		renice(ip.pid, nice)
		ip.restored = true
	}
}

// take marks a warm init taken by an exec and gives it the nice value nice
// unless restoreWhenReady did already.
func (ip *initProc) take(nice int) {
	ip.niceMu.Lock()
	defer ip.niceMu.Unlock()
	ip.taken = true
	if !ip.restored {
		renice(ip.pid, nice)
	}
}

// renice sets the nice value of every thread of process pid (nice values
// are per thread). Two passes catch a thread started by one not yet
// reniced; later threads inherit from their creator.
func renice(pid, nice int) {
	for range 2 {
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			return
		}
		for _, e := range ents {
			if tid, err := strconv.Atoi(e.Name()); err == nil {
				_ = unix.Setpriority(unix.PRIO_PROCESS, tid, nice)
			}
		}
	}
}

// canLowerNice tells whether this process may give a thread back the nice
// value it had after raising it (CAP_SYS_NICE, or RLIMIT_NICE), tried on
// a thread of its own that ends with the try.
func canLowerNice() bool {
	ok := make(chan bool, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		own := ownNice()
		ok <- own < warmNice && unix.Setpriority(unix.PRIO_PROCESS, 0, own+1) == nil &&
			unix.Setpriority(unix.PRIO_PROCESS, 0, own) == nil
	}()
	return <-ok
}

// ownNice is this thread's nice value: what a taken init gets back.
func ownNice() int {
	// The raw getpriority syscall answers 20 - nice.
	p, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0
	}
	return 20 - p
}

// initEnv is the environment every init starts with (the command's own is
// built by the init). HOME, because packages linked into a daemon-sized
// binary may need it in their init functions before InitMain runs (lima's
// do). GOGC=off: an init is short-lived and allocates little, so a
// collection would only cost it time; updatemaxprocs=0 keeps the runtime
// from stopping the world to follow a change of the exec cgroup's CPU
// limit.
func initEnv() []string {
	return []string{"HOME=/", "GOGC=off", "GODEBUG=updatemaxprocs=0"}
}
