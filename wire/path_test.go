package wire

import (
	"errors"
	"testing"
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
			if !errors.Is(err, ErrPathEscapes) {
				t.Errorf("WorkspacePath(%q) = %q, %v; want ErrPathEscapes", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("WorkspacePath(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := WorkspacePath("a\x00b"); err == nil {
		t.Error("a NUL byte was accepted")
	}
}
