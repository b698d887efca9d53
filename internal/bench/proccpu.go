package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// treeCPU is the CPU time the kernel has charged to a process and every
// process below it, read from /proc: a live process's own time, and the
// time of the children it has reaped (which includes theirs). Work the
// kernel does for them in its own threads (a namespace's teardown in a
// workqueue, RCU callbacks) is not in it.
type treeCPU struct {
	// Self is the root's own user and system time.
	User, Sys time.Duration
	// Below is everything under the root: its live descendants' own time
	// and the time of every process reaped by the root or one of them.
	Below time.Duration
}

// Total is the whole tree's CPU time.
func (t treeCPU) Total() time.Duration { return t.User + t.Sys + t.Below }

// Sub is t minus an earlier reading.
func (t treeCPU) Sub(u treeCPU) treeCPU {
	return treeCPU{User: t.User - u.User, Sys: t.Sys - u.Sys, Below: t.Below - u.Below}
}

// procStat is the fields of /proc/PID/stat a tree reading needs.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime time.Duration
}

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux
// everywhere).
const clockTick = 10 * time.Millisecond

// readStat parses /proc/PID/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name is in parentheses and may hold spaces: the fields
	// start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14-17.
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	n := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	tick := func(k int) time.Duration { return time.Duration(n(k)) * clockTick }
	return procStat{ppid: int(n(4)), utime: tick(14), stime: tick(15), cutime: tick(16), cstime: tick(17)}, nil
}

// readTreeCPU reads the CPU time of root and everything below it.
func readTreeCPU(root int) (treeCPU, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return treeCPU{}, err
	}
	stats := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := readStat(pid); err == nil {
			stats[pid] = s
		}
	}
	r, ok := stats[root]
	if !ok {
		return treeCPU{}, fmt.Errorf("process %d is gone", root)
	}
	t := treeCPU{User: r.utime, Sys: r.stime, Below: r.cutime + r.cstime}
	for pid, s := range stats {
		if pid != root && below(stats, pid, root) {
			t.Below += s.utime + s.stime + s.cutime + s.cstime
		}
	}
	return t, nil
}

// below reports whether pid descends from root.
func below(stats map[int]procStat, pid, root int) bool {
	for range 64 {
		s, ok := stats[pid]
		if !ok || s.ppid == 0 {
			return false
		}
		if s.ppid == root {
			return true
		}
		pid = s.ppid
	}
	return false
}

// selfCPU is this process's CPU time and that of the children it has
// reaped.
func selfCPU() (self, children time.Duration) {
	var s, c unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &s)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &c)
	cpu := func(r unix.Rusage) time.Duration {
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	return cpu(s), cpu(c)
}

// treeMemory is what a process tree holds in memory: the root's
// proportional set size and that of everything below it (the sandbox's
// processes: the spawner and the inits), in bytes.
func treeMemory(root int) (self, belowPss int64, err error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, err
	}
	stats := map[int]procStat{}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if s, err := readStat(pid); err == nil {
				stats[pid] = s
			}
		}
	}
	if self, err = pss(root); err != nil {
		return 0, 0, err
	}
	for pid := range stats {
		if below(stats, pid, root) {
			p, _ := pss(pid) // gone meanwhile: nothing
			belowPss += p
		}
	}
	return self, belowPss, nil
}

// pss reads a process's Pss from /proc/PID/smaps_rollup, in bytes.
func pss(pid int) (int64, error) {
	return procField("/proc/"+strconv.Itoa(pid)+"/smaps_rollup", "Pss:")
}

// kernelMemory is the memory the kernel holds for itself, in bytes: its
// slab caches (dentries, inodes, mounts, namespaces), kernel stacks and
// page tables, from /proc/meminfo.
func kernelMemory() (int64, error) {
	var sum int64
	for _, f := range []string{"Slab:", "KernelStack:", "PageTables:"} {
		v, err := procField("/proc/meminfo", f)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}
