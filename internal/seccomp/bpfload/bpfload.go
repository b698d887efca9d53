package bpfload

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Encode renders progs as one line of text: each program in base64,
// separated by dots (an environment variable's value, say).
func Encode(progs [][]byte) string {
	parts := make([]string, len(progs))
	for i, p := range progs {
		parts[i] = base64.RawStdEncoding.EncodeToString(p)
	}
	return strings.Join(parts, ".")
}

// Decode is Encode's inverse.
func Decode(s string) ([][]byte, error) {
	if s == "" {
		return nil, errors.New("seccomp filter: none was sent")
	}
	var progs [][]byte
	for _, part := range strings.Split(s, ".") {
		p, err := base64.RawStdEncoding.DecodeString(part)
		if err != nil {
			return nil, fmt.Errorf("seccomp filter: %w", err)
		}
		progs = append(progs, p)
	}
	return progs, nil
}

// Load installs prog on the calling thread only (no
// SECCOMP_FILTER_FLAG_TSYNC). The thread needs no_new_privs (or
// CAP_SYS_ADMIN); a Go caller locks it first.
func Load(prog []byte) error {
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
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("load seccomp filter: %w", errno)
	}
	return nil
}
