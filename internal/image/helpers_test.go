package image

import (
	"archive/tar"
	"bytes"
	"io"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
)

func newDB(t testing.TB) *store.DB {
	t.Helper()
	db, err := store.Init(t.Context(), filepath.Join(t.TempDir(), "store"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// ent is one entry of a test layer.
type ent struct {
	name, body, link string
	typ              byte
	mode             int64
	uid, gid         int
	xattrs           map[string]string
}

// tarOf writes entries as a tar, as an image builder would.
func tarOf(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid, Linkname: e.link,
			ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		for k, v := range e.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		require.NoError(t, tw.WriteHeader(h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// layerOf is a layer of the tar bytes b (gzipped by the library, its
// diff ID the digest of b).
func layerOf(t testing.TB, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	require.NoError(t, err)
	return l
}

// imageOf is an image of the layers, with an Env, a WorkingDir and a User.
func imageOf(t testing.TB, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = platform.OS, platform.Architecture
	cf.Config.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	cf.Config.WorkingDir = "/srv"
	cf.Config.User = "1000:1000"
	cf.Config.Cmd = []string{"/bin/sh"}
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)
	return img
}

// checkout writes the image's tree into a new directory.
func checkout(t testing.TB, db *store.DB, img store.Image) string {
	t.Helper()
	c, err := db.Commit(t.Context(), img.Commit)
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = commit.Checkout(t.Context(), db, c.Root, dir, nil)
	require.NoError(t, err)
	return dir
}
