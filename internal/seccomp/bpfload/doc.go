// Package bpfload installs the seccomp programs that package seccomp
// compiles (classic BPF, 8 bytes per instruction) on the calling thread,
// and carries them between processes as text.
//
// It is the half of the filter that runs in every sandboxed exec: the
// local sandbox init and the docker platform's supervisor link it, and
// neither links the compiler (package seccomp and go-seccomp-bpf, whose
// package initialisation would run at every process start). It depends
// on golang.org/x/sys only.
package bpfload
