package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/seccomp/bpfload"
)

// initProc is one started init, the launcher's ends of its pipes and its
// cgroup (nil without cgroups).
type initProc struct {
	cmd    *exec.Cmd
	p      *pipes
	cg     *execCgroup
	pooled bool // started ahead, by the warm pool
}

// spawn starts an init in fresh PID, UTS, IPC and (unless network) network
// namespaces, in cgroup cg: cloned straight into it where that is v2, moved
// into it right after the start otherwise (the init waits for its config,
// so it runs nothing of the exec before). stdin, when it is a file, is
// given to the init as is; otherwise the init reads the stdin pipe.
func (l *Launcher) spawn(network bool, cg *execCgroup, stdin io.Reader, env ...string) (*initProc, error) {
	p, err := newPipes()
	if err != nil {
		return nil, err
	}
	flags := uintptr(unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC)
	if !network {
		flags |= unix.CLONE_NEWNET
	}
	exe := l.exe()
	if len(l.SyscallFilter) > 0 {
		env = append(env, seccompEnv+"="+bpfload.Encode(l.SyscallFilter))
	}
	extra := []*os.File{p.cfgR, p.repW}
	if l.userNS != nil {
		r := *l.UserNamespace
		env = append(env, userNSEnv+"="+r.Arg())
		extra = append(extra, l.userNS) // userNSFD
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{initArg0},
		Env:        append(initEnv(), env...),
		Dir:        "/", // never the workspace: see the package comment
		Stdin:      p.inR,
		Stdout:     p.outW,
		Stderr:     p.errW,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: flags,
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if f, ok := stdin.(*os.File); ok {
		cmd.Stdin = f
	}
	if cg != nil && cg.fd >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cg.fd
	}
	err = cmd.Start()
	p.closeChild()
	if err != nil {
		p.closeParent()
		return nil, fmt.Errorf("%w: start init: %v", ErrSetup, err)
	}
	ip := &initProc{cmd: cmd, p: p, cg: cg}
	if cg != nil && cg.fd < 0 {
		if err := cg.add(cmd.Process.Pid); err != nil {
			ip.discard()
			return nil, fmt.Errorf("%w: %v", ErrSetup, err)
		}
	}
	// The init is in its cgroup: a warm init that forks its command's
	// process ahead waits for this (see inCgroup); the config's decoder
	// skips it as white space.
	if _, err := p.cfgW.Write([]byte{inCgroup}); err != nil {
		ip.discard()
		return nil, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	return ip, nil
}

// discard kills an init that will not be used, reaps it and removes its
// cgroup.
func (ip *initProc) discard() {
	_ = ip.cmd.Process.Kill()
	_ = ip.cmd.Wait()
	ip.p.closeParent()
	if ip.cg != nil {
		_ = ip.cg.remove()
	}
}

// take returns a warm init for an exec without network, or nil, and starts
// replacements so that Warm inits are kept ready. The replacements warm up
// at the lowest CPU priority (see warmOne), so they use what the command
// they were started beside leaves free rather than compete with it.
func (l *Launcher) take() *initProc {
	if l.Warm <= 0 {
		return nil
	}
	defer l.topUp()
	for {
		select {
		case ip := <-l.pool:
			l.mu.Lock()
			delete(l.warmPids, ip.cmd.Process.Pid)
			l.mu.Unlock()
			if !ip.gone() {
				ip.pooled = true
				renice(ip.cmd.Process.Pid, ownNice())
				return ip
			}
			l.logger().Warn("sandbox warm init died while waiting", "pid", ip.cmd.Process.Pid)
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
	var cg *execCgroup
	if l.cg.hasMemory() || l.cg.hasPids() || l.cg.hasCPU() {
		var err error
		// No v1 cpu cgroup ahead: few execs ask for a CPU limit, and one
		// more cgroup made and removed per init cost the pool's refills
		// (and so sustained throughput); send makes it when asked.
		if cg, err = l.cg.create(l.cgroupName(), true, false); err != nil {
			l.logger().Warn("sandbox warm init", "err", err)
			l.mu.Lock()
			l.warming--
			l.mu.Unlock()
			return
		}
	}
	env := []string{prewarmEnv + "=1"}
	if l.ForkAhead {
		env = append(env, forkAheadEnv+"=1") // used when it has a user namespace
	}
	ip, err := l.spawn(false, cg, nil, env...)
	if err != nil && cg != nil {
		_ = cg.remove()
	}
	if err == nil {
		// Warming runs only on CPU that no command wants; take restores
		// the priority before the init runs anything.
		renice(ip.cmd.Process.Pid, warmNice)
	}
	l.mu.Lock()
	l.warming--
	if err == nil && !l.closed {
		select {
		case l.pool <- ip:
			l.warmPids[ip.cmd.Process.Pid] = true
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

// Close stops keeping warm inits and kills those that are waiting. Execs
// in flight are not affected; Run still works afterwards, starting every
// init on demand.
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
				delete(l.warmPids, ip.cmd.Process.Pid)
				l.mu.Unlock()
				ip.discard()
				continue
			default:
			}
			break
		}
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sandbox close: %w", ctx.Err())
	}
}

// send sets the exec's limits on the init's cgroup and then sends its
// config: the init runs nothing of the exec before it has it.
func (ip *initProc) send(mem int64, milliCPUs int, ic initConfigX) error {
	var err error
	if ip.cg != nil && milliCPUs > 0 {
		// A cgroup v1 cpu cgroup is made now and takes the init alone: a
		// process it forked ahead would stay out of it.
		ic.ForkNow = ip.cg.unified == "" && ip.cg.cpu == ""
		err = ip.cg.addCPU(ip.cmd.Process.Pid)
	}
	if ip.cg != nil && err == nil {
		err = ip.cg.limit(mem, ic.pids, milliCPUs)
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

// warmNice is the nice value of inits warming up.
const warmNice = 19

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
// do). GOGC=off: an init is short-lived and allocates little, and a
// collection in progress while it forks the command into a user namespace
// would deadlock the fork (see run); updatemaxprocs=0 keeps the runtime
// from stopping the world to follow a change of the exec cgroup's CPU
// limit for the same reason.
func initEnv() []string {
	return []string{"HOME=/", "GOGC=off", "GODEBUG=updatemaxprocs=0"}
}
