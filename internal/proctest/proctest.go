package proctest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// WithCmdline lists the processes whose command line contains s, each as
// "PID: ARGV" (the arguments separated by spaces).
func WithCmdline(s string) ([]string, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out, nil
}

// Children lists the children of process pid, each as "PID (COMM)".
func Children(pid int) ([]string, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if head, _, ppid, ok := stat(e.Name()); ok && ppid == pid {
			out = append(out, head)
		}
	}
	return out, nil
}

// Marker returns an argument for sleep unique to this test run, so that
// its processes can be found (or not) with Sleepers.
func Marker() string {
	return "3" + strconv.Itoa(os.Getpid()%1000) + "." + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
}

// Escapers is a command that starts sleeps that leave the command's
// process group and parent every way a shell can: a background job, a
// setsid'd one and a double-forked orphan; then it prints "started" and
// runs end (which waits, or returns).
func Escapers(arg, end string) []string {
	return []string{"bash", "-c", "sleep " + arg + " & setsid sleep " + arg + " & (sleep " + arg + " &); sleep 0.2; echo started; " + end}
}

// Sleepers lists the live (not zombie) processes running `sleep ARG`.
func Sleepers(arg string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if strings.TrimRight(string(b), "\x00") == "sleep\x00"+arg {
			if _, state, _, ok := stat(e.Name()); ok && state != 'Z' {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// stat reads /proc/PID/stat: its head "PID (COMM)", the state and the
// parent's pid. ok is false when the process is gone or the file is not
// what it should be.
func stat(pid string) (head string, state byte, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return "", 0, 0, false
	}
	s := string(b)
	// The command name is in parentheses and may contain anything.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return "", 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return "", 0, 0, false
	}
	return s[:i+1], f[0][0], ppid, true
}

// Status reads process pid's state ('R', 'S', 'Z', ...) and parent pid.
func Status(pid int) (state byte, ppid int, ok bool) {
	_, state, ppid, ok = stat(strconv.Itoa(pid))
	return state, ppid, ok
}

// FUSEHolders lists the processes that hold a /dev/fuse descriptor of the
// FUSE connection conn (the minor of the mount's device): the kernel names
// each descriptor's connection in its fdinfo.
func FUSEHolders(conn string) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", p.Name(), "fdinfo")
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			b, err := os.ReadFile(filepath.Join(dir, fd.Name()))
			if err == nil && bytes.Contains(b, []byte("\nfuse_connection:\t"+conn+"\n")) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// Descendants lists every process below pid (children, their children, ...).
func Descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			if _, _, pp, ok := stat(e.Name()); ok {
				parent[p] = pp
			}
		}
	}
	var out []int
	for p := range parent {
		for a, hops := parent[p], 0; a > 1 && hops < 64; a, hops = parent[a], hops+1 { // a snapshot, so bounded
			if a == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// FUSEDescriptors lists the descriptors of process pid open on /dev/fuse.
func FUSEDescriptors(pid int) []string {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, _ := os.ReadDir(dir)
	var fds []string
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == "/dev/fuse" {
			fds = append(fds, e.Name())
		}
	}
	return fds
}
