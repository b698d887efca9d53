package criu

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Problem is something a process of a tree holds that a checkpoint
// cannot: the process (its pid inside its PID namespace and on the host,
// its name), the descriptor (-1 for none) and what it is.
type Problem struct {
	Pid, HostPid int
	Comm         string
	FD           int
	Resource     string
}

func (p Problem) String() string {
	s := fmt.Sprintf("process %d (%s)", p.Pid, p.Comm)
	if p.FD >= 0 {
		s += fmt.Sprintf(" fd %d", p.FD)
	}
	return s + ": " + p.Resource
}

// ProblemsError is the error of a tree that has problems: it names each.
func ProblemsError(ps []Problem) error {
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.String()
	}
	return fmt.Errorf("%w: %s", ErrUnsupported, strings.Join(msgs, "; "))
}

// Allow exempts one descriptor of one process (by host pid) from Scan:
// what the caller hands over itself (a sandbox's control socket).
type Allow func(hostPid, fd int) bool

// anonUnsupported are anonymous inodes CRIU cannot dump.
var anonUnsupported = map[string]string{
	"[io_uring]":    "an io_uring instance",
	"[userfaultfd]": "a userfaultfd",
	"[perf_event]":  "a perf event",
	"bpf-map":       "a BPF map",
	"bpf-prog":      "a BPF program",
	"bpf_link":      "a BPF link",
}

// Scan lists what the processes of the tree rooted at root (a host pid)
// hold that cannot be checkpointed (see the package comment). A process
// that ends during the scan is skipped.
func Scan(root int, allow Allow) ([]Problem, error) {
	pids, err := treePids(root)
	if err != nil {
		return nil, err
	}
	mounts, err := mountIDs(root)
	if err != nil {
		return nil, err
	}
	netns, err := nsInode(root, "net")
	if err != nil {
		return nil, err
	}
	var out []Problem
	for _, pid := range pids {
		ps, err := scanProcess(pid, mounts, netns, allow)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	return out, nil
}

// scanProcess checks one process's descriptors.
func scanProcess(pid int, mounts map[int]bool, netns uint64, allow Allow) ([]Problem, error) {
	st, err := readStatus(pid)
	if err != nil {
		return nil, err
	}
	base := Problem{Pid: st.nspid, HostPid: pid, Comm: st.name, FD: -1}
	var out []Problem
	if st.tracer != 0 {
		p := base
		p.Resource = fmt.Sprintf("traced by process %d (a tracer cannot be checkpointed with its tracee)", st.tracer)
		out = append(out, p)
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || (allow != nil && allow(pid, fd)) {
			continue
		}
		what := fdProblem(pid, fd, mounts, netns)
		if what != "" {
			p := base
			p.FD, p.Resource = fd, what
			out = append(out, p)
		}
	}
	return out, nil
}

// fdProblem says what is wrong with descriptor fd of pid, or "".
func fdProblem(pid, fd int, mounts map[int]bool, netns uint64) string {
	path := "/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd)
	target, err := os.Readlink(path)
	if err != nil {
		return "" // closed meanwhile
	}
	if name, ok := strings.CutPrefix(target, "anon_inode:"); ok {
		if why, bad := anonUnsupported[name]; bad {
			return why
		}
		return ""
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return ""
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		maj, mnr := unix.Major(st.Rdev), unix.Minor(st.Rdev)
		if allowedDevice(maj, mnr) {
			break
		}
		if maj == 10 && mnr == 229 {
			return fmt.Sprintf("%s: a FUSE device (10:229)", target)
		}
		return fmt.Sprintf("%s: a device (%d:%d)", target, maj, mnr)
	case unix.S_IFBLK:
		return fmt.Sprintf("%s: a block device (%d:%d)", target, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	case unix.S_IFSOCK:
		return socketProblem(pid, fd, target, netns)
	}
	if !strings.HasPrefix(target, "/") || strings.HasPrefix(target, "/memfd:") {
		return "" // pipes and the like, memfds
	}
	if id, ok := fdMountID(pid, fd); ok && !mounts[id] {
		return fmt.Sprintf("%s: a file on a mount outside the sandbox", target)
	}
	return ""
}

// allowedDevice: the memory devices (null, zero, full, random, urandom),
// /dev/tty, /dev/ptmx and the pseudo-terminals, which a restore reopens.
func allowedDevice(maj, mnr uint32) bool {
	switch {
	case maj == 1 && (mnr == 3 || mnr == 5 || mnr == 7 || mnr == 8 || mnr == 9):
		return true
	case maj == 5 && mnr <= 2:
		return true
	case maj >= 136 && maj <= 143:
		return true
	}
	return false
}

// socketProblem says what is wrong with socket fd of pid, or "": a socket
// of another network namespace than the tree's, or of a protocol criu
// cannot dump (MPTCP, which Go's net package listens with by default).
func socketProblem(pid, fd int, target string, netns uint64) string {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(pidfd)
	sock, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(sock)
	if ns, err := socketNetns(sock); err == nil && ns != netns {
		return fmt.Sprintf("%s: a socket of another network namespace (a connection outside the sandbox)", target)
	}
	if p, err := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_PROTOCOL); err == nil && p == unix.IPPROTO_MPTCP {
		return fmt.Sprintf("%s: an MPTCP socket, which CRIU cannot dump (a Go program listens with MPTCP unless GODEBUG=multipathtcp=0)", target)
	}
	return ""
}

// socketNetns is the inode of the network namespace of socket sock.
func socketNetns(sock int) (uint64, error) {
	ns, err := unix.IoctlRetInt(sock, unix.SIOCGSKNS)
	if err != nil {
		return 0, err
	}
	defer unix.Close(ns)
	var st unix.Stat_t
	if err := unix.Fstat(ns, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// nsInode is the inode of pid's namespace kind.
func nsInode(pid int, kind string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/"+kind, &st); err != nil {
		return 0, fmt.Errorf("scan: %s namespace of %d: %w", kind, pid, err)
	}
	return st.Ino, nil
}

// treePids is root and every descendant of it, parents first.
func treePids(root int) ([]int, error) {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(out[i]) + "/task")
		if err != nil {
			if i == 0 {
				return nil, fmt.Errorf("scan: process %d: %w", root, err)
			}
			continue
		}
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(out[i]), "task", t.Name(), "children"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out, nil
}

// mountIDs are the ids of the mounts pid's mount namespace holds.
func mountIDs(pid int) (map[int]bool, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("scan: mounts of %d: %w", pid, err)
	}
	defer f.Close()
	ids := map[int]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if id, err := strconv.Atoi(strings.SplitN(sc.Text(), " ", 2)[0]); err == nil {
			ids[id] = true
		}
	}
	return ids, sc.Err()
}

// fdMountID is the mount id fdinfo gives for fd of pid.
func fdMountID(pid, fd int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "mnt_id:"); ok {
			id, err := strconv.Atoi(strings.TrimSpace(v))
			return id, err == nil
		}
	}
	return 0, false
}

// status is what Scan reads of /proc/PID/status.
type status struct {
	name   string
	nspid  int // in the innermost PID namespace
	tracer int
}

func readStatus(pid int) (status, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return status{}, err
	}
	st := status{nspid: pid}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Name":
			st.name = v
		case "NSpid":
			f := strings.Fields(v)
			if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
				st.nspid = n
			}
		case "TracerPid":
			st.tracer, _ = strconv.Atoi(v)
		}
	}
	return st, nil
}
