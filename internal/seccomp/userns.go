package seccomp

import (
	"encoding/binary"
	"fmt"

	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// cloneProgram is the program that decides clone by its flags, in place of
// the one go-seccomp-bpf would assemble from Docker's rule (allow clone
// when flags&mask == 0, mask being every namespace flag; refuse it
// otherwise). It differs in one case: flags whose only namespace flag is
// CLONE_NEWUSER get SECCOMP_RET_USER_NOTIF instead of EPERM. The local
// sandbox init forks the command into a new user namespace from a thread
// that already runs under the filter, and answers that one notification
// itself (its own fork, by thread id) with "continue" and every other one
// with EPERM; see engine/sandbox. Without a listener the kernel answers
// ENOSYS. Only the low 32 bits of the flags count: clone takes no more.
func cloneProgram(rule specs.LinuxSyscall, a *arch.Info) ([]bpf.Instruction, error) {
	if len(rule.Args) != 1 || rule.Args[0].Index != 0 || rule.Args[0].Op != specs.OpMaskedEqual ||
		rule.Args[0].ValueTwo != 0 || rule.Args[0].Value>>32 != 0 || rule.Args[0].Value&unix.CLONE_NEWUSER == 0 {
		return nil, fmt.Errorf("seccomp: clone's rule is not flags&namespaces == 0: %+v", rule.Args)
	}
	nr, ok := a.SyscallNames["clone"]
	if !ok {
		return nil, fmt.Errorf("seccomp: no clone on this architecture")
	}
	mask := uint32(rule.Args[0].Value)
	lowWord := uint32(16) // args[0] in struct seccomp_data, low half first
	if !littleEndian() {
		lowWord += 4
	}
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		notify = unix.SECCOMP_RET_USER_NOTIF
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	)
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // arch: another one is the by-number program's
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.ID), SkipFalse: 6},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // nr
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 4},
		bpf.LoadAbsolute{Off: lowWord, Size: 4},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mask},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.CLONE_NEWUSER, SkipTrue: 1, SkipFalse: 2},
		bpf.RetConstant{Val: allow},
		bpf.RetConstant{Val: notify},
		bpf.RetConstant{Val: eperm},
	}, nil
}

// littleEndian reports this machine's byte order.
func littleEndian() bool { return binary.NativeEndian.Uint16([]byte{1, 0}) == 1 }
