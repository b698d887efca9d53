package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/cgroups"
)

// initTasks is headroom added to an exec's pids limit for the init's own
// threads (the Go runtime's), which live in the same cgroup.
const initTasks = 16

// cgroupDirs is where a launcher creates its per-exec cgroups: below the
// launcher's own cgroup, in cgroup v2 when the unified hierarchy delegates
// memory and pids there, else in the v1 memory, pids and cpu hierarchies.
// An empty field means that controller is not available.
type cgroupDirs struct {
	unified    string // v2 parent directory with memory and pids delegated
	unifiedCPU bool   // ... and cpu
	memory     string // v1 memory parent directory
	pids       string // v1 pids parent directory
	cpu        string // v1 cpu parent directory
}

func (c *cgroupDirs) hasMemory() bool { return c.unified != "" || c.memory != "" }
func (c *cgroupDirs) hasPids() bool   { return c.unified != "" || c.pids != "" }
func (c *cgroupDirs) hasCPU() bool    { return c.unifiedCPU || c.cpu != "" }

// enforcement says how each limit is enforced: by which cgroup version, or
// by what stands in for it (see the package comment's Limits).
func (c *cgroupDirs) enforcement() (memory, pids, cpu string) {
	by := func(v2 bool, v1 string, without string) string {
		switch {
		case v2:
			return "cgroup v2"
		case v1 != "":
			return "cgroup v1"
		}
		return without
	}
	return by(c.unified != "", c.memory, "rlimit (RLIMIT_AS)"),
		by(c.unified != "", c.pids, "rlimit (RLIMIT_NPROC, for uids other than 0)"),
		by(c.unifiedCPU, c.cpu, "none: an exec that asks for a CPU limit is refused")
}

