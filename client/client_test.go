package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

func dial(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.Dial(t.Context(), daemonAddr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// project makes a project of t's own in the engine the tests share.
func project(t *testing.T, c *client.Client) string {
	t.Helper()
	name := projectName(t)
	_, err := c.CreateProject(t.Context(), wire.CreateProject{Name: name})
	require.NoError(t, err)
	return name
}

// projects counts the names projectName gave, so that a test run again
// (go test -count) names a new project.
var projects atomic.Int64

// projectName is a project name of t's own.
func projectName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), projects.Add(1))
}

// TestWorkflow is the end-to-end sequence through the SDK (against
// the engine in this test binary here; the same sequence runs against a
// real layerfsd in cmd/layerfsd's tests).
func TestWorkflow(t *testing.T) {
	ctx := t.Context()
	c := dial(t)
	p := project(t, c)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main"})
	require.NoError(t, err)
	if res, err := ws.Exec(ctx, "mkdir -p data && echo forty two > data/out.txt", client.ExecOptions{Timeout: 10 * time.Second}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write: %+v %v", res, err)
	}
	res, err := ws.ExecArgv(ctx, []string{"cat", "data/out.txt"}, client.ExecOptions{})
	if err != nil || string(res.Stdout) != "forty two\n" {
		t.Fatalf("cat: %+v %v", res, err)
	}
	dst := filepath.Join(t.TempDir(), "out.txt")
	require.NoError(t, ws.Download(ctx, "data/out.txt", dst))
	if b, _ := os.ReadFile(dst); string(b) != "forty two\n" {
		t.Errorf("downloaded %q", b)
	}
	cr, err := ws.Commit(ctx, "answer")
	if err != nil || cr.Result != wire.Created {
		t.Fatalf("commit: %+v %v", cr, err)
	}
	_, err = c.ForkBranch(ctx, p, "second", cr.Commit)
	require.NoError(t, err)
	ws2, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "second"})
	require.NoError(t, err)
	if b, err := ws2.ReadFile(ctx, "data/out.txt"); err != nil || string(b) != "forty two\n" {
		t.Errorf("second workspace reads %q, %v", b, err)
	}
	log, err := c.Log(ctx, p, "second", 0)
	if err != nil || len(log) != 2 || log[0].Message != "answer" {
		t.Errorf("log = %+v, %v", log, err)
	}
	changes, err := c.DiffAll(ctx, p, "layer:1", "second")
	if err != nil || len(changes) != 2 {
		t.Errorf("diff = %+v, %v", changes, err)
	}
	again, err := c.Workspace(ctx, ws2.ID())
	if err != nil || again.Info().Branch != "second" {
		t.Errorf("attach: %+v %v", again, err)
	}
	for _, w := range []*client.Workspace{ws, ws2} {
		assert.NoError(t, w.End(ctx, client.EndOptions{}), "end %s", w.ID())
	}
	wss, _ := c.Workspaces(ctx)
	for _, w := range wss {
		if w.ID == ws.ID() || w.ID == ws2.ID() {
			t.Errorf("workspace %s still listed after End", w.ID)
		}
	}
}

func TestErrors(t *testing.T) {
	ctx := t.Context()
	c := dial(t)
	p := project(t, c)
	a, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main"})
	b, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main"})
	a.WriteFile(ctx, "x", []byte("a"), 0o644)
	b.WriteFile(ctx, "x", []byte("b"), 0o644)
	won, err := a.Commit(ctx, "a")
	require.NoError(t, err)
	// A lost race is a result: b's commit is stored, the head stays a's.
	lost, err := b.Commit(ctx, "b")
	if err != nil || lost.Result != wire.HeadMoved || lost.Head != won.Commit || lost.Commit == won.Commit {
		t.Errorf("second commit: %+v, %v; want head-moved with the head at %s", lost, err, won.Commit)
	}
	if err := b.End(ctx, client.EndOptions{}); !client.IsUncommitted(err) {
		t.Errorf("end with changes: %v", err)
	}
	if _, err := a.Exec(ctx, "echo", client.ExecOptions{Timeout: -time.Second}); !client.IsInvalid(err) || !strings.Contains(err.Error(), "timeout_ms") {
		t.Errorf("negative timeout: %v", err)
	}
	if _, err := c.Workspace(ctx, "ws-ffffff"); !client.IsNotFound(err) || !errors.Is(err, errclass.NotFound) || errors.Is(err, errclass.Exists) {
		t.Errorf("unknown workspace: %v, want the class errclass.NotFound", err)
	}
	if _, err := a.ReadFile(ctx, "../etc/passwd"); !client.IsInvalid(err) {
		t.Errorf("read ../etc/passwd: %v", err)
	}
	if _, err := c.CreateProject(ctx, wire.CreateProject{Name: p}); !client.IsExists(err) {
		t.Errorf("project twice: %v", err)
	}
	if client.Code(errors.New("plain")) != "" || client.IsNotFound(nil) {
		t.Error("Code of a non-API error")
	}
}

