package engine

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/wire/errclass"
)

// fileTree lists every path under dir with its kind and content, for
// "nothing changed on disk" checks.
func fileTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			m[rel] = "link:" + l
		case fi.IsDir():
			m[rel] = "dir"
		default:
			b, _ := os.ReadFile(p)
			m[rel] = "file:" + string(b)
		}
		return nil
	})
	return m
}

// workspaceWithTraps makes a workspace directory holding symlinks that point
// outside it, and a secret outside.
func workspaceWithTraps(t *testing.T) (ws, outside string, root int) {
	t.Helper()
	base := t.TempDir()
	ws = filepath.Join(base, "ws")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{ws, outside, filepath.Join(ws, "sub")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o600)
	os.WriteFile(filepath.Join(ws, "sub", "inside"), []byte("ok"), 0o644)
	os.Symlink(outside, filepath.Join(ws, "abs-out"))
	os.Symlink("../outside", filepath.Join(ws, "rel-out"))
	os.Symlink("sub", filepath.Join(ws, "in-link"))
	fd, err := rootDir(ws)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return ws, outside, fd
}

func TestCleanRel(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{"a/b", "a/b", false},
		{"./a//b/", "a/b", false},
		{"", "", false},
		{".", "", false},
		{"/etc/passwd", "", true},
		{"../x", "", true},
		{"a/../../x", "", true},
		{"a/..", "", true},
		{"a\x00b", "", true},
	} {
		got, err := cleanRel(tc.in)
		if tc.bad != (err != nil) || (!tc.bad && got != tc.want) {
			t.Errorf("cleanRel(%q) = %q, %v; want %q, bad=%v", tc.in, got, err, tc.want, tc.bad)
		}
		if tc.bad {
			assert.ErrorIs(t, err, errclass.Invalid, "cleanRel(%q)", tc.in)
		}
	}
}

func TestReadWriteRefuseEscapes(t *testing.T) {
	ws, outside, root := workspaceWithTraps(t)
	before := fileTree(t, filepath.Dir(ws))
	for _, p := range []string{"abs-out/secret", "rel-out/secret", "abs-out/new", "rel-out/new"} {
		_, _, err := openRegular(root, p)
		assert.ErrorIs(t, err, errclass.Invalid, "read %q (escape)", p)
		assert.ErrorIs(t, writeFile(root, p, 0o644, strings.NewReader("x")), errclass.Invalid, "write %q (escape)", p)
	}
	assert.Error(t, writeFile(root, "abs-out", 0o644, strings.NewReader("x")), "writing over a symlink must not follow it")
	require.Equal(t, before, fileTree(t, filepath.Dir(ws)), "refused requests changed the disk")
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "s3cret" {
		t.Fatalf("secret changed: %q", b)
	}
	// Symlinks that stay inside work.
	f, size, err := openRegular(root, "in-link/inside")
	if err != nil || size != 2 {
		t.Fatalf("read through an inside symlink: %v size %d", err, size)
	}
	f.Close()
	require.NoError(t, writeFile(root, "new/dir/file", 0o640, strings.NewReader("hello")))
	if b, err := os.ReadFile(filepath.Join(ws, "new/dir/file")); err != nil || string(b) != "hello" {
		t.Fatalf("written file: %q %v", b, err)
	}
	_, _, err = openRegular(root, "missing")
	require.ErrorIs(t, err, errclass.NotFound, "missing file")
	_, _, err = openRegular(root, "sub")
	require.ErrorIs(t, err, errclass.Invalid, "reading a directory as a file")
}

type tarEntry struct {
	name, link, body string
	typ              byte
}

func makeTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		require.NoError(t, tw.WriteHeader(h))
		io.WriteString(tw, e.body)
	}
	tw.Close()
	return buf.Bytes()
}

