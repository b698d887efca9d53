package hostview_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/fsids"
	"layerfs.dev/layerfs/internal/hostview"
	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/testenv"
)

// base is the range the tests' user namespace maps 0 to.
const base = 2_000_000_000

// env is a kernel overlay over layers id-mapped like a sandbox's, its
// upper, and a host view of it.
type env struct {
	inner, upper, view string
	srv                *hostview.Server
}

// newEnv mounts an overlay over a lower holding a.txt and d/b.txt (root's
// on disk), id-mapped like a sandbox's, and a view of it for owner.
func newEnv(t *testing.T, owner hostview.Owner) *env {
	t.Helper()
	testenv.RequireFUSE(t)
	top := t.TempDir()
	for _, d := range []string{top, filepath.Dir(top)} {
		require.NoError(t, os.Chmod(d, 0o755)) // the unprivileged callers reach the view
	}
	lower, dir := filepath.Join(top, "lower"), filepath.Join(top, "ws")
	e := &env{inner: filepath.Join(top, "inner"), upper: filepath.Join(dir, "upper"), view: filepath.Join(top, "view")}
	for _, d := range []string{filepath.Join(lower, "d"), e.upper, filepath.Join(dir, "work"), e.inner, e.view} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(lower, "a.txt"), []byte("committed\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(lower, "d", "b.txt"), []byte("b\n"), 0o644))
	m, release, err := kerneloverlay.HoldIDMap(base, 65536)
	require.NoError(t, err)
	t.Cleanup(release)
	require.NoError(t, kerneloverlay.MountIDMapped(lower, dir, e.inner, m))
	t.Cleanup(func() { unix.Unmount(e.inner, unix.MNT_DETACH) })
	root, err := unix.Open(e.inner, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	e.srv, err = hostview.Mount(t.Context(), e.view, root, hostview.Options{Owner: owner, Range: hostview.Range{Base: base, Size: 65536}, Upper: e.upper})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.srv.Unmount(context.Background())) })
	return e
}

// sh runs script in the view as uid:gid (its working directory outside
// the view: the test process serves it).
func (e *env) sh(t *testing.T, uid, gid uint32, script string) string {
	t.Helper()
	cmd := exec.Command("sh", "-ec", "cd "+e.view+"\n"+script)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "as %d:%d: %s\n%s", uid, gid, script, out)
	return string(out)
}

// owners reports path's owner on disk (the upper) or through a mount.
func owner(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(path, &st), path)
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}

// TestHostWrites: the owner and root create, write, rename, chmod and
// remove in the view; what they create is the sandbox root's on disk (0)
// and in the sandboxes' mount (base), and what the sandbox's root made
// is the owner's in the view.
func TestHostWrites(t *testing.T) {
	for _, o := range []hostview.Owner{{0, 0}, {1000, 1000}} {
		t.Run(fmt.Sprintf("owner %d", o.UID), func(t *testing.T) {
			e := newEnv(t, o)
			want := fmt.Sprintf("%d:%d", o.UID, o.GID)
			assert.Equal(t, want, owner(t, filepath.Join(e.view, "a.txt")), "a committed file of root's")
			for _, who := range slices.Compact([]uint32{o.UID, 0}) {
				dir := fmt.Sprintf("by%d", who)
				e.sh(t, who, who, fmt.Sprintf(`mkdir %[1]s; echo hi > %[1]s/x.txt; echo more >> %[1]s/x.txt
					mv %[1]s/x.txt %[1]s/y.txt; chmod 600 %[1]s/y.txt; echo t > %[1]s/tmp; rm %[1]s/tmp
					ln -s y.txt %[1]s/link; sed -i s/hi/HI/ %[1]s/y.txt; echo appended >> a.txt`, dir))
				for _, p := range []string{dir, dir + "/y.txt", dir + "/link"} {
					assert.Equal(t, "0:0", owner(t, filepath.Join(e.upper, p)), "%s by %d on disk", p, who)
					assert.Equal(t, fmt.Sprint(base, ":", base), owner(t, filepath.Join(e.inner, p)), "%s by %d in the sandboxes' mount", p, who)
					assert.Equal(t, want, owner(t, filepath.Join(e.view, p)), "%s by %d in the view", p, who)
				}
				b, err := os.ReadFile(filepath.Join(e.inner, dir, "y.txt"))
				require.NoError(t, err)
				assert.Equal(t, "HI\nmore\n", string(b), "written in the view, read in the sandboxes' mount")
				fi, err := os.Stat(filepath.Join(e.inner, dir, "y.txt"))
				require.NoError(t, err)
				assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
			}
			b, err := os.ReadFile(filepath.Join(e.inner, "a.txt"))
			require.NoError(t, err)
			assert.Equal(t, "committed\n"+strings.Repeat("appended\n", len(slices.Compact([]uint32{o.UID, 0}))), string(b))
		})
	}
}