// parents are the directories below which exec cgroups are made.
func (c *cgroupDirs) parents() []string {
	var out []string
	for _, d := range []string{c.unified, c.memory, c.pids, c.cpu} {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// detectCgroups finds the cgroup directories of this process from
// /proc/self/cgroup and /proc/self/mountinfo.
func detectCgroups() (*cgroupDirs, error) {
	own, err := cgroups.Paths("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mounts, err := cgroups.Mounts("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	c := &cgroupDirs{}
	dirOf := func(key string) string {
		m, ok := mounts[key]
		p, ok2 := own[key]
		if !ok || !ok2 {
			return ""
		}
		d, ok := m.Path(p)
		if !ok {
			return "" // our cgroup is not visible through this mount
		}
		if unix.Access(d, unix.W_OK) != nil {
			return ""
		}
		return d
	}
	if d := dirOf(""); d != "" && unifiedDelegates(d, "memory", "pids") {
		c.unified = d
		c.unifiedCPU = unifiedDelegates(d, "cpu")
		return c, nil
	}
	c.memory = dirOf("memory")
	c.pids = dirOf("pids")
	c.cpu = dirOf("cpu")
	return c, nil
}

// unifiedDelegates reports whether children of the v2 cgroup d get all the
// given controllers.
func unifiedDelegates(d string, controllers ...string) bool {
	b, err := os.ReadFile(filepath.Join(d, "cgroup.subtree_control"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	for _, c := range controllers {
		if !slices.Contains(f, c) {
			return false
		}
	}
	return true
}

// execCgroup is the cgroup (one directory per hierarchy) of one exec.
type execCgroup struct {
	unified, memory, pids, cpu string // directories, "" where there is none
	cpuParent                  string // the v1 cpu hierarchy's parent, for addCPU
	// fd is the v2 directory for CLONE_INTO_CGROUP, -1 for v1.
	fd int
	// pidsMax is the pids limit limit wrote (without the init's tasks),
	// 0 for none yet: a warm init's is written ahead, for the default.
	pidsMax int
	// memMax and milliCPUs are the memory and CPU limits limit wrote, 0
	// for none: a kept init's cgroup serves several execs, each with its
	// own limits.
	memMax    int64
	milliCPUs int
}

func (e *execCgroup) dirs() []string {
	var out []string
	for _, d := range []string{e.unified, e.pids, e.memory, e.cpu} {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// create makes the cgroup for one exec, named name; withMemory and withCPU
// make its v1 memory and cpu cgroups too (v2 always has them). Limits are
// set by limit.
func (c *cgroupDirs) create(name string, withMemory, withCPU bool) (_ *execCgroup, err error) {
	e := &execCgroup{fd: -1}
	defer func() {
		if err != nil {
			_ = e.remove()
		}
	}()
	mk := func(parent string, dir *string) error {
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup: %w", err)
		}
		*dir = d
		return nil
	}
	if c.unified != "" {
		if err := mk(c.unified, &e.unified); err != nil {
			return nil, err
		}
		e.fd, err = unix.Open(e.unified, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open cgroup: %w", err)
		}
		return e, nil
	}
	if c.pids != "" {
		if err := mk(c.pids, &e.pids); err != nil {
			return nil, err
		}
	}
	if c.memory != "" && withMemory {
		if err := mk(c.memory, &e.memory); err != nil {
			return nil, err
		}
	}
	e.cpuParent = c.cpu
	if c.cpu != "" && withCPU {
		if err := mk(c.cpu, &e.cpu); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// addCPU gives an exec made without one (a warm init's) its v1 cpu
// cgroup and moves pid, its init, in: the init is still blocked on its
// config, so nothing of the exec has run outside it. Nothing is done in
// cgroup v2 (the unified cgroup has the controller) or when there is one.
func (e *execCgroup) addCPU(pid int) error {
	if e.unified != "" || e.cpu != "" || e.cpuParent == "" {
		return nil
	}
	name := ""
	for _, d := range e.dirs() {
		name = filepath.Base(d)
	}
	if name == "" {
		return errors.New("cgroup: no name for a cpu cgroup")
	}
	d := filepath.Join(e.cpuParent, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		return fmt.Errorf("create cgroup: %w", err)
	}
	e.cpu = d
	return cgroups.Enter(d, pid)
}

// limit sets the exec's limits: pids (plus the init's own threads) and
// memory without swap and CPU in thousandths of a CPU, 0 for none. Each is
// written only when it differs from what the cgroup has.
func (e *execCgroup) limit(mem int64, pids, milliCPUs int) error {
	if pids != e.pidsMax {
		if err := e.limitPids(pids); err != nil {
			return err
		}
		e.pidsMax = pids
	}
	if mem != e.memMax {
		if err := e.limitMemory(mem); err != nil {
			return err
		}
		e.memMax = mem
	}
	if milliCPUs != e.milliCPUs {
		if err := e.limitCPU(milliCPUs); err != nil {
			return err
		}
		e.milliCPUs = milliCPUs
	}
	return nil
}

func (e *execCgroup) limitPids(pids int) error {
	max := int64(pids + initTasks)
	switch {
	case e.unified != "":
		return cgroups.SetPids(e.unified, max)
	case e.pids != "":
		return cgroups.SetPids(e.pids, max)
	}
	return nil
}

// limitMemory sets the memory limit, and the same for memory and swap
// together where swap is accounted; 0 lifts it.
func (e *execCgroup) limitMemory(mem int64) error {
	switch {
	case e.unified != "":
		return cgroups.SetMemoryV2(e.unified, mem)
	case e.memory != "":
		return cgroups.SetMemoryV1(e.memory, mem, e.memMax)
	case mem != 0:
		return errors.New("cgroup: no memory cgroup for a memory limit")
	}
	return nil
}

// limitCPU sets the CPU limit; 0 lifts it.
func (e *execCgroup) limitCPU(milliCPUs int) error {
	switch {
	case e.unified != "":
		return cgroups.SetCPUV2(e.unified, milliCPUs)
	case e.cpu != "":
		return cgroups.SetCPUV1(e.cpu, milliCPUs)
	case milliCPUs != 0:
		return errors.New("cgroup: no cpu cgroup for a CPU limit")
	}
	return nil
}

// add moves pid (the init, before it runs anything) into the exec's
// cgroup in every hierarchy.
func (e *execCgroup) add(pid int) error {
	for _, d := range e.dirs() {
		if err := cgroups.Enter(d, pid); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the exec's cgroup directories. The init has been reaped,
// and with it every task of its PID namespace (cgroups.Remove waits out a
// v1 hierarchy that still reports one for a moment).
func (e *execCgroup) remove() error {
	if e.fd >= 0 {
		unix.Close(e.fd)
		e.fd = -1
	}
	err := cgroups.Remove(e.dirs()...)
	e.unified, e.memory, e.pids, e.cpu = "", "", "", ""
	return err
}
