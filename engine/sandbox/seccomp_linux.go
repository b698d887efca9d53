package sandbox

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// loadSyscallFilter installs progs, classic BPF seccomp programs as
// internal/seccomp.BPF encodes them (8 bytes per instruction), in order, on
// the calling thread only. The init calls it on the thread that forks the
// command, after no_new_privs is set there and just before the fork, so
// the command and everything it starts inherit them while the init's
// other threads, and its own setup before this point, are not filtered.
func loadSyscallFilter(progs [][]byte) error {
	for _, prog := range progs {
		if err := loadProgram(prog); err != nil {
			return err
		}
	}
	return nil
}

func loadProgram(prog []byte) error {
	if len(prog) == 0 || len(prog)%8 != 0 || len(prog)/8 > unix.BPF_MAXINSNS {
		return fmt.Errorf("load seccomp filter: malformed program of %d bytes", len(prog))
	}
	insts := make([]unix.SockFilter, len(prog)/8)
	for i := range insts {
		b := prog[8*i:]
		insts[i] = unix.SockFilter{
			Code: binary.NativeEndian.Uint16(b),
			Jt:   b[2],
			Jf:   b[3],
			K:    binary.NativeEndian.Uint32(b[4:]),
		}
	}
	fprog := unix.SockFprog{Len: uint16(len(insts)), Filter: &insts[0]}
	// No SECCOMP_FILTER_FLAG_TSYNC: the filter is this thread's alone.
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("load seccomp filter: %w", errno)
	}
	return nil
}
