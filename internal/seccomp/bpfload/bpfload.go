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

// Notifies reports whether prog has a "return SECCOMP_RET_USER_NOTIF" (the
// clone program's answer to a clone whose only namespace flag is
// CLONE_NEWUSER; see package seccomp).
func Notifies(prog []byte) bool {
	for i := 0; i+8 <= len(prog); i += 8 {
		if isRetNotify(prog[i:]) {
			return true
		}
	}
	return false
}

// RefuseNewUser returns progs with every "notify" answer turned into EPERM,
// for a process that will never answer a notification: every clone into a
// new user namespace is then refused as the rest of the filter's refusals
// are (without a listener the kernel would answer ENOSYS). progs is not
// changed.
func RefuseNewUser(progs [][]byte) [][]byte {
	out := make([][]byte, len(progs))
	for i, prog := range progs {
		out[i] = prog
		if !Notifies(prog) {
			continue
		}
		p := append([]byte(nil), prog...)
		for j := 0; j+8 <= len(p); j += 8 {
			if isRetNotify(p[j:]) {
				binary.NativeEndian.PutUint32(p[j+4:], unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
			}
		}
		out[i] = p
	}
	return out
}

func isRetNotify(inst []byte) bool {
	const retK = unix.BPF_RET | unix.BPF_K
	return binary.NativeEndian.Uint16(inst) == retK && binary.NativeEndian.Uint32(inst[4:]) == unix.SECCOMP_RET_USER_NOTIF
}

// Load installs prog on the calling thread only (no
// SECCOMP_FILTER_FLAG_TSYNC), with seccomp(2)'s flags, and returns what
// the call returns: a listener's descriptor with
// SECCOMP_FILTER_FLAG_NEW_LISTENER, else 0. The thread needs no_new_privs
// (or CAP_SYS_ADMIN); a Go caller locks it first.
func Load(prog []byte, flags uintptr) (int, error) {
	if len(prog) == 0 || len(prog)%8 != 0 || len(prog)/8 > unix.BPF_MAXINSNS {
		return -1, fmt.Errorf("load seccomp filter: malformed program of %d bytes", len(prog))
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
	r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return -1, fmt.Errorf("load seccomp filter: %w", errno)
	}
	return int(r), nil
}
