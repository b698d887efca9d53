package cgroups

import (
	"bufio"
	"os"
	"path/filepath"

	"layerfs.dev/layerfs/internal/mountinfo"
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

// Mounts maps "" (the unified v2 hierarchy), "memory", "pids" and "cpu" (v1) to
// where the hierarchy is mounted, from file (a /proc/PID/mountinfo). When a
// hierarchy is mounted more than once, the first mount listed wins.
func Mounts(file string) (map[string]Mount, error) {
	ms, err := mountinfo.Read(file)
	if err != nil {
		return nil, err
	}
	out := map[string]Mount{}
	for _, mi := range ms {
		m := Mount{Dir: mi.Dir, Root: mi.Root}
		switch mi.FSType {
		case "cgroup2":
			if _, dup := out[""]; !dup {
				out[""] = m
			}
		case "cgroup":
			for _, opt := range strings.Split(mi.SuperOptions, ",") {
				if opt == "memory" || opt == "pids" || opt == "cpu" {
					if _, dup := out[opt]; !dup {
						out[opt] = m
					}
				}
			}
		}
	}
	return out, nil
}
