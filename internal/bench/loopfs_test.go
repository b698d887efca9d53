package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/testenv"
)

func TestParseLoopSpec(t *testing.T) {
	for _, tc := range []struct {
		spec string
		typ  string
		size int64
	}{
		{"ext4:8G", "ext4", 8 << 30},
		{"xfs:512m", "xfs", 512 << 20},
		{"ext4:4096", "ext4", 4096},
		{"ext4:1T", "ext4", 1 << 40},
	} {
		typ, size, err := parseLoopSpec(tc.spec)
		if err != nil || typ != tc.typ || size != tc.size {
			t.Errorf("%q: got %q %d %v, want %q %d", tc.spec, typ, size, err, tc.typ, tc.size)
		}
	}
	for _, bad := range []string{"ext4", "btrfs:8G", "ext4:", "ext4:0", "ext4:-1G", "ext4:8X", "ext4:G", "xfs:99999999999T"} {
		_, _, err := LoopFS(t.Context(), t.TempDir(), bad)
		assert.ErrorIs(t, err, ErrLoopSpec, "%q", bad)
	}
}

// TestLoopFSMissingTool: without mkfs on PATH the error says which Debian
// package to install.
func TestLoopFSMissingTool(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for spec, pkg := range map[string]string{"xfs:512M": "xfsprogs", "ext4:64M": "e2fsprogs"} {
		_, _, err := LoopFS(t.Context(), t.TempDir(), spec)
		if !errors.Is(err, ErrToolMissing) || !strings.Contains(err.Error(), "Debian package "+pkg) {
			t.Errorf("%s: %v, want ErrToolMissing naming %s", spec, err, pkg)
		}
	}
}

// TestLoopFS mounts a small image of each type and checks what it is: ext4
// with a journal, XFS able to clone a file.
func TestLoopFS(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct{ spec, desc string }{
		{"ext4:64M", "ext4 (journal) on /dev/loop"},
		{"xfs:320M", "xfs on /dev/loop"}, // mkfs.xfs refuses less than 300 MB
	} {
		t.Run(tc.spec, func(t *testing.T) {
			dir := t.TempDir()
			mnt, cleanup, err := LoopFS(t.Context(), dir, tc.spec)
			if err != nil {
				if errors.Is(err, ErrToolMissing) {
					testenv.Skip(t, err.Error())
				}
				t.Fatal(err)
			}
			defer cleanup()
			desc := DescribeFS(mnt)
			if !strings.HasPrefix(desc, tc.desc) || !strings.HasSuffix(desc, " at "+mnt) {
				t.Errorf("DescribeFS(%s) = %q, want %q... at %s", mnt, desc, tc.desc, mnt)
			}
			var st unix.Statfs_t
			require.NoError(t, unix.Statfs(mnt, &st))
			if size := int64(st.Blocks) * st.Bsize; size > 320<<20 || size < 32<<20 {
				t.Errorf("file system of %d bytes for %s", size, tc.spec)
			}
			a := filepath.Join(mnt, "a")
			require.NoError(t, os.WriteFile(a, []byte("data"), 0o644))
			if strings.HasPrefix(tc.spec, "xfs") {
				assert.NoError(t, clone(a, filepath.Join(mnt, "b")), "XFS without reflinks")
			}
			require.NoError(t, cleanup())
			assert.NoError(t, cleanup(), "second cleanup")
			_, err = os.Stat(mnt)
			assert.ErrorIs(t, err, os.ErrNotExist, "mountpoint left after cleanup")
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("cleanup left %v in %s", ents, dir)
			}
		})
	}
}

// TestLoopFSBusy: cleanup reports a file system still in use instead of
// pretending, and succeeds once it is released.
func TestLoopFSBusy(t *testing.T) {
	testenv.RequireRoot(t)
	mnt, cleanup, err := LoopFS(t.Context(), t.TempDir(), "ext4:64M")
	if err != nil {
		if errors.Is(err, ErrToolMissing) {
			testenv.Skip(t, err.Error())
		}
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(mnt, "held"))
	if err != nil {
		cleanup()
		t.Fatal(err)
	}
	assert.ErrorIs(t, cleanup(), unix.EBUSY, "cleanup with an open file")
	_, err = os.Stat(filepath.Join(mnt, "held"))
	assert.NoError(t, err, "the busy file system must stay mounted")
	require.NoError(t, f.Close())
	require.NoError(t, cleanup())
}

func clone(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
