package image

import (
	"archive/tar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
)

// baseLayers are a base image's two layers and an app layer over them:
// owners, modes with setuid, xattrs, hard links (within a layer and to a
// lower layer's file), whiteouts and an opaque directory.
func baseLayers(t testing.TB) (base1, base2, app []byte) {
	base1 = tarOf(t,
		ent{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		ent{name: "bin/sh", body: "#!shell", mode: 0o755},
		ent{name: "bin/su", body: "su", mode: 0o4755},
		ent{name: "bin/sh2", typ: tar.TypeLink, link: "bin/sh"},
		ent{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		ent{name: "etc/passwd", body: "root:x:0:0\n"},
		ent{name: "etc/old/", typ: tar.TypeDir, mode: 0o755},
		ent{name: "etc/old/a", body: "a"},
		ent{name: "etc/old/b", body: "b"},
		ent{name: "etc/gone", body: "gone"},
		ent{name: "home/user/", typ: tar.TypeDir, mode: 0o700, uid: 1000, gid: 1000},
		ent{name: "home/user/.profile", body: "export X=1", uid: 1000, gid: 1000, xattrs: map[string]string{"user.tag": "v"}},
		ent{name: "usr/lib/link", typ: tar.TypeSymlink, link: "/etc/passwd"},
		ent{name: "run/fifo", typ: tar.TypeFifo, mode: 0o600},
	)
	base2 = tarOf(t,
		ent{name: "etc/.wh.gone"},
		ent{name: "etc/old/", typ: tar.TypeDir, mode: 0o750},
		ent{name: "etc/old/.wh..wh..opq"},
		ent{name: "etc/old/c", body: "c"},
		ent{name: "bin/sh3", typ: tar.TypeLink, link: "bin/sh"},
	)
	app = tarOf(t,
		ent{name: "srv/app.py", body: strings.Repeat("print(1)\n", 20000)},
		ent{name: "etc/passwd", body: "root:x:0:0\napp:x:1000:1000\n"},
	)
	return
}

func TestImportLayersAndWhiteouts(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := t.Context()
	db := newDB(t)
	b1, b2, app := baseLayers(t)
	img := imageOf(t, layerOf(t, b1), layerOf(t, b2), layerOf(t, app))
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	require.NoError(t, p.AppendImage(img))

	o, err := Open(ctx, FromLayout, dir, OpenOptions{})
	require.NoError(t, err)
	got, st, err := Import(ctx, db, "team/app:1", o.Image, o.Source)
	require.NoError(t, err)
	require.Equal(t, 3, st.LayersRead)
	cfg, err := img.RawConfigFile()
	require.NoError(t, err)
	require.Equal(t, Digest(cfg), got.Digest, "the image's digest is its config's")
	id, err := img.ConfigName()
	require.NoError(t, err)
	require.Equal(t, id.String(), got.Digest)

	rec, err := DecodeRecord(got)
	require.NoError(t, err)
	require.Len(t, rec.Layers, 3)
	d, err := rec.Defaults()
	require.NoError(t, err)
	require.Equal(t, "/srv", d.WorkingDir)
	require.Equal(t, "1000:1000", d.User)
	require.Contains(t, d.Env, "LANG=C.UTF-8")
	// Each layer is a commit on the one below.
	c, err := db.Commit(ctx, rec.Layers[2].Commit)
	require.NoError(t, err)
	require.Equal(t, []store.ID{rec.Layers[1].Commit}, c.Parents)

	root := checkout(t, db, got)
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		require.NoError(t, err, p)
		return string(b)
	}
	require.Equal(t, "root:x:0:0\napp:x:1000:1000\n", read("etc/passwd"))
	require.NoFileExists(t, filepath.Join(root, "etc/gone"), "a whiteout deletes")
	require.NoFileExists(t, filepath.Join(root, "etc/old/a"), "an opaque directory hides the base's children")
	require.Equal(t, "c", read("etc/old/c"))
	var st1, st2, st3 unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(root, "bin/sh"), &st1))
	require.NoError(t, unix.Lstat(filepath.Join(root, "bin/sh2"), &st2))
	require.NoError(t, unix.Lstat(filepath.Join(root, "bin/sh3"), &st3))
	require.Equal(t, st1.Ino, st2.Ino, "a hard link in one layer")
	require.Equal(t, st1.Ino, st3.Ino, "a hard link to a lower layer's file")
	var su unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(root, "bin/su"), &su))
	require.Equal(t, uint32(0o4755), su.Mode&0o7777, "setuid kept as data")
	var prof unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(root, "home/user/.profile"), &prof))
	require.Equal(t, uint32(1000), prof.Uid)
	v := make([]byte, 16)
	n, err := unix.Lgetxattr(filepath.Join(root, "home/user/.profile"), "user.tag", v)
	require.NoError(t, err)
	require.Equal(t, "v", string(v[:n]))
	target, err := os.Readlink(filepath.Join(root, "usr/lib/link"))
	require.NoError(t, err)
	require.Equal(t, "/etc/passwd", target, "a symlink's target is data")
	var fifo unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(root, "run/fifo"), &fifo))
	require.Equal(t, uint32(syscall.S_IFIFO), fifo.Mode&syscall.S_IFMT)
}

