package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// initProc is one started init and the launcher's ends of its pipes.
type initProc struct {
	cmd    *exec.Cmd
	p      *pipes
	pooled bool // started ahead, by the warm pool
	cloned bool // cloned into the exec's v2 cgroup
}

// spawn starts an init in fresh PID, UTS, IPC and (unless network) network
// namespaces; it makes its mount namespace itself when its config comes.
// cgroupFD >= 0 clones it straight into that v2 cgroup. stdin, when not
// nil, is given to the init as is; otherwise the init reads the stdin pipe.
func (l *Launcher) spawn(network bool, cgroupFD int, stdin *os.File, env ...string) (*initProc, error) {
	p, err := newPipes()
	if err != nil {
		return nil, err
	}
	flags := uintptr(unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC)
	if !network {
		flags |= unix.CLONE_NEWNET
	}
	exe := l.Exe
	if exe == "" {
		exe = "/proc/self/exe"
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{initArg0},
		Env:        append([]string{}, env...),
		Dir:        "/", // never the workspace: see the package comment
		Stdin:      p.inR,
		Stdout:     p.outW,
		Stderr:     p.errW,
		ExtraFiles: []*os.File{p.cfgR, p.repW},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: flags,
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if cgroupFD >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cgroupFD
	}
	err = cmd.Start()
	p.closeChild()
	if err != nil {
		p.closeParent()
		return nil, fmt.Errorf("%w: start init: %v", ErrSetup, err)
	}
	return &initProc{cmd: cmd, p: p}, nil
}

// discard kills an init that will not be used and reaps it.
func (ip *initProc) discard() {
	_ = ip.cmd.Process.Kill()
	_ = ip.cmd.Wait()
	ip.p.closeParent()
}

// take returns a warm init for an exec without network, or nil, and starts
// replacements so that Warm inits are kept ready.
func (l *Launcher) take() *initProc {
	if l.Warm <= 0 {
		return nil
	}
	defer l.topUp()
	for {
		select {
		case ip := <-l.pool:
			if !ip.gone() {
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
	ip, err := l.spawn(false, -1, nil, prewarmEnv+"=1")
	l.mu.Lock()
	l.warming--
	if err == nil && !l.closed {
		select {
		case l.pool <- ip:
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

// obtain returns the init for one exec: from the warm pool when allowed
// (no network) and one is ready, else a new one, cloned straight into the
// exec's cgroup where that is v2.
func (l *Launcher) obtain(network, mayTake bool, cg *execCgroup, stdin io.Reader) (*initProc, error) {
	if !network && mayTake { // warm inits have prepared the default root
		if ip := l.take(); ip != nil {
			ip.pooled = true
			return ip, nil
		}
	}
	cgroupFD := -1
	if cg != nil && cg.fd >= 0 {
		cgroupFD = cg.fd
	}
	f, _ := stdin.(*os.File)
	ip, err := l.spawn(network, cgroupFD, f)
	if err != nil {
		return nil, err
	}
	ip.cloned = cgroupFD >= 0
	return ip, nil
}

// send moves the init into the exec's cgroup, unless it was cloned into it,
// and then sends its config: the init runs nothing before it has it.
func (ip *initProc) send(cg *execCgroup, ic initConfigX) error {
	var err error
	if cg != nil && !ip.cloned {
		err = cg.add(ip.cmd.Process.Pid)
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
