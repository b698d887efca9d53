package apitest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// fileChecks are those of Files.
var fileChecks = []check{
	{"WriteAndRead", checkWriteAndRead},
	{"StatAndSymlinks", checkStatAndSymlinks},
	{"NoSymlinkEscape", checkNoSymlinkEscape},
	{"ListPages", checkListPages},
	{"PutTar", checkPutTar},
	{"PutTarCheckedWhole", checkPutTarCheckedWhole},
	{"GetTar", checkGetTar},
}

// tarEntry is one entry of a test archive.
type tarEntry struct {
	name, body, link string
	typ              byte
}

func tarFile(name, body string) tarEntry { return tarEntry{name: name, body: body, typ: tar.TypeReg} }
func tarDir(name string) tarEntry        { return tarEntry{name: name, typ: tar.TypeDir} }

// tarOf is an archive of entries.
func tarOf(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := int64(0o644)
		if e.typ == tar.TypeDir {
			mode = 0o755
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode, Size: int64(len(e.body))}
		require.NoError(t, tw.WriteHeader(h))
		_, err := io.WriteString(tw, e.body)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// tarNames reads an archive and returns its entries' names and, for each
// file, its content.
func tarNames(t *testing.T, b []byte) ([]string, map[string]string) {
	t.Helper()
	var names []string
	bodies := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, bodies
		}
		require.NoError(t, err, "read the archive")
		names = append(names, h.Name)
		if h.Typeflag == tar.TypeReg {
			body, err := io.ReadAll(tr)
			require.NoError(t, err)
			bodies[h.Name] = string(body)
		}
	}
}

// checkWriteAndRead: a file is written with its mode and its parents,
// replaced whole, read with its size; a directory or a missing file is
// not read.
func checkWriteAndRead(f *fixture) {
	ws := f.workspace(f.project(), "main")
	require.NoError(f.t, f.eng.WriteFile(f.ctx, ws.ID, "deep/er/file.txt", 0o600, strings.NewReader("first version")))
	assert.Equal(f.t, "first version", f.read(ws.ID, "deep/er/file.txt"))
	fi, err := f.eng.Stat(f.ctx, ws.ID, "deep/er/file.txt")
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.FileInfo{Path: "deep/er/file.txt", Type: "file", Size: 13, Mode: 0o600, ModTime: fi.ModTime}, fi)
	f.write(ws.ID, "deep/er/file.txt", "second")
	assert.Equal(f.t, "second", f.read(ws.ID, "deep/er/file.txt"), "a file written again is replaced whole")
	assert.Equal(f.t, "second", f.sh(ws.ID, "cat deep/er/file.txt"), "the sandbox sees the API's write")
	_, err = f.eng.ReadFile(f.ctx, ws.ID, "deep/er", &bytes.Buffer{})
	f.isClass(err, errclass.Invalid, "read a directory")
	_, err = f.eng.ReadFile(f.ctx, ws.ID, "missing", &bytes.Buffer{})
	f.isClass(err, errclass.NotFound, "read a missing file")
	f.isClass(f.eng.WriteFile(f.ctx, ws.ID, "x", os.ModeSymlink|0o644, strings.NewReader("x")), errclass.Invalid, "a mode with type bits")
}

// checkStatAndSymlinks: Stat describes a file, a directory and the root,
// and a symlink itself, not what it points to.
func checkStatAndSymlinks(f *fixture) {
	ws := f.workspace(f.project(), "main")
	f.sh(ws.ID, "mkdir d && echo hi > d/f && ln -s d/f link && ln -s /nowhere dangling")
	for _, c := range []struct{ path, typ, target string }{
		{".", "dir", ""}, {"d", "dir", ""}, {"d/f", "file", ""}, {"link", "symlink", "d/f"}, {"dangling", "symlink", "/nowhere"},
	} {
		fi, err := f.eng.Stat(f.ctx, ws.ID, c.path)
		if assert.NoError(f.t, err, "stat %s", c.path) {
			assert.Equal(f.t, []string{c.path, c.typ, c.target}, []string{fi.Path, fi.Type, fi.Target}, "stat %s", c.path)
		}
	}
	_, err := f.eng.Stat(f.ctx, ws.ID, "missing")
	f.isClass(err, errclass.NotFound, "stat a missing path")
}

