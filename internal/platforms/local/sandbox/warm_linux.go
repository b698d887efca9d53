package sandbox

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms"
)

// take returns a warm init for an exec without network or image, or nil.
// Run tops the pool up once the exec is done (topUp), so that Warm inits
// are kept ready; the replacements warm up at the lowest CPU priority (see
// warmOne), so they use what later commands leave free rather than compete
// with them.
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
		// answer of the exec that started it and slowed the call after
		// that (a commit right after an exec).
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
	// The pipes of the init's first exec, made before the init: they
	// are off every exec's path.
	spare, err := newExecEnds(nil)
	if err != nil {
		l.logger().Warn("sandbox warm init", "err", err)
		l.mu.Lock()
		l.warming--
		l.mu.Unlock()
		return
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
			spare.closeTheirs(nil)
			spare.closeOurs()
			l.mu.Lock()
			l.warming--
			l.mu.Unlock()
			return
		}
	}
	ip, err := l.spawn(l.defaultKind(), cg)
	if err != nil && cg != nil {
		_ = cg.remove()
	}
	if err == nil {
		// Warming runs only on CPU that no command wants. The priority
		// comes back once the init only waits, or when an exec takes it
		// before: either way before it runs anything of an exec.
		renice(ip.pid, warmNice)
		ip.listen(ip.restoreWhenReady(nice))
		ip.spare = spare
	} else {
		spare.closeTheirs(nil)
		spare.closeOurs()
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

// Close stops keeping warm inits and kills those that are waiting, those
// that Sessions keep too, and stops the spawner once no exec is in flight.
// Execs in flight are not affected; Run still works afterwards, starting
// every init on demand.
func (l *Launcher) Close(ctx context.Context) error {
	l.init()
	l.mu.Lock()
	l.closed = true
	sessions := make([]*Session, 0, len(l.sessions))
	for s := range l.sessions {
		sessions = append(sessions, s)
	}
	l.mu.Unlock()
	done := make(chan struct{})
	go func() {
		for _, s := range sessions {
			s.drop()
		}
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

// warmNice is the nice value of inits warming up.
const warmNice = 19

// restoreWhenReady is what a warm init does at its first ready message
// (prepared, waiting for its exec): it gets the nice value nice, unless an
// exec took it first, which gave it that value already (renicing an
// init's threads is work better kept off an exec's path).
func (ip *initProc) restoreWhenReady(nice int) func() {
	return func() {
		ip.niceMu.Lock()
		defer ip.niceMu.Unlock()
		if !ip.taken {
			renice(ip.pid, nice)
			ip.restored = true
		}
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
