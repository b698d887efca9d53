package sandbox

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompEnv carries Launcher.SyscallFilter to every init it starts, in
// its environment rather than its config: a warm init then has it before
// its exec, and the config that is sent on the exec's latency stays small.
// The value is the programs in base64, separated by dots. The command's
// environment is built from scratch, so it never sees it.
const seccompEnv = "LAYERFS_SANDBOX_SECCOMP"

// encodeFilter is seccompEnv's value for progs.
func encodeFilter(progs [][]byte) string {
	parts := make([]string, len(progs))
	for i, p := range progs {
		parts[i] = base64.RawStdEncoding.EncodeToString(p)
	}
	return strings.Join(parts, ".")
}

// filterFromEnv decodes the programs the launcher put in seccompEnv.
func filterFromEnv() ([][]byte, error) {
	v := os.Getenv(seccompEnv)
	if v == "" {
		return nil, errors.New("load seccomp filter: the launcher sent none")
	}
	var progs [][]byte
	for _, part := range strings.Split(v, ".") {
		p, err := base64.RawStdEncoding.DecodeString(part)
		if err != nil {
			return nil, fmt.Errorf("load seccomp filter: %w", err)
		}
		progs = append(progs, p)
	}
	return progs, nil
}

// loadSyscallFilter installs progs, classic BPF seccomp programs as
// internal/seccomp.BPF encodes them (8 bytes per instruction), in order, on
// the calling thread only. The init calls it on the thread that forks the
// command, after no_new_privs is set there and just before the fork, so
// the command and everything it starts inherit them while the init's
// other threads, and its own setup before this point, are not filtered.
// A program that can return SECCOMP_RET_USER_NOTIF (clone's) is loaded
// with a listener, returned (else -1) for answerNewUser to serve.
func loadSyscallFilter(progs [][]byte) (listener int, err error) {
	listener = -1
	for _, prog := range progs {
		flags := uintptr(0)
		if listener < 0 && notifies(prog) {
			flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
		}
		fd, err := loadProgram(prog, flags)
		if err != nil {
			if listener >= 0 {
				unix.Close(listener)
			}
			return -1, err
		}
		if flags != 0 {
			listener = fd
			unix.CloseOnExec(fd)
		}
	}
	return listener, nil
}

// notifies reports whether prog has a "return SECCOMP_RET_USER_NOTIF".
func notifies(prog []byte) bool {
	const retK = unix.BPF_RET | unix.BPF_K
	for i := 0; i+8 <= len(prog); i += 8 {
		if binary.NativeEndian.Uint16(prog[i:]) == retK && binary.NativeEndian.Uint32(prog[i+4:]) == unix.SECCOMP_RET_USER_NOTIF {
			return true
		}
	}
	return false
}

func loadProgram(prog []byte, flags uintptr) (int, error) {
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
	// No SECCOMP_FILTER_FLAG_TSYNC: the filter is this thread's alone.
	r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return -1, fmt.Errorf("load seccomp filter: %w", errno)
	}
	return int(r), nil
}