// TestSharedBase: a second image on the same base reads only its own
// layer, and its commits are the base's.
func TestSharedBase(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	b1, b2, app := baseLayers(t)
	base := imageOf(t, layerOf(t, b1), layerOf(t, b2))
	first, st, err := Import(ctx, db, "base", base, "test")
	require.NoError(t, err)
	require.Equal(t, 2, st.LayersRead)

	second, st, err := Import(ctx, db, "app", imageOf(t, layerOf(t, b1), layerOf(t, b2), layerOf(t, app)), "test")
	require.NoError(t, err)
	require.Equal(t, 3, st.Layers)
	require.Equal(t, 1, st.LayersRead, "the base's layers are stored already")
	c, err := db.Commit(ctx, second.Commit)
	require.NoError(t, err)
	require.Equal(t, []store.ID{first.Commit}, c.Parents, "the app's layer is a commit on the base's")
	require.LessOrEqual(t, st.StoreGrowth, int64(len(app))*12/10, "the second image costs about its layer: %+v", st)

	// Importing the same image again reads nothing and stores nothing.
	again, st, err := Import(ctx, db, "base:again", base, "test")
	require.NoError(t, err)
	require.Zero(t, st.LayersRead)
	require.Equal(t, first.Commit, again.Commit)
}

// TestBadLayers: a layer that cannot be imported safely is refused with
// a message naming it, and nothing of the image is named.
func TestBadLayers(t *testing.T) {
	ctx := t.Context()
	ok := tarOf(t, ent{name: "bin/sh", body: "sh"}, ent{name: "lib", typ: tar.TypeSymlink, link: "/usr/lib"})
	full := tarOf(t, ent{name: "big", body: strings.Repeat("x", 100000)})
	for _, c := range []struct {
		name  string
		layer []byte
		want  string
	}{
		{"truncated", full[:50000], "the archive ends inside the file"},
		{"escape", tarOf(t, ent{name: "../../etc/passwd", body: "x"}), "leads out of the root"},
		{"link escape", tarOf(t, ent{name: "x", typ: tar.TypeLink, link: "../../etc/shadow"}), "leads out of the root"},
		{"device", tarOf(t, ent{name: "dev/sda", typ: tar.TypeBlock}), "a device node"},
		{"through symlink", tarOf(t, ent{name: "lib/evil.so", body: "x"}), "below a symlink"},
		{"link to nothing", tarOf(t, ent{name: "x", typ: tar.TypeLink, link: "nope"}), "does not hold"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := newDB(t)
			img := imageOf(t, layerOf(t, ok), layerOf(t, c.layer))
			_, _, err := Import(ctx, db, "bad", img, "test")
			require.ErrorIs(t, err, ErrBadLayer)
			require.ErrorContains(t, err, c.want)
			_, err = db.Image(ctx, "bad")
			require.ErrorIs(t, err, store.ErrNotFound, "nothing named")
			// The good first layer was not recorded either: the import is whole or nothing.
			_, found, err := db.Derivation(ctx, layerKey(store.ZeroID, mustDiffID(t, ok)))
			require.NoError(t, err)
			require.False(t, found, "no derivation of a failed import")
		})
	}
}