func TestExecStreams(t *testing.T) {
	ctx := t.Context()
	c := dial(t)
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: project(t, c), Branch: "main"})
	var out, errb bytes.Buffer
	res, err := ws.Exec(ctx, "echo oops >&2", client.ExecOptions{Stdout: &out, Stderr: &errb})
	if err != nil || errb.String() != "oops\n" || len(res.Stderr) != 0 {
		t.Errorf("stderr streamed %q, result %+v, %v", errb.String(), res, err)
	}
	// Only stdout redirected: stderr is collected in the result.
	out.Reset()
	res, err = ws.Exec(ctx, "echo oops >&2", client.ExecOptions{Stdout: &out})
	if err != nil || string(res.Stderr) != "oops\n" {
		t.Errorf("stderr collected %q, %v", res.Stderr, err)
	}
	// Output arrives while the command runs.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := ws.Exec(ctx, "for i in 0 1 2; do echo line $i; sleep 0.2; done", client.ExecOptions{Stdout: pw})
		pw.CloseWithError(err)
		done <- err
	}()
	start := time.Now()
	buf := make([]byte, 64)
	n, err := pr.Read(buf)
	if err != nil || string(buf[:n]) != "line 0\n" || time.Since(start) > 400*time.Millisecond {
		t.Errorf("first chunk %q after %v, %v", buf[:n], time.Since(start), err)
	}
	io.Copy(io.Discard, pr)
	assert.NoError(t, <-done)
}

func TestUploadDownloadTree(t *testing.T) {
	ctx := t.Context()
	c := dial(t)
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: project(t, c), Branch: "main"})
	src := t.TempDir()
	files := map[string]string{"a.txt": "A", "sub/b.txt": "B", "sub/deep/c.txt": "C"}
	for n, d := range files {
		os.MkdirAll(filepath.Join(src, filepath.Dir(n)), 0o755)
		os.WriteFile(filepath.Join(src, n), []byte(d), 0o640)
	}
	os.Symlink("b.txt", filepath.Join(src, "sub", "link"))
	require.NoError(t, ws.Upload(ctx, src, "tree"))
	require.NoError(t, ws.Upload(ctx, filepath.Join(src, "a.txt"), "single.txt"))
	dst := filepath.Join(t.TempDir(), "copy")
	require.NoError(t, ws.Download(ctx, "tree", dst))
	for n, d := range files {
		b, err := os.ReadFile(filepath.Join(dst, n))
		if err != nil || string(b) != d {
			t.Errorf("%s = %q, %v", n, b, err)
		}
		if fi, _ := os.Stat(filepath.Join(dst, n)); fi == nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("%s mode %v", n, fi)
		}
	}
	if l, err := os.Readlink(filepath.Join(dst, "sub", "link")); err != nil || l != "b.txt" {
		t.Errorf("link = %q, %v", l, err)
	}
	// Into an existing directory, the copy goes under the base name (cp -r).
	existing := t.TempDir()
	require.NoError(t, ws.Download(ctx, "tree/sub", existing))
	if b, _ := os.ReadFile(filepath.Join(existing, "sub", "deep", "c.txt")); string(b) != "C" {
		t.Errorf("cp into dir: %q", b)
	}
	// The root merges into an existing directory.
	root := t.TempDir()
	require.NoError(t, ws.Download(ctx, ".", root))
	if b, _ := os.ReadFile(filepath.Join(root, "single.txt")); string(b) != "A" {
		t.Errorf("root download: single.txt = %q", b)
	}
	if err := ws.Download(ctx, "nope", t.TempDir()); !client.IsNotFound(err) {
		t.Errorf("download of a missing path: %v", err)
	}
}

