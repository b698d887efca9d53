package seccomp

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	bpfseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	dockerseccomp "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Name names the profile in identities and receipts.
const Name = "docker-default-nocaps+layerfs"

// Refused are the calls a sandboxed command must never make, whatever the
// profile's source says: the escape routes and kernel-wide switches the
// issue that introduced the filter names (mount and namespace changes,
// file handles, eBPF, perf, keyrings, kexec, modules, reboot, swap,
// process accounting, userfaultfd, io_uring). Profile fails if it would
// allow any of them.
var Refused = []string{
	"mount", "umount2", "pivot_root", "unshare", "setns",
	"fsopen", "fsmount", "fspick", "fsconfig", "open_tree", "move_mount", "mount_setattr",
	"open_by_handle_at", "name_to_handle_at",
	"bpf", "perf_event_open",
	"keyctl", "add_key", "request_key",
	"kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
}

// alsoRefused are calls Docker's default profile allows and LayerFS does
// not.
var alsoRefused = []string{"name_to_handle_at"}

// Profile is the sandbox's filter as an OCI seccomp section: Docker's
// default profile for a process with no capabilities on this architecture,
// with LayerFS's changes (see the package documentation).
func Profile() (*specs.LinuxSeccomp, error) {
	noCaps := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	p, err := dockerseccomp.GetDefaultProfile(noCaps)
	if err != nil {
		return nil, fmt.Errorf("seccomp: docker's default profile: %w", err)
	}
	table, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	if len(p.Architectures) == 0 {
		return nil, fmt.Errorf("seccomp: docker's default profile has no architecture for this machine")
	}
	p.Architectures = p.Architectures[:1] // the native ABI only

	rules := p.Syscalls[:0]
	for _, r := range p.Syscalls {
		// Names of other ABIs (chown32, _llseek, ...) have no number here.
		r.Names = slices.DeleteFunc(slices.Clone(r.Names), func(name string) bool {
			_, known := table.SyscallNames[name]
			return !known || (r.Action == specs.ActAllow && slices.Contains(alsoRefused, name))
		})
		if len(r.Names) > 0 {
			rules = append(rules, r)
		}
	}
	p.Syscalls = rules
	for _, name := range Refused {
		if a := Allows(p, name); a {
			return nil, fmt.Errorf("seccomp: the profile allows %s, which a sandbox must never call", name)
		}
	}
	return p, nil
}

// Allows reports whether p allows the call name for some arguments.
func Allows(p *specs.LinuxSeccomp, name string) bool {
	for _, r := range p.Syscalls {
		if r.Action == specs.ActAllow && slices.Contains(r.Names, name) {
			return true
		}
	}
	return false
}

