package mountinfo

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mount is one line of a mountinfo file.
type Mount struct {
	Device       string // the file system's device, "major:minor"
	Root         string // the mounted directory within its file system
	Dir          string // the mount point
	Options      string // per-mount options
	FSType       string
	Source       string
	SuperOptions string // per-file-system options
}

// Self is this process's mountinfo file.
const Self = "/proc/self/mountinfo"

// Read parses a mountinfo file, mounts in the order listed.
func Read(file string) ([]Mount, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Mount
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 6 || len(b) < 3 {
			continue
		}
		out = append(out, Mount{
			Device: a[2], Root: unescape(a[3]), Dir: unescape(a[4]), Options: a[5],
			FSType: b[0], Source: unescape(b[1]), SuperOptions: b[2],
		})
	}
	return out, s.Err()
}

// Below returns the mounts at dir or below it.
func Below(ms []Mount, dir string) []Mount {
	dir = filepath.Clean(dir)
	var out []Mount
	for _, m := range ms {
		if m.Dir == dir || strings.HasPrefix(m.Dir, dir+"/") {
			out = append(out, m)
		}
	}
	return out
}

// Containing returns the mount that holds path (an absolute, clean path):
// the last listed of the longest mount points that are path or above it.
func Containing(ms []Mount, path string) (Mount, bool) {
	var best Mount
	found := false
	for _, m := range ms {
		if m.Dir == path || m.Dir == "/" || strings.HasPrefix(path, m.Dir+"/") {
			if !found || len(m.Dir) >= len(best.Dir) {
				best, found = m, true
			}
		}
	}
	return best, found
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
