package enginetest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// MinimalRoot makes a directory holding a small Debian-like root: bash
// (also as sh) and a few coreutils with their libraries (merged /usr), an
// /etc/passwd with root and app (1000), /srv and /home/app.
func MinimalRoot(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	copyTo := func(src, dst string) {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		st, err := os.Stat(src)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.WriteFile(dst, b, st.Mode().Perm()))
	}
	for _, name := range []string{"bash", "cat", "id", "ls", "mkdir", "rm", "touch", "stat", "pwd", "env"} {
		bin, err := exec.LookPath(name)
		require.NoError(t, err)
		bin, err = filepath.EvalSymlinks(bin)
		require.NoError(t, err)
		copyTo(bin, filepath.Join(dir, "usr/bin", name))
		out, err := exec.Command("ldd", bin).Output()
		require.NoError(t, err)
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				real, err := filepath.EvalSymlinks(f)
				require.NoError(t, err)
				copyTo(real, filepath.Join(dir, f))
			}
		}
	}
	for _, d := range []string{"lib", "lib64"} {
		if err := os.Rename(filepath.Join(dir, d), filepath.Join(dir, "usr", d)); !errors.Is(err, os.ErrNotExist) {
			require.NoError(t, err)
		}
		require.NoError(t, os.Symlink("usr/"+d, filepath.Join(dir, d)))
	}
	require.NoError(t, os.Symlink("usr/bin", filepath.Join(dir, "bin")))
	require.NoError(t, os.Symlink("bash", filepath.Join(dir, "usr/bin/sh")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/passwd"),
		[]byte("root:x:0:0:root:/root:/bin/bash\napp:x:1000:1000::/home/app:/bin/bash\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/group"), []byte("root:x:0:\napp:x:1000:\n"), 0o644))
	for _, d := range []string{"srv", "root", "home/app", "var/lib"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	require.NoError(t, os.Chown(filepath.Join(dir, "home/app"), 1000, 1000))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/os-release"), []byte("ID=minimal\n"), 0o644))
	return dir
}
