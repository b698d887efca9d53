package seccomp

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// program runs the compiled programs on one system call, as the kernel
// would, with x/net/bpf's interpreter.
type program struct {
	vms  []*bpf.VM
	arch *arch.Info
}

func compile(t *testing.T) program {
	t.Helper()
	progs, err := BPF()
	require.NoError(t, err)
	a, err := arch.GetInfo("")
	require.NoError(t, err)
	p := program{arch: a}
	for _, raw := range progs {
		var insts []bpf.Instruction
		for i := 0; i < len(raw); i += 8 {
			ri := bpf.RawInstruction{
				Op: binary.NativeEndian.Uint16(raw[i:]), Jt: raw[i+2], Jf: raw[i+3],
				K: binary.NativeEndian.Uint32(raw[i+4:]),
			}
			insts = append(insts, ri.Disassemble())
		}
		vm, err := bpf.NewVM(insts)
		require.NoError(t, err)
		p.vms = append(p.vms, vm)
	}
	return p
}

// run returns the verdict on call name with args: the strictest of all
// programs' (for allow and errno, the lowest value). The interpreter loads
// 32-bit words big-endian, so each word of struct seccomp_data is laid out
// big-endian at the offset where the kernel keeps it in this machine's
// order.
func (p program) run(t *testing.T, name string, args ...uint64) uint32 {
	t.Helper()
	nr, ok := p.arch.SyscallNames[name]
	if !ok {
		t.Fatalf("no call %s here", name)
	}
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], uint32(nr))
	binary.BigEndian.PutUint32(data[4:], uint32(p.arch.ID))
	little := binary.NativeEndian.Uint16([]byte{1, 0}) == 1
	for i, a := range args {
		lo, hi := uint32(a), uint32(a>>32)
		off := 16 + 8*i
		if little {
			binary.BigEndian.PutUint32(data[off:], lo)
			binary.BigEndian.PutUint32(data[off+4:], hi)
		} else {
			binary.BigEndian.PutUint32(data[off:], hi)
			binary.BigEndian.PutUint32(data[off+4:], lo)
		}
	}
	verdict := uint32(unix.SECCOMP_RET_ALLOW)
	for _, vm := range p.vms {
		v, err := vm.Run(data)
		require.NoError(t, err)
		verdict = min(verdict, uint32(v))
	}
	return verdict
}

const (
	allow = unix.SECCOMP_RET_ALLOW
	eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
)

func TestVerdicts(t *testing.T) {
	p := compile(t)
	for _, tc := range []struct {
		name string
		args []uint64
		want uint32
	}{
		{"read", nil, allow},
		{"execve", nil, allow},
		{"mount", nil, eperm},
		{"unshare", []uint64{unix.CLONE_NEWNS}, eperm},
		{"name_to_handle_at", nil, eperm},
		{"open_by_handle_at", nil, eperm},
		{"io_uring_setup", nil, eperm},
		{"clone", []uint64{uint64(unix.SIGCHLD)}, allow},
		{"clone", []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND}, allow},
		{"clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm},
		{"clone", []uint64{unix.CLONE_NEWUSER | unix.CLONE_VM | unix.CLONE_VFORK}, eperm},
		{"clone", []uint64{1<<32 | unix.CLONE_NEWUSER}, eperm},
		{"clone", []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWNS}, eperm},
		{"clone", []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWNET}, eperm},
		{"clone", []uint64{unix.CLONE_NEWPID}, eperm},
		{"clone", []uint64{1 << 32}, allow},
		{"clone", []uint64{unix.CLONE_NEWNS}, eperm},
		{"clone3", nil, unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{"socket", []uint64{unix.AF_UNIX}, allow},
		{"socket", []uint64{unix.AF_INET}, allow},
		{"socket", []uint64{unix.AF_INET6}, allow},
		{"socket", []uint64{unix.AF_NETLINK}, allow},
		{"socket", []uint64{unix.AF_VSOCK}, eperm},
		{"socket", []uint64{unix.AF_ALG}, eperm},
		{"socket", []uint64{1<<32 | unix.AF_INET}, eperm},
		{"personality", []uint64{0}, allow},
		{"personality", []uint64{0xffffffff}, allow},
		{"personality", []uint64{0x0040000 /* ADDR_NO_RANDOMIZE */}, eperm},
		// Arguments equal to the number of an allowed call (sendfile is
		// 40 on amd64, the number of AF_VSOCK) must not be taken for that call.
		{"personality", []uint64{uint64(p.arch.SyscallNames["sendfile"])}, eperm},
	} {
		if got := p.run(t, tc.name, tc.args...); got != tc.want {
			t.Errorf("%s%v: got %#x, want %#x", tc.name, tc.args, got, tc.want)
		}
	}
}