// DockerProfile renders Profile in Docker's JSON profile format, the value
// of a container's SecurityOpt "seccomp=<json>". With allowNewUser, a
// clone whose only namespace flag is CLONE_NEWUSER is allowed: the docker
// platform's supervisor forks each command into a user namespace of its
// own, and the command then loads the BPF form, which refuses it again,
// before it starts (package docker/supervise).
func DockerProfile(allowNewUser bool) (string, error) {
	p, err := Profile()
	if err != nil {
		return "", err
	}
	if allowNewUser {
		if err := allowCloneNewUser(p); err != nil {
			return "", err
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("seccomp: encode docker profile: %w", err)
	}
	return string(b), nil
}

// BPF compiles Profile into classic BPF programs for seccomp(2), to be
// loaded in order on the same thread: 8 bytes per instruction (struct
// sock_filter in this machine's byte order).
//
// The first program decides every call by its number alone (a binary
// search over ranges of numbers, see byNumberTree): the calls Docker
// allows outright, the calls it allows on conditions (clone, socket,
// personality) as if they had none, clone3's ENOSYS, and EPERM for the
// rest. Each call with conditions then gets a program of its own
// that refuses it when no condition holds and allows everything else: the
// kernel runs every loaded program and keeps the strictest verdict. The
// split works around go-seccomp-bpf v1.6.0, which after a failed argument
// test compares the next call's number with the argument still loaded
// (so socket(40) matched the number of sendfile further down and was
// allowed); with one conditional call per program, a failed test can
// only reach that program's final verdict. It also means the kernel
// caches an allow for almost every call in every program, so the filter
// costs nothing on the common path.
func BPF() ([][]byte, error) {
	p, err := Profile()
	if err != nil {
		return nil, err
	}
	policies, err := policiesOf(p)
	if err != nil {
		return nil, err
	}
	table, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	var out [][]byte
	for i, policy := range policies {
		var insts []bpf.Instruction
		switch {
		case i == 0:
			insts, err = byNumberTree(policy, table)
		default:
			insts, err = policy.Assemble()
		}
		if err != nil {
			return nil, fmt.Errorf("seccomp: assemble: %w", err)
		}
		b, err := encode(insts)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// encode turns one program into the kernel's encoding.
func encode(insts []bpf.Instruction) ([]byte, error) {
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble: %w", err)
	}
	if len(raw) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program of %d instructions is over the kernel's %d", len(raw), unix.BPF_MAXINSNS)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		out = binary.NativeEndian.AppendUint16(out, in.Op)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return out, nil
}

// policiesOf translates an OCI profile into go-seccomp-bpf policies, as
// BPF describes: one that decides by call number, then one per call with
// argument conditions.
func policiesOf(p *specs.LinuxSeccomp) ([]*bpfseccomp.Policy, error) {
	def, err := actionOf(p.DefaultAction, p.DefaultErrnoRet)
	if err != nil {
		return nil, err
	}
	byNumber := &bpfseccomp.Policy{DefaultAction: def}
	groups := map[bpfseccomp.Action]int{} // index in byNumber.Syscalls
	add := func(a bpfseccomp.Action, name string) {
		i, ok := groups[a]
		if !ok {
			i = len(byNumber.Syscalls)
			groups[a] = i
			byNumber.Syscalls = append(byNumber.Syscalls, bpfseccomp.SyscallGroup{Action: a})
		}
		if g := &byNumber.Syscalls[i]; !slices.Contains(g.Names, name) {
			g.Names = append(g.Names, name)
		}
	}
	// refuse[name] holds, for each call allowed only on conditions, the
	// negation of each of its rules: the call is refused when all hold.
	refuse := map[string]bpfseccomp.ArgumentConditions{}
	var conditional []string
	for _, r := range p.Syscalls {
		a, err := actionOf(r.Action, r.ErrnoRet)
		if err != nil {
			return nil, err
		}
		for _, name := range r.Names {
			if len(r.Args) == 0 {
				add(a, name)
				continue
			}
			if a != bpfseccomp.ActionAllow || len(r.Args) != 1 {
				return nil, fmt.Errorf("seccomp: rule %v: only allow rules with one argument test are supported", r.Names)
			}
			c, err := negation(r.Args[0])
			if err != nil {
				return nil, fmt.Errorf("seccomp: rule %v: %w", r.Names, err)
			}
			if _, ok := refuse[name]; !ok {
				conditional = append(conditional, name)
			}
			refuse[name] = append(refuse[name], c)
		}
	}
	policies := []*bpfseccomp.Policy{byNumber}
	for _, name := range conditional {
		if _, plain := groups[bpfseccomp.ActionAllow]; plain && slices.Contains(byNumber.Syscalls[groups[bpfseccomp.ActionAllow]].Names, name) {
			return nil, fmt.Errorf("seccomp: %s is allowed both outright and on conditions", name)
		}
		add(bpfseccomp.ActionAllow, name) // decided by its own program
		policies = append(policies, &bpfseccomp.Policy{
			DefaultAction: bpfseccomp.ActionAllow,
			Syscalls: []bpfseccomp.SyscallGroup{{
				Action:             def,
				NamesWithCondtions: []bpfseccomp.NameWithConditions{{Name: name, Conditions: refuse[name]}},
			}},
		})
	}
	return policies, nil
}

// actionOf maps an OCI action to go-seccomp-bpf's, the errno included.
func actionOf(a specs.LinuxSeccompAction, errno *uint) (bpfseccomp.Action, error) {
	switch a {
	case specs.ActAllow:
		return bpfseccomp.ActionAllow, nil
	case specs.ActErrno:
		e := uint(unix.EPERM)
		if errno != nil {
			e = *errno
		}
		if e == 0 || e > 4095 {
			return 0, fmt.Errorf("seccomp: errno %d out of range", e)
		}
		if e == uint(unix.EPERM) {
			return bpfseccomp.ActionErrno, nil // the library adds EPERM itself
		}
		return bpfseccomp.ActionErrno | bpfseccomp.Action(e), nil
	}
	return 0, fmt.Errorf("seccomp: action %s is not supported", a)
}

// negation is the test that holds exactly when an OCI argument test does
// not.
func negation(a specs.LinuxSeccompArg) (bpfseccomp.Condition, error) {
	c := bpfseccomp.Condition{Argument: uint32(a.Index), Value: a.Value}
	switch {
	case a.Op == specs.OpEqualTo:
		c.Operation = bpfseccomp.NotEqual
	case a.Op == specs.OpNotEqual:
		c.Operation = bpfseccomp.Equal
	case a.Op == specs.OpLessThan:
		c.Operation = bpfseccomp.GreaterOrEqual
	case a.Op == specs.OpLessEqual:
		c.Operation = bpfseccomp.GreaterThan
	case a.Op == specs.OpGreaterThan:
		c.Operation = bpfseccomp.LessOrEqual
	case a.Op == specs.OpGreaterEqual:
		c.Operation = bpfseccomp.LessThan
	case a.Op == specs.OpMaskedEqual && a.ValueTwo == 0: // (arg & value) == 0
		c.Operation = bpfseccomp.BitsSet
	default:
		return c, fmt.Errorf("comparison %s with %#x is not supported", a.Op, a.ValueTwo)
	}
	return c, nil
}

// allowCloneNewUser changes p's clone rule (allow when flags&namespaces ==
// 0) so that CLONE_NEWUSER is not among the namespace flags it checks.
func allowCloneNewUser(p *specs.LinuxSeccomp) error {
	for i, r := range p.Syscalls {
		if r.Action != specs.ActAllow || !slices.Equal(r.Names, []string{"clone"}) {
			continue
		}
		if len(r.Args) != 1 || r.Args[0].Op != specs.OpMaskedEqual || r.Args[0].Value&unix.CLONE_NEWUSER == 0 {
			return fmt.Errorf("seccomp: clone's rule is not flags&namespaces == 0: %+v", r.Args)
		}
		args := slices.Clone(r.Args)
		args[0].Value &^= unix.CLONE_NEWUSER
		p.Syscalls[i].Args = args
		return nil
	}
	return fmt.Errorf("seccomp: the profile has no rule for clone")
}