func mustDiffID(t testing.TB, b []byte) string {
	h, _, err := v1.SHA256(strings.NewReader(string(b)))
	require.NoError(t, err)
	return h.String()
}

// TestSources: a docker save archive, an OCI layout in a tar and an
// in-process registry give the same image.
func TestSources(t *testing.T) {
	ctx := t.Context()
	b1, b2, _ := baseLayers(t)
	img := imageOf(t, layerOf(t, b1), layerOf(t, b2))
	want, err := img.ConfigName()
	require.NoError(t, err)

	dir := t.TempDir()
	archive := filepath.Join(dir, "save.tar")
	tag, err := name.NewTag("team/base:1")
	require.NoError(t, err)
	require.NoError(t, tarball.WriteToFile(archive, tag, img))

	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/team/base:1"
	r, err := name.ParseReference(ref)
	require.NoError(t, err)
	require.NoError(t, remote.Write(r, img))

	for _, c := range []struct{ kind, ref string }{{FromArchive, archive}, {FromRegistry, ref}} {
		t.Run(c.kind, func(t *testing.T) {
			db := newDB(t)
			o, err := Open(ctx, c.kind, c.ref, OpenOptions{TempDir: t.TempDir()})
			require.NoError(t, err)
			defer o.Close()
			got, _, err := Import(ctx, db, "base", o.Image, o.Source)
			require.NoError(t, err)
			require.Equal(t, want.String(), got.Digest)
		})
	}
	_, err = Open(ctx, FromRegistry, strings.TrimPrefix(srv.URL, "http://")+"/team/none:1", OpenOptions{})
	require.ErrorContains(t, err, "not found")
}

// TestLayerTarRoundTrip: a layer written from two trees, imported on the
// first, gives the second.
func TestLayerTarRoundTrip(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	b1, b2, app := baseLayers(t)
	base, _, err := Import(ctx, db, "base", imageOf(t, layerOf(t, b1)), "test")
	require.NoError(t, err)
	full, _, err := Import(ctx, db, "full", imageOf(t, layerOf(t, b1), layerOf(t, b2), layerOf(t, app)), "test")
	require.NoError(t, err)
	bc, err := db.Commit(ctx, base.Commit)
	require.NoError(t, err)
	fc, err := db.Commit(ctx, full.Commit)
	require.NoError(t, err)
	var buf strings.Builder
	_, err = LayerTar(ctx, db, bc.Root, fc.Root, &buf)
	require.NoError(t, err)
	diff := []byte(buf.String())
	again, _, err := Import(ctx, db, "again", imageOf(t, layerOf(t, b1), layerOf(t, diff)), "test")
	require.NoError(t, err)
	ac, err := db.Commit(ctx, again.Commit)
	require.NoError(t, err)
	require.Equal(t, fc.Root, ac.Root, "the layer's diff applied on the base is the full tree")
	d1, _, err := DiffID(ctx, db, bc.Root, fc.Root)
	require.NoError(t, err)
	require.Equal(t, mustDiffID(t, diff), d1, "a layer's tar is a function of its trees")
}

// TestPushPull: an image pushed from the Store to a registry and pulled
// back under another name has the same trees.
func TestPushPull(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	b1, b2, app := baseLayers(t)
	img, _, err := Import(ctx, db, "app", imageOf(t, layerOf(t, b1), layerOf(t, b2), layerOf(t, app)), "test")
	require.NoError(t, err)
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/team/app:1"
	pushed, err := Push(ctx, db, img, ref, OpenOptions{})
	require.NoError(t, err)
	require.Contains(t, pushed, "@sha256:")

	other := newDB(t)
	o, err := Open(ctx, FromRegistry, pushed, OpenOptions{})
	require.NoError(t, err)
	back, _, err := Import(ctx, other, "back", o.Image, o.Source)
	require.NoError(t, err)
	c1, err := db.Commit(ctx, img.Commit)
	require.NoError(t, err)
	c2, err := other.Commit(ctx, back.Commit)
	require.NoError(t, err)
	require.Equal(t, c1.Root, c2.Root, "the same tree, pulled back")
}