func TestTarRefusesEscapesBeforeWriting(t *testing.T) {
	good := tarEntry{name: "good", body: "fine", typ: tar.TypeReg}
	for name, bad := range map[string]tarEntry{
		"dotdot":            {name: "../evil", body: "x", typ: tar.TypeReg},
		"absolute":          {name: "/etc/evil", body: "x", typ: tar.TypeReg},
		"nested dotdot":     {name: "a/../../evil", body: "x", typ: tar.TypeReg},
		"absolute symlink":  {name: "l", link: "/etc", typ: tar.TypeSymlink},
		"escaping symlink":  {name: "a/l", link: "../../etc", typ: tar.TypeSymlink},
		"escaping hardlink": {name: "h", link: "../outside/secret", typ: tar.TypeLink},
		"device":            {name: "dev", typ: tar.TypeChar},
	} {
		t.Run(name, func(t *testing.T) {
			ws, _, root := workspaceWithTraps(t)
			before := fileTree(t, filepath.Dir(ws))
			data := makeTar(t, good, bad)
			require.ErrorIs(t, checkTar(bytes.NewReader(data)), errclass.Invalid, "checkTar")
			require.Equal(t, before, fileTree(t, filepath.Dir(ws)), "disk changed")
			_ = root
		})
	}
	t.Run("entry below a symlink of the same archive", func(t *testing.T) {
		data := makeTar(t, tarEntry{name: "l", link: "sub", typ: tar.TypeSymlink}, tarEntry{name: "l/x", body: "x", typ: tar.TypeReg})
		require.ErrorIs(t, checkTar(bytes.NewReader(data)), errclass.Invalid)
	})
	t.Run("extract through a workspace symlink that escapes", func(t *testing.T) {
		ws, _, root := workspaceWithTraps(t)
		before := fileTree(t, filepath.Join(filepath.Dir(ws), "outside"))
		data := makeTar(t, tarEntry{name: "rel-out/x", body: "x", typ: tar.TypeReg})
		require.NoError(t, checkTar(bytes.NewReader(data)), "checkTar cannot see the workspace")
		require.ErrorIs(t, extractTar(root, "", bytes.NewReader(data)), errclass.Invalid, "extract")
		require.Equal(t, before, fileTree(t, filepath.Join(filepath.Dir(ws), "outside")), "outside changed")
	})
}

func TestTarRoundTrip(t *testing.T) {
	ws, _, root := workspaceWithTraps(t)
	data := makeTar(t,
		tarEntry{name: "d/", typ: tar.TypeDir},
		tarEntry{name: "d/f", body: "hello", typ: tar.TypeReg},
		tarEntry{name: "d/l", link: "f", typ: tar.TypeSymlink},
		tarEntry{name: "d/h", link: "d/f", typ: tar.TypeLink},
	)
	require.NoError(t, checkTar(bytes.NewReader(data)))
	require.NoError(t, extractTar(root, "up", bytes.NewReader(data)))
	var a, b unix.Stat_t
	unix.Stat(filepath.Join(ws, "up/d/f"), &a)
	unix.Stat(filepath.Join(ws, "up/d/h"), &b)
	if a.Ino != b.Ino {
		t.Errorf("hard link not preserved")
	}
	if l, _ := os.Readlink(filepath.Join(ws, "up/d/l")); l != "f" {
		t.Errorf("symlink target %q", l)
	}
	st, _ := os.Stat(filepath.Join(ws, "up/d"))
	if st.ModTime().Unix() != 1700000000 {
		t.Errorf("directory mtime %v not restored", st.ModTime())
	}
	var out bytes.Buffer
	require.NoError(t, writeTar(root, "up/d", 0, &out))
	tr := tar.NewReader(&out)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		body, _ := io.ReadAll(tr)
		got[h.Name] = string(h.Typeflag) + ":" + h.Linkname + ":" + string(body)
	}
	want := map[string]string{"d/": "5::", "d/f": "0::hello", "d/h": "0::hello", "d/l": "2:f:"}
	require.Equal(t, want, got, "tar out")
	require.NoError(t, writeTar(root, "abs-out", 0, io.Discard), "a symlink itself is downloadable as a link")
	require.ErrorIs(t, writeTar(root, "abs-out/secret", 0, io.Discard), errclass.Invalid, "download through an escaping link")
}

// failingReader delivers some bytes and then fails, like a client that
// disconnects in the middle of an upload.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("connection reset")
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

func TestFailedUploadLeavesFileAsItWas(t *testing.T) {
	ws, _, root := workspaceWithTraps(t)
	os.WriteFile(filepath.Join(ws, "keep"), []byte("original"), 0o644)
	before := fileTree(t, ws)
	require.Error(t, writeFile(root, "keep", 0o644, &failingReader{n: 1 << 20}), "a failed upload must report an error")
	require.Error(t, writeFile(root, "new", 0o644, &failingReader{n: 10}), "a failed upload must report an error")
	require.Equal(t, before, fileTree(t, ws), "a failed upload changed the workspace")
	require.ErrorIs(t, writeFile(root, "sub", 0o644, strings.NewReader("x")), errclass.Invalid, "uploading over a directory")
	require.NoError(t, writeFile(root, "keep", 0o600, strings.NewReader("new")))
	if st, _ := os.Stat(filepath.Join(ws, "keep")); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
}
