// Package cgroups is the one place LayerFS touches cgroups for the two
// places that give execs cgroups of their own: the local sandbox launcher
// (cgroup v2 when the unified hierarchy delegates memory and pids, else
// v1) and the docker platform (v1 only).
//
// It finds where this host's hierarchies are mounted and which cgroup a
// process is in from the kernel's own descriptions, /proc/PID/cgroup and
// /proc/PID/mountinfo (Paths, Mounts); only the unified hierarchy and the
// v1 memory, pids and cpu controllers are looked for, the limits LayerFS
// sets. It writes those limits in each version's files (SetMemoryV1,
// SetMemoryV2, SetPids, SetCPUV1, SetCPUV2), moves a process in (Enter) and
// removes a cgroup once its processes are gone, waiting out the moment a
// reaped process still keeps it busy (Remove). What to create below the
// directories it finds, and whether they are writable, is the caller's
// business.
package cgroups