// TestCompressedDownloads: a client dialed WithCompressedDownloads gets
// the same tree, files and a large run of zeros included.
func TestCompressedDownloads(t *testing.T) {
	ctx := t.Context()
	c, err := client.Dial(ctx, daemonAddr, client.WithCompressedDownloads())
	require.NoError(t, err)
	defer c.Close()
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: project(t, c), Branch: "main"})
	require.NoError(t, err)
	zeros := make([]byte, 4<<20)
	require.NoError(t, ws.WriteFile(ctx, "d/zeros", zeros, 0o644))
	require.NoError(t, ws.WriteFile(ctx, "d/sub/text", []byte("text\n"), 0o600))
	dst := t.TempDir()
	require.NoError(t, ws.Download(ctx, "d", dst))
	if b, err := os.ReadFile(filepath.Join(dst, "d", "zeros")); err != nil || !bytes.Equal(b, zeros) {
		t.Errorf("zeros: %d bytes, %v", len(b), err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "d", "sub", "text")); err != nil || string(b) != "text\n" {
		t.Errorf("text: %q, %v", b, err)
	}
	if err := ws.Download(ctx, "nope", t.TempDir()); !client.IsNotFound(err) {
		t.Errorf("download of a missing path: %v", err)
	}
}

// evil serves a crafted tar for every download, the rest from the real
// engine.
type evil struct {
	api.Engine
	tar []byte
}

func (e *evil) GetTar(ctx context.Context, id, path string, w io.Writer) error {
	_, err := w.Write(e.tar)
	return err
}

func craft(t *testing.T, hs ...tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 4
		}
		h.Mode = 0o644
		require.NoError(t, tw.WriteHeader(&h))
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("evil"))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// TestDownloadSafety: whatever the daemon sends, Download writes nothing
// outside the destination.
func TestDownloadSafety(t *testing.T) {
	ctx := t.Context()
	eng := &evil{Engine: localEngine}
	srv := httptest.NewServer(api.NewServer(eng, api.Options{}).Handler(api.ListenerOptions{}))
	defer srv.Close()
	c, err := client.Dial(ctx, srv.URL)
	require.NoError(t, err)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: project(t, c), Branch: "main"})
	require.NoError(t, err)
	dir := func(n string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeDir} }
	reg := func(n string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeReg} }
	sym := func(n, to string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: to} }
	hard := func(n, to string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeLink, Linkname: to} }
	for _, c := range []struct {
		name    string
		entries []tar.Header
	}{
		{"dotdot", []tar.Header{dir("d/"), reg("d/../../outside/x")}},
		{"absolute", []tar.Header{dir("d/"), reg("/tmp/outside-x")}},
		{"outside top", []tar.Header{dir("d/"), reg("other/x")}},
		{"absolute symlink", []tar.Header{dir("d/"), sym("d/l", "/etc")}},
		{"escaping symlink", []tar.Header{dir("d/"), sym("d/l", "../../outside")}},
		{"write through symlink", []tar.Header{dir("d/"), sym("d/l", "."), reg("d/l/../../../outside/x")}},
		{"escaping hard link", []tar.Header{dir("d/"), hard("d/h", "../outside/secret")}},
		{"device", []tar.Header{dir("d/"), {Name: "d/null", Typeflag: tar.TypeChar}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng.tar = craft(t, c.entries...)
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			os.Mkdir(outside, 0o755)
			os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
			dest := filepath.Join(base, "in", "dest")
			os.MkdirAll(filepath.Dir(dest), 0o755)
			err := ws.Download(ctx, "d", dest)
			require.Error(t, err, "download succeeded")
			var got []string
			filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
				if rel, _ := filepath.Rel(base, p); !strings.HasPrefix(rel, "in") && rel != "." {
					got = append(got, rel)
				}
				return nil
			})
			if strings.Join(got, ",") != "outside,outside/secret" {
				t.Errorf("outside the destination: %v (err %v)", got, err)
			}
			_, serr := os.Stat("/tmp/outside-x")
			assert.ErrorIs(t, serr, os.ErrNotExist, "wrote /tmp/outside-x")
		})
	}
}

