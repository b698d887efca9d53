package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// CPUPeriod is the period of a CPU limit: n thousandths of a CPU are
// n*100 µs of CPU time in every 100 ms.
const CPUPeriod = 100 * time.Millisecond

// cpuQuota is milliCPUs' share of CPUPeriod, in µs.
func cpuQuota(milliCPUs int) int64 { return int64(milliCPUs) * CPUPeriod.Microseconds() / 1000 }

// WriteFile writes value to the control file name of the cgroup directory
// dir.
func WriteFile(dir, name, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", name, err)
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("cgroup %s: %w", name, werr)
	}
	if cerr != nil {
		return fmt.Errorf("cgroup %s: %w", name, cerr)
	}
	return nil
}

// Enter moves the process pid into the cgroup directory dir.
func Enter(dir string, pid int) error {
	if err := WriteFile(dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("move pid %d into %s: %w", pid, dir, err)
	}
	return nil
}

// SetPids sets pids.max of dir (the same file in v1 and v2); 0 lifts it.
func SetPids(dir string, max int64) error {
	v := strconv.FormatInt(max, 10)
	if max == 0 {
		v = "max"
	}
	return WriteFile(dir, "pids.max", v)
}

// SetMemoryV1 sets the v1 memory cgroup dir's limit to mem bytes, and the
// same for memory and swap together where swap is accounted, so no swap
// comes on top; 0 lifts both. prev is the limit dir has now (0 for none):
// memsw may never be below the memory limit, so it is raised first and
// lowered after.
func SetMemoryV1(dir string, mem, prev int64) error {
	v := strconv.FormatInt(mem, 10)
	if mem == 0 {
		v = "-1"
	}
	// memory.memsw.* is absent without swap accounting: its errors are not
	// the limit's.
	up := mem == 0 || (prev != 0 && mem > prev)
	if up {
		_ = WriteFile(dir, "memory.memsw.limit_in_bytes", v)
	}
	if err := WriteFile(dir, "memory.limit_in_bytes", v); err != nil {
		return err
	}
	if !up {
		_ = WriteFile(dir, "memory.memsw.limit_in_bytes", v)
	}
	return nil
}

// SetMemoryV2 sets the v2 cgroup dir's memory.max to mem bytes and its
// swap to none; 0 lifts both.
func SetMemoryV2(dir string, mem int64) error {
	v, swap := strconv.FormatInt(mem, 10), "0"
	if mem == 0 {
		v, swap = "max", "max"
	}
	if err := WriteFile(dir, "memory.max", v); err != nil {
		return err
	}
	_ = WriteFile(dir, "memory.swap.max", swap) // absent without swap accounting
	return nil
}

// SetCPUV1 sets the v1 cpu cgroup dir's CFS quota to milliCPUs thousandths
// of a CPU; 0 lifts it.
func SetCPUV1(dir string, milliCPUs int) error {
	if milliCPUs == 0 {
		return WriteFile(dir, "cpu.cfs_quota_us", "-1")
	}
	if err := WriteFile(dir, "cpu.cfs_period_us", strconv.FormatInt(CPUPeriod.Microseconds(), 10)); err != nil {
		return err
	}
	return WriteFile(dir, "cpu.cfs_quota_us", strconv.FormatInt(cpuQuota(milliCPUs), 10))
}

// SetCPUV2 sets the v2 cgroup dir's cpu.max to milliCPUs thousandths of a
// CPU; 0 lifts it.
func SetCPUV2(dir string, milliCPUs int) error {
	quota := strconv.FormatInt(cpuQuota(milliCPUs), 10)
	if milliCPUs == 0 {
		quota = "max"
	}
	return WriteFile(dir, "cpu.max", quota+" "+strconv.FormatInt(CPUPeriod.Microseconds(), 10))
}

// removeWait bounds how long Remove retries a busy cgroup.
const removeWait = time.Second

// Remove deletes cgroup directories whose processes are gone; one that is
// already gone is no error. A process being reaped keeps a cgroup busy
// (EBUSY) for a moment, so a busy one is retried for up to a second.
func Remove(dirs ...string) error {
	var errs []error
	for _, d := range dirs {
		var err error
		deadline := time.Now().Add(removeWait)
		for delay := 100 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
			err = unix.Rmdir(d)
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				break
			}
			time.Sleep(delay)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
