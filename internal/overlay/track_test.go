package overlay_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/overlay/overlaytest"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestUpperTracker changes a kernel overlayfs mount step by step and, after
// each step, checks that the tracker's summary equals a full scan of the
// upper (ScanUpper and CountCopyUps): new files and directories, copy-ups,
// whiteouts, metacopies, directory renames (redirects), a directory removed
// and made again, moves, and more events than the kernel queues.
func TestUpperTracker(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := t.Context()
	s := overlaytest.NewStore(t, ctx, populate)
	tmp := t.TempDir()
	upper, work, mnt := filepath.Join(tmp, "upper"), filepath.Join(tmp, "work"), filepath.Join(tmp, "mnt")
	for _, d := range []string{upper, work, mnt} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	opts := "lowerdir=" + s.Base + ",upperdir=" + upper + ",workdir=" + work + ",redirect_dir=on,metacopy=on"
	if err := unix.Mount("overlay", mnt, "overlay", 0, opts); err != nil {
		testenv.Skip(t, "kernel overlayfs: "+err.Error())
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })

	set, err := overlay.NewUpperTrackers()
	require.NoError(t, err)
	defer set.Close()
	tr, err := set.Track(ctx, upper, s.DB, s.Root)
	require.NoError(t, err)
	defer tr.Close()
	steps := []struct{ name, sh string }{
		{"nothing yet", "true"},
		{"new files and directories", "echo new > n1 && mkdir -p x/y && echo z > x/y/z"},
		{"copy-up", "echo more >> f1"},
		{"whiteout", "rm a/f2"},
		{"directory rename", "mv a/b a/b2"},
		{"metacopy", "chmod 600 d/e/f5"},
		{"metacopy gets its data", "echo data >> d/e/f5"},
		{"directory removed and made again", "rm -rf x && mkdir x && echo again > x/new"},
		{"move between directories", "mv n1 d/n1"},
		{"removed and made again, over and over", "for i in 1 2 3 4 5 6 7 8; do rm -rf x && mkdir -p x/y && echo $i > x/y/new; done"},
		{"truncate", "truncate -s 100 f1"},
		{"a counted file written again", "echo again >> d/n1"},
		{"an empty directory", "mkdir empty"},
		{"the empty directory made again (perhaps with its inode number)", "rmdir empty && mkdir empty && echo 1 > empty/f"},
		{"a directory to move", "mkdir -p zz/X && echo 1 > zz/X/f"},
		{"moved untouched into a directory its old one sorts after", "mkdir b && mv zz/X b/X"},
		{"the moved directory changed", "echo 2 > b/X/g"},
		{"moved again and changed at once", "mv b/X zz/X && echo 3 > zz/X/h"},
		{"a new directory moved", "mkdir -p m/n && echo 1 > m/n/o && mv m a/m"},
		{"more events than the kernel queues", "mkdir big && cd big && seq 1 20000 | xargs touch && echo 1 > 7"},
		{"all of it removed", "rm -rf big a d/e x b zz empty"},
	}
	for _, st := range steps {
		out, err := exec.Command("sh", "-ec", "cd "+mnt+" && "+st.sh).CombinedOutput()
		require.NoError(t, err, "%s\n%s", st.name, out)
		got, disk, err := tr.Summary(ctx)
		require.NoError(t, err, "%s: summary", st.name)
		if du := diskUsage(t, upper); disk != du {
			t.Fatalf("after %q: tracked %d bytes on disk, a walk counts %d", st.name, disk, du)
		}
		want, err := overlay.ScanUpper(upper)
		require.NoError(t, err)
		require.NoError(t, overlay.CountCopyUps(ctx, s.DB, s.Root, want))
		if got != want.UpperSummary {
			t.Fatalf("after %q: tracked %+v, scanned %+v", st.name, got, want.UpperSummary)
		}
		t.Logf("%-36s %+v", st.name, got)
	}
}

// diskUsage adds up st_blocks of dir and everything below it.
func diskUsage(t *testing.T, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n += st.Blocks * 512
		return nil
	})
	require.NoError(t, err)
	return n
}