func TestToken(t *testing.T) {
	ctx := t.Context()
	srv := httptest.NewServer(api.NewServer(localEngine, api.Options{}).Handler(api.ListenerOptions{Token: "tok"}))
	defer srv.Close()
	if _, err := client.Dial(ctx, srv.URL); !client.IsUnauthorized(err) {
		t.Errorf("dial without token: %v", err)
	}
	if _, err := client.Dial(ctx, srv.URL, client.WithToken("nope")); !client.IsUnauthorized(err) {
		t.Errorf("dial with a wrong token: %v", err)
	}
	c, err := client.Dial(ctx, srv.URL, client.WithToken("tok"))
	require.NoError(t, err)
	_, err = c.Projects(ctx)
	assert.NoError(t, err)
}

func TestDialErrors(t *testing.T) {
	ctx := t.Context()
	for _, addr := range []string{"ftp://x", "unix://", "http://h/with/path", "unix:///nonexistent/sock"} {
		_, err := client.Dial(ctx, addr)
		assert.Error(t, err, "Dial(%q) succeeded", addr)
	}
	// A server that is not layerfsd.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"api": "v0"}`))
	}))
	defer srv.Close()
	if _, err := client.Dial(ctx, srv.URL); err == nil || !strings.Contains(err.Error(), "v0") {
		t.Errorf("Dial to a v0 server: %v", err)
	}
}

// TestAbsoluteWorkspacePaths: a leading "/" names the workspace root (as
// docker cp reads a container path) in both directions and in every call
// that takes a workspace path; ".." that would leave the root is refused.
func TestAbsoluteWorkspacePaths(t *testing.T) {
	ctx := t.Context()
	c := dial(t)
	ws, _ := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: project(t, c), Branch: "main"})
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "b.txt"), []byte("B"), 0o644)
	one := filepath.Join(src, "one.txt")
	os.WriteFile(one, []byte("one"), 0o644)
	require.NoError(t, ws.Upload(ctx, one, "/dir/one.txt"), "upload to an absolute path")
	require.NoError(t, ws.Upload(ctx, src, "/tree"), "upload of a tree to an absolute path")
	require.NoError(t, ws.WriteFile(ctx, "//dir/two.txt", []byte("two"), 0o644), "write to an absolute path")
	for p, want := range map[string]string{"dir/one.txt": "one", "/dir/one.txt": "one", "/dir/two.txt": "two", "/tree/sub/b.txt": "B", "/tree/../dir/one.txt": "one"} {
		if b, err := ws.ReadFile(ctx, p); err != nil || string(b) != want {
			t.Errorf("read %s = %q, %v; want %q", p, b, err, want)
		}
	}
	if fi, err := ws.Stat(ctx, "/tree/sub"); err != nil || fi.Type != "dir" || fi.Path != "tree/sub" {
		t.Errorf("stat /tree/sub: %+v, %v", fi, err)
	}
	if l, err := ws.ListAll(ctx, "/", false); err != nil || len(l) != 2 {
		t.Errorf("list of /: %+v, %v; want dir and tree", l, err)
	}
	dst := t.TempDir()
	require.NoError(t, ws.Download(ctx, "/dir/one.txt", dst), "download from an absolute path")
	if b, _ := os.ReadFile(filepath.Join(dst, "one.txt")); string(b) != "one" {
		t.Errorf("downloaded one.txt = %q", b)
	}
	for _, p := range []string{"/../x", "../x", "/a/../../x"} {
		assert.Error(t, ws.WriteFile(ctx, p, []byte("x"), 0o644), "write to %s above the root was accepted", p)
		assert.Error(t, ws.Upload(ctx, src, p), "upload to %s above the root was accepted", p)
		assert.Error(t, ws.Download(ctx, p, t.TempDir()), "download of %s above the root was accepted", p)
	}
}
