// Package cgroups finds where this host's cgroup hierarchies are mounted
// and which cgroup a process is in, for the two places that give execs
// their own memory and pids cgroups: the local sandbox launcher (cgroup v2
// when the unified hierarchy delegates memory and pids, else v1) and the
// docker platform (v1 only).
//
// It reads the kernel's own descriptions, /proc/PID/cgroup and
// /proc/PID/mountinfo, and creates nothing: what to make below the
// directories it finds, and whether they are writable, is the caller's
// business. Only the unified hierarchy and the v1 memory and pids
// controllers are looked for; those are the limits LayerFS sets.
package cgroups
