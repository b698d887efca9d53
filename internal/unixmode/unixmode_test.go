package unixmode

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestType(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), nil, 0o644)
	os.Symlink("f", filepath.Join(dir, "l"))
	unix.Mkfifo(filepath.Join(dir, "p"), 0o644)
	for name, want := range map[string]fs.FileMode{".": fs.ModeDir, "f": 0, "l": fs.ModeSymlink, "p": fs.ModeNamedPipe, "/dev/null": fs.ModeDevice | fs.ModeCharDevice} {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, name)
		}
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(p, &st))
		if got := Type(st.Mode); got != want {
			t.Errorf("%s: Type = %v, want %v", name, got, want)
		}
	}
}
