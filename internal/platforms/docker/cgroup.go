package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/cgroups"
)

// Per-exec limits. Docker's limits are per container, shared by all of a
// workspace's execs; ExecSpec.MemoryBytes and Pids are per exec. Where the
// engine runs on this host with cgroup v1 (memory and pids hierarchies
// writable by us), the host puts each limited exec's supervisor into a
// child cgroup of its container's, with the exec's limits, before the
// supervisor starts the command: the supervisor waits for one byte on its
// stdin, which the host sends once the move is done. (cgroup v2 would need
// the container's own cgroup to hold no processes, which PID 1 breaks.)

// execCgroupPrefix names per-exec cgroups.
const execCgroupPrefix = "layerfs-exec-"

// supervisorTasks is headroom in an exec's pids limit for the supervisor's
// own threads (the Go runtime's), which share the cgroup.
const supervisorTasks = 16

// cgroupV1 is where this host's v1 memory, pids and (when there is one,
// for CPU limits) cpu hierarchies are mounted.
type cgroupV1 struct {
	memory, pids, cpu cgroups.Mount
}

// detectCgroupV1 finds writable v1 memory and pids hierarchies, or says why
// there are none.
func detectCgroupV1() (*cgroupV1, error) {
	mounts, err := cgroups.Mounts("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	c := &cgroupV1{memory: mounts["memory"], pids: mounts["pids"], cpu: mounts["cpu"]}
	if c.cpu.Dir != "" && unix.Access(c.cpu.Dir, unix.W_OK) != nil {
		c.cpu = cgroups.Mount{}
	}
	if c.memory.Dir == "" || c.pids.Dir == "" {
		return nil, errors.New("no cgroup v1 memory and pids hierarchies")
	}
	for _, d := range []string{c.memory.Dir, c.pids.Dir} {
		if err := unix.Access(d, unix.W_OK); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", d, err)
		}
	}
	return c, nil
}

// execCgroup is one exec's pair of cgroups.
type execCgroup struct{ dirs []string }

// limit creates cgroups for the process pid (the supervisor), beside it in
// its container's cgroup, sets the limits and moves pid in.
func (c *cgroupV1) limit(pid int, name string, memory, pids int64, milliCPUs int) (*execCgroup, error) {
	if milliCPUs > 0 && c.cpu.Dir == "" {
		return nil, errors.New("a CPU limit needs a writable cgroup v1 cpu hierarchy")
	}
	own, err := cgroups.Paths("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil, err
	}
	ec := &execCgroup{}
	for _, h := range []struct {
		ctrl string
		mp   cgroups.Mount
		set  func(dir string) error
	}{
		{"memory", c.memory, func(d string) error { return cgroups.SetMemoryV1(d, memory, 0) }},
		{"pids", c.pids, func(d string) error { return cgroups.SetPids(d, pids+supervisorTasks) }},
		{"cpu", c.cpu, func(d string) error { return cgroups.SetCPUV1(d, milliCPUs) }},
	} {
		if (h.ctrl == "memory" && memory <= 0) || (h.ctrl == "pids" && pids <= 0) || (h.ctrl == "cpu" && milliCPUs <= 0) {
			continue
		}
		p, ok := own[h.ctrl]
		if !ok {
			return ec, fmt.Errorf("pid %d has no %s cgroup", pid, h.ctrl)
		}
		parent, ok := h.mp.Path(p)
		if !ok {
			return ec, fmt.Errorf("%s cgroup %s of pid %d is not under %s", h.ctrl, p, pid, h.mp.Dir)
		}
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return ec, err
		}
		ec.dirs = append(ec.dirs, dir)
		if err := h.set(dir); err != nil {
			return ec, err
		}
		if err := cgroups.Enter(dir, pid); err != nil {
			return ec, err
		}
	}
	return ec, nil
}

// remove deletes the exec's cgroups once their processes are gone.
func (ec *execCgroup) remove() error { return cgroups.Remove(ec.dirs...) }
