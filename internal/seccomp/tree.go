package seccomp

import (
	"fmt"
	"slices"

	bpfseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// x32Bit marks x32 system calls on x86-64 (__X32_SYSCALL_BIT).
const x32Bit = 0x40000000

// byNumberTree assembles a policy without argument conditions as a binary
// search over ranges of call numbers, where go-seccomp-bpf assembles a
// chain of comparisons, one per call. The kernel emulates a new filter
// once for every call number when it is loaded (to cache the calls it
// always allows) and compiles it, both in proportion to its length on
// the paths taken, and a sandbox loads it at every exec: a chain of
// Docker's ~370 calls is ~370 comparisons deep, the tree ~9.
//
// The program: a call of another architecture gets the default action,
// an x32 call ENOSYS (as go-seccomp-bpf does), then the search.
func byNumberTree(policy *bpfseccomp.Policy, a *arch.Info) ([]bpf.Instruction, error) {
	action := map[uint32]bpfseccomp.Action{}
	for _, g := range policy.Syscalls {
		if len(g.NamesWithCondtions) > 0 {
			return nil, fmt.Errorf("seccomp: the by-number program has argument conditions")
		}
		for _, name := range g.Names {
			nr, ok := a.SyscallNames[name]
			if !ok {
				return nil, fmt.Errorf("seccomp: no call %s on %s", name, a.Name)
			}
			if _, dup := action[uint32(nr)]; dup {
				return nil, fmt.Errorf("seccomp: %s has two actions", name)
			}
			action[uint32(nr)] = g.Action
		}
	}
	ranges := rangesOf(action, policy.DefaultAction)

	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.ID), SkipTrue: 1},
		bpf.RetConstant{Val: retValue(policy.DefaultAction)},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // nr
	}
	if a.ID == arch.X86_64.ID {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1},
			bpf.RetConstant{Val: retValue(bpfseccomp.ActionErrno | bpfseccomp.Action(38))}, // ENOSYS
		)
	}
	tree, err := search(ranges)
	if err != nil {
		return nil, err
	}
	return append(prog, tree...), nil
}

// span is the calls from first on, up to the next span's first, and what
// they get.
type span struct {
	first  uint32
	action bpfseccomp.Action
}

// rangesOf turns per-number actions into spans covering every number.
func rangesOf(action map[uint32]bpfseccomp.Action, def bpfseccomp.Action) []span {
	nrs := make([]uint32, 0, len(action))
	for nr := range action {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	out := []span{{0, def}}
	add := func(first uint32, a bpfseccomp.Action) {
		if last := &out[len(out)-1]; last.first == first {
			last.action = a
		} else if last.action != a {
			out = append(out, span{first, a})
		}
		// Merge with the one before when the change made them equal.
		if n := len(out); n >= 2 && out[n-1].action == out[n-2].action {
			out = out[:n-1]
		}
	}
	for _, nr := range nrs {
		add(nr, action[nr])
		add(nr+1, def)
	}
	return out
}

// search assembles a binary search over spans, the call number loaded:
// each node jumps to its upper half when the number is at least the upper
// half's first, and a leaf returns its span's action.
func search(spans []span) ([]bpf.Instruction, error) {
	if len(spans) == 1 {
		return []bpf.Instruction{bpf.RetConstant{Val: retValue(spans[0].action)}}, nil
	}
	mid := len(spans) / 2
	lower, err := search(spans[:mid])
	if err != nil {
		return nil, err
	}
	upper, err := search(spans[mid:])
	if err != nil {
		return nil, err
	}
	if len(lower) > 255 {
		return nil, fmt.Errorf("seccomp: a jump over %d instructions does not fit classic BPF", len(lower))
	}
	node := bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: spans[mid].first, SkipTrue: uint8(len(lower))}
	return append(append([]bpf.Instruction{node}, lower...), upper...), nil
}

// retValue is the seccomp return value of an action (errno actions carry
// their errno; go-seccomp-bpf's bare ActionErrno means EPERM).
func retValue(a bpfseccomp.Action) uint32 {
	if a == bpfseccomp.ActionErrno {
		return uint32(a) | 1 // EPERM
	}
	return uint32(a)
}
