package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWorkspacePath(t *testing.T) {
	for _, c := range []struct {
		in, want string
		escapes  bool
	}{
		{"", ".", false},
		{".", ".", false},
		{"/", ".", false},
		{"//", ".", false},
		{"dir/file", "dir/file", false},
		{"/dir/file", "dir/file", false},
		{"//dir//file/", "dir/file", false},
		{"a/../b", "b", false},
		{"/a/./b/..", "a", false},
		{"..", "", true},
		{"/..", "", true},
		{"../x", "", true},
		{"/../etc/passwd", "", true},
		{"a/../../x", "", true},
	} {
		got, err := WorkspacePath(c.in)
		if c.escapes {
			assert.ErrorIs(t, err, ErrPathEscapes, "WorkspacePath(%q) = %q", c.in, got)
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("WorkspacePath(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	_, err := WorkspacePath("a\x00b")
	assert.Error(t, err, "a NUL byte was accepted")
}
