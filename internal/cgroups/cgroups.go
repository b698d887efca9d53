package cgroups

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Paths maps each controller ("" for the unified v2 hierarchy) to the
// cgroup path of the process that file (its /proc/PID/cgroup) describes.
func Paths(file string) (map[string]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		// hierarchy-ID:controller,...:path; "0::path" in the unified one.
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			out[ctl] = parts[2]
		}
	}
	return out, s.Err()
}

// Mount is a mounted cgroup hierarchy: the directory it is mounted on and
// the cgroup the mount shows there (not "/" in a cgroup namespace or a bind
// mount of part of the hierarchy).
type Mount struct {
	Dir, Root string
}

// Path returns the directory of the cgroup path p (as Paths gives it) below
// the mount, or false when the mount does not show that cgroup.
func (m Mount) Path(p string) (string, bool) {
	rel, err := filepath.Rel(m.Root, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", false
	}
	return filepath.Join(m.Dir, rel), true
}

// Mounts maps "" (the unified v2 hierarchy), "memory" and "pids" (v1) to
// where the hierarchy is mounted, from file (a /proc/PID/mountinfo). When a
// hierarchy is mounted more than once, the first mount listed wins.
func Mounts(file string) (map[string]Mount, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]Mount{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		m := Mount{Dir: unescape(a[4]), Root: unescape(a[3])}
		switch b[0] {
		case "cgroup2":
			if _, dup := out[""]; !dup {
				out[""] = m
			}
		case "cgroup":
			for _, opt := range strings.Split(b[2], ",") {
				if opt == "memory" || opt == "pids" {
					if _, dup := out[opt]; !dup {
						out[opt] = m
					}
				}
			}
		}
	}
	return out, s.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
