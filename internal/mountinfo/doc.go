// Package mountinfo reads /proc/PID/mountinfo: the mounts a process sees,
// with the escapes of the kernel's format undone.
package mountinfo