// TestSandboxChangesSeenAtOnce: what changes in the sandboxes' mount is
// seen in the view by the very next call, names and data alike, and the
// other way round.
func TestSandboxChangesSeenAtOnce(t *testing.T) {
	e := newEnv(t, hostview.Owner{UID: 1000, GID: 1000})
	in, view := func(p string) string { return filepath.Join(e.inner, p) }, func(p string) string { return filepath.Join(e.view, p) }
	_, err := os.Stat(view("new"))
	require.ErrorIs(t, err, os.ErrNotExist)
	// A sandbox's root creates as base.
	require.NoError(t, fsids.Do(base, func() error { return os.WriteFile(in("new"), []byte("one"), 0o644) }))
	b, err := os.ReadFile(view("new"))
	require.NoError(t, err)
	assert.Equal(t, "one", string(b))
	f, err := os.OpenFile(view("new"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, os.WriteFile(in("new"), []byte("two!"), 0o644)) // no create: as the daemon
	buf := make([]byte, 8)
	n, _ := f.ReadAt(buf, 0)
	assert.Equal(t, "two!", string(buf[:n]), "an open file of the view reads what the sandbox wrote")
	_, err = f.WriteAt([]byte("TH"), 0)
	require.NoError(t, err)
	b, _ = os.ReadFile(in("new"))
	assert.Equal(t, "THo!", string(b), "the sandbox reads what the view wrote")
	require.NoError(t, os.Rename(in("new"), in("renamed")))
	_, err = os.Stat(view("new"))
	assert.ErrorIs(t, err, os.ErrNotExist, "a rename in the sandbox")
	st, err := os.Stat(view("renamed"))
	require.NoError(t, err)
	assert.Equal(t, int64(4), st.Size())
	require.NoError(t, os.Remove(in("d/b.txt")))
	ents, err := os.ReadDir(view("d"))
	require.NoError(t, err)
	assert.Empty(t, ents, "a removal in the sandbox")
	require.NoError(t, os.Chmod(in("a.txt"), 0o600))
	st, err = os.Stat(view("a.txt"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "a chmod in the sandbox")
}

// TestWriteWhileReading: a committed file open for reading (through the
// daemon) and then opened for writing (its copy-up, by passthrough) works
// on both opens, and the reader then reads what the writer wrote, as a
// reader of the sandboxes' mount does (overlayfs moves an open file to its
// copy-up).
func TestWriteWhileReading(t *testing.T) {
	e := newEnv(t, hostview.Owner{})
	for _, dir := range []string{e.inner, e.view} {
		name := map[string]string{e.inner: "d/b.txt", e.view: "a.txt"}[dir]
		r, err := os.Open(filepath.Join(dir, name))
		require.NoError(t, err)
		defer r.Close()
		_, err = r.Read(make([]byte, 1))
		require.NoError(t, err)
		write := func() error { return os.WriteFile(filepath.Join(dir, name), []byte("new\n"), 0o644) }
		if dir == e.inner {
			require.NoError(t, fsids.Do(base, write))
		} else {
			require.NoError(t, write())
		}
		b, err := os.ReadFile(filepath.Join(e.inner, name))
		require.NoError(t, err)
		assert.Equal(t, "new\n", string(b))
		buf := make([]byte, 32)
		n, _ := r.ReadAt(buf, 0)
		assert.Equal(t, "new\n", string(buf[:n]), "the reader of %s", name)
	}
}

// TestChownTranslated: chown in the view takes the view's ids: the owner
// is the sandbox's root, other ids of the range are the sandbox's, and an
// id without a place in the range gives the file to the owner.
func TestChownTranslated(t *testing.T) {
	e := newEnv(t, hostview.Owner{UID: 1000, GID: 1000})
	p := filepath.Join(e.view, "f")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	for _, c := range []struct {
		chown, disk, view string
	}{
		{"33:34", "33:34", "33:34"},
		{"1000:1000", "0:0", "1000:1000"},
		{fmt.Sprint(base+1000, ":", base+1000), "1000:1000", fmt.Sprint(base+1000, ":", base+1000)},
		{"0:0", "0:0", "1000:1000"},
	} {
		out, err := exec.Command("chown", c.chown, p).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Equal(t, c.disk, owner(t, filepath.Join(e.upper, "f")), "chown %s: on disk", c.chown)
		assert.Equal(t, c.view, owner(t, p), "chown %s: in the view", c.chown)
	}
}

// TestPassthrough: the data of files in the upper layer never reaches the
// daemon: a new file written and read, a committed one once copied up.
func TestPassthrough(t *testing.T) {
	e := newEnv(t, hostview.Owner{})
	require.Equal(t, "passthrough", e.srv.DataPath())
	big := make([]byte, 4<<20)
	before := e.srv.DaemonIO()
	require.NoError(t, os.WriteFile(filepath.Join(e.view, "big"), big, 0o644))
	b, err := os.ReadFile(filepath.Join(e.view, "big"))
	require.NoError(t, err)
	require.Len(t, b, len(big))
	f, err := os.OpenFile(filepath.Join(e.view, "a.txt"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(big)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, before, e.srv.DaemonIO(), "reads and writes through the daemon")
	st, err := os.Stat(filepath.Join(e.inner, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, int64(len("committed\n")+len(big)), st.Size())
}

// TestTmpfile: a file made with O_TMPFILE in the view is the caller's
// sandbox ids' and gets a name with linkat.
func TestTmpfile(t *testing.T) {
	e := newEnv(t, hostview.Owner{UID: 1000, GID: 1000})
	fd, err := unix.Open(e.view, unix.O_TMPFILE|unix.O_RDWR, 0o640)
	require.NoError(t, err)
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte("tmp"))
	require.NoError(t, err)
	require.NoError(t, unix.Linkat(fd, "", unix.AT_FDCWD, filepath.Join(e.view, "named"), unix.AT_EMPTY_PATH))
	assert.Equal(t, "0:0", owner(t, filepath.Join(e.upper, "named")), "root's tmpfile in a view of 1000's")
	b, err := os.ReadFile(filepath.Join(e.inner, "named"))
	require.NoError(t, err)
	assert.Equal(t, "tmp", string(b))
}

// TestModeZero: a file created with mode 0 has mode 0 (pjdfstest open/26).
func TestModeZero(t *testing.T) {
	e := newEnv(t, hostview.Owner{})
	fd, err := unix.Open(filepath.Join(e.view, "z"), unix.O_CREAT|unix.O_WRONLY, 0)
	require.NoError(t, err)
	unix.Close(fd)
	st, err := os.Lstat(filepath.Join(e.view, "z"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0), st.Mode().Perm())
}

// TestUnmountOfAHeldView: a view held elsewhere (a bind of it, as another
// mount namespace would) keeps its connection after the unmount; Unmount
// aborts it after a grace and returns instead of waiting forever.
func TestUnmountOfAHeldView(t *testing.T) {
	e := newEnv(t, hostview.Owner{UID: 0, GID: 0})
	held := filepath.Join(t.TempDir(), "held")
	require.NoError(t, os.Mkdir(held, 0o755))
	require.NoError(t, unix.Mount(e.view, held, "", unix.MS_BIND, ""))
	t.Cleanup(func() { unix.Unmount(held, unix.MNT_DETACH) })
	done := make(chan error, 1)
	go func() { done <- e.srv.Unmount(context.Background()) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the unmount of a view held elsewhere did not return")
	}
	_, err := os.ReadDir(held)
	assert.Error(t, err, "the held view still answers: its connection was not aborted")
}
