package guest

import (
	"fmt"
	"strconv"
	"strings"
)

// Semver is a parsed MAJOR.MINOR.PATCH; pre-release and build suffixes are
// ignored (a "1.2.1-12-gabcdef" development build counts as 1.2.1).
type Semver [3]int

// ParseSemver reads "1.2.3", "v1.2.3" or "1.2" (patch 0), ignoring what
// follows a '-', '+' or space.
func ParseSemver(s string) (Semver, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexAny(s, "-+ "); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Semver{}, fmt.Errorf("version %q is not MAJOR.MINOR[.PATCH]", s)
	}
	var v Semver
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return Semver{}, fmt.Errorf("version %q is not MAJOR.MINOR[.PATCH]", s)
		}
		v[i] = n
	}
	return v, nil
}

// Less reports whether v is older than w.
func (v Semver) Less(w Semver) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

func (v Semver) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// Tail returns the last n lines of b, trimmed, for error messages.
func Tail(b []byte, n int) string {
	s := strings.TrimRight(string(b), "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Truncate cuts s to n bytes, marking the cut with "...", for quoting tool
// output in error messages.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