// checkNoSymlinkEscape: a symlink in the workspace that points out of it
// never takes a read or a write of the API outside the workspace.
func checkNoSymlinkEscape(f *fixture) {
	host := f.t.TempDir()
	require.NoError(f.t, os.WriteFile(filepath.Join(host, "secret"), []byte("host secret"), 0o644))
	ws := f.workspace(f.project(), "main")
	f.sh(ws.ID, "ln -s "+host+" out && ln -s ../../../../../../.."+host+" up")
	for _, link := range []string{"out", "up"} {
		var buf bytes.Buffer
		_, err := f.eng.ReadFile(f.ctx, ws.ID, link+"/secret", &buf)
		assert.Error(f.t, err, "read %s/secret", link)
		assert.NotContains(f.t, buf.String(), "host secret", "read through %s", link)
		f.eng.WriteFile(f.ctx, ws.ID, link+"/planted", 0o644, strings.NewReader("x"))
		f.eng.PutTar(f.ctx, ws.ID, link, bytes.NewReader(tarOf(f.t, tarFile("planted-tar", "x"))))
	}
	ents, err := os.ReadDir(host)
	require.NoError(f.t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Equal(f.t, []string{"secret"}, names, "the host directory the symlinks point to")
}

// checkListPages: a listing is in name order (depth first when recursive)
// and pages after the cursor; a file or a missing path is not listed.
func checkListPages(f *fixture) {
	ws := f.workspace(f.project(), "main")
	f.sh(ws.ID, "mkdir -p src/deep && touch README src/a.go src/b.go src/deep/c.go")
	page, err := f.eng.List(f.ctx, ws.ID, "src", false, "", 100)
	require.NoError(f.t, err)
	assert.Equal(f.t, []string{"src/a.go", "src/b.go", "src/deep"}, entryPaths(page.Entries), "list src")
	assert.Empty(f.t, page.Next)
	want := []string{"README", "src", "src/a.go", "src/b.go", "src/deep", "src/deep/c.go"}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(f.t, pages, len(want), "the pages do not end")
		page, err := f.eng.List(f.ctx, ws.ID, ".", true, cursor, 4)
		require.NoError(f.t, err)
		assert.LessOrEqual(f.t, len(page.Entries), 4, "a page's limit")
		got = append(got, entryPaths(page.Entries)...)
		if page.Next == "" {
			break
		}
		assert.Equal(f.t, got[len(got)-1], page.Next, "the cursor is the page's last path")
		cursor = page.Next
	}
	assert.Equal(f.t, want, got, "every entry once, depth first in name order")
	_, err = f.eng.List(f.ctx, ws.ID, "README", false, "", 10)
	f.isClass(err, errclass.Invalid, "list a file")
	_, err = f.eng.List(f.ctx, ws.ID, "missing", false, "", 10)
	f.isClass(err, errclass.NotFound, "list a missing directory")
}

func entryPaths(es []wire.FileInfo) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Path)
	}
	return out
}

// checkPutTar: an archive is extracted into a directory made for it, with
// files, directories and symlinks.
func checkPutTar(f *fixture) {
	ws := f.workspace(f.project(), "main")
	ar := tarOf(f.t, tarDir("d/"), tarFile("d/x", "x in d"), tarFile("top.txt", "top"),
		tarEntry{name: "d/link", link: "x", typ: tar.TypeSymlink})
	require.NoError(f.t, f.eng.PutTar(f.ctx, ws.ID, "into/here", bytes.NewReader(ar)))
	assert.Equal(f.t, "x in d", f.read(ws.ID, "into/here/d/x"))
	assert.Equal(f.t, "top", f.read(ws.ID, "into/here/top.txt"))
	fi, err := f.eng.Stat(f.ctx, ws.ID, "into/here/d/link")
	require.NoError(f.t, err)
	assert.Equal(f.t, []string{"symlink", "x"}, []string{fi.Type, fi.Target})
	require.NoError(f.t, f.eng.PutTar(f.ctx, ws.ID, ".", bytes.NewReader(tarOf(f.t, tarFile("root.txt", "root")))))
	assert.Equal(f.t, "root", f.read(ws.ID, "root.txt"), "an archive extracted at the root")
}

// checkPutTarCheckedWhole: an archive with one bad entry anywhere writes
// nothing, and is invalid.
func checkPutTarCheckedWhole(f *fixture) {
	ws := f.workspace(f.project(), "main")
	for _, c := range []struct {
		name string
		bad  tarEntry
	}{
		{"a .. name", tarFile("../../escape", "x")},
		{"an absolute name", tarFile("/etc/escape", "x")},
		{"a device", tarEntry{name: "null", typ: tar.TypeChar}},
		{"a hard link out of the tree", tarEntry{name: "h", link: "../../etc/passwd", typ: tar.TypeLink}},
	} {
		ar := tarOf(f.t, tarFile("before.txt", "before"), c.bad, tarFile("after.txt", "after"))
		f.isClass(f.eng.PutTar(f.ctx, ws.ID, "dest", bytes.NewReader(ar)), errclass.Invalid, "an archive with "+c.name)
	}
	st, err := f.eng.WorkspaceStatus(f.ctx, ws.ID)
	require.NoError(f.t, err)
	assert.Empty(f.t, st.Changes, "refused archives wrote nothing")
	f.isClass(f.eng.PutTar(f.ctx, ws.ID, ".", strings.NewReader("not a tar archive at all, but long enough to be read as one header or more: "+strings.Repeat("x", 600))),
		errclass.Invalid, "a malformed archive")
}

// checkGetTar: a file is one entry under its base name, a directory its
// own entry and its tree, the root its entries; a missing path is not
// found.
func checkGetTar(f *fixture) {
	ws := f.workspace(f.project(), "main")
	f.sh(ws.ID, "mkdir -p up/d && echo content > up/d/x && echo top > top.txt")
	var buf bytes.Buffer
	require.NoError(f.t, f.eng.GetTar(f.ctx, ws.ID, "up/d", &buf))
	names, bodies := tarNames(f.t, buf.Bytes())
	assert.Equal(f.t, []string{"d/", "d/x"}, names, "a directory's archive")
	assert.Equal(f.t, "content\n", bodies["d/x"])
	buf.Reset()
	require.NoError(f.t, f.eng.GetTar(f.ctx, ws.ID, "up/d/x", &buf))
	names, _ = tarNames(f.t, buf.Bytes())
	assert.Equal(f.t, []string{"x"}, names, "a file's archive")
	buf.Reset()
	require.NoError(f.t, f.eng.GetTar(f.ctx, ws.ID, ".", &buf))
	_, bodies = tarNames(f.t, buf.Bytes())
	assert.Equal(f.t, "top\n", bodies["top.txt"], "the root's archive holds top.txt")
	assert.Equal(f.t, "content\n", bodies["up/d/x"], "the root's archive holds up/d/x")
	f.isClass(f.eng.GetTar(f.ctx, ws.ID, "missing", &bytes.Buffer{}), errclass.NotFound, "the archive of a missing path")
}