func TestRefusedNeverAllowed(t *testing.T) {
	prof, err := Profile()
	require.NoError(t, err)
	p := compile(t)
	for _, name := range Refused {
		if Allows(prof, name) {
			t.Errorf("the profile allows %s", name)
		}
		if _, ok := p.arch.SyscallNames[name]; !ok {
			continue
		}
		if got := p.run(t, name); got != eperm {
			t.Errorf("%s: got %#x, want EPERM", name, got)
		}
	}
}

// Every call Docker's profile allows for a process without capabilities,
// LayerFS allows too, but for the ones it refuses on purpose.
func TestDockerProfileKept(t *testing.T) {
	prof, err := Profile()
	require.NoError(t, err)
	if len(prof.Architectures) != 1 {
		t.Errorf("architectures %v, want the native one only", prof.Architectures)
	}
	n := 0
	for _, r := range prof.Syscalls {
		if r.Action == specs.ActAllow && len(r.Args) == 0 {
			n += len(r.Names)
			if slices.Contains(r.Names, "name_to_handle_at") {
				t.Error("name_to_handle_at allowed")
			}
		}
	}
	if n < 300 {
		t.Errorf("only %d calls allowed unconditionally; Docker's profile allows some 350", n)
	}
}

func TestDockerProfileJSON(t *testing.T) {
	for _, newUser := range []bool{false, true} {
		s, err := DockerProfile(newUser)
		require.NoError(t, err)
		for _, want := range []string{`"defaultAction":"SCMP_ACT_ERRNO"`, `"names":["clone"]`, `"SCMP_CMP_MASKED_EQ"`, `"architectures":["SCMP_ARCH_`} {
			// not assert.Contains: it would print the whole profile
			if !strings.Contains(s, want) {
				t.Errorf("docker profile (new user namespaces %v) lacks %s", newUser, want)
			}
		}
		var p specs.LinuxSeccomp
		require.NoError(t, json.Unmarshal([]byte(s), &p))
		var mask uint64
		for _, r := range p.Syscalls {
			if r.Action == specs.ActAllow && slices.Equal(r.Names, []string{"clone"}) {
				mask = r.Args[0].Value
			}
		}
		assert.NotZero(t, mask&unix.CLONE_NEWNS, "clone into a new mount namespace must stay refused")
		assert.Equal(t, !newUser, mask&unix.CLONE_NEWUSER != 0, "clone's namespace mask %#x with new user namespaces %v", mask, newUser)
	}
}

// The search tree decides every call number as go-seccomp-bpf's own
// assembly of the same policy does (the chain it replaces).
func TestTreeMatchesChain(t *testing.T) {
	prof, err := Profile()
	require.NoError(t, err)
	policies, err := policiesOf(prof)
	require.NoError(t, err)
	a, err := arch.GetInfo("")
	require.NoError(t, err)
	tree, err := byNumberTree(policies[0], a)
	require.NoError(t, err)
	chain, err := policies[0].Assemble()
	require.NoError(t, err)
	vm := func(insts []bpf.Instruction) *bpf.VM {
		v, err := bpf.NewVM(insts)
		require.NoError(t, err)
		return v
	}
	tv, cv := vm(tree), vm(chain)
	if len(tree) >= len(chain)/2 {
		t.Errorf("tree of %d instructions against a chain of %d", len(tree), len(chain))
	}
	data := make([]byte, 64)
	for _, archID := range []uint32{uint32(a.ID), 0x40000003 /* i386 */} {
		for nr := uint32(0); nr < 1024; nr++ {
			for _, n := range []uint32{nr, nr | x32Bit} {
				binary.BigEndian.PutUint32(data[0:], n)
				binary.BigEndian.PutUint32(data[4:], archID)
				got, err1 := tv.Run(data)
				want, err2 := cv.Run(data)
				if err1 != nil || err2 != nil || got != want {
					t.Fatalf("arch %#x call %#x: tree %#x (%v), chain %#x (%v)", archID, n, got, err1, want, err2)
				}
			}
		}
	}
}
