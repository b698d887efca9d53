package verifier_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/cells"
	"layerfs.dev/layerfs/internal/verifier"
)

// bashRunner runs bodies with the host's bash in a directory: the tests'
// stand-in for a sandbox (the bench's runner runs them in one).
type bashRunner struct{ dir string }

func (r bashRunner) Run(ctx context.Context, body string) (string, int, error) {
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", body)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), exit.ExitCode(), nil
	}
	return out.String(), 0, err
}

func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH", tool)
		}
	}
}

// endState writes c's base into a fresh directory and runs c's body there
// the way the harness does, giving the end state a correct run leaves.
func endState(t *testing.T, c cells.Cell) string {
	t.Helper()
	dir := t.TempDir()
	ctx := t.Context()
	if err := c.WriteBase(ctx, dir); err != nil {
		if errors.Is(err, cells.ErrUnavailable) {
			t.Skipf("base: %v", err)
		}
		t.Fatal(err)
	}
	r := bashRunner{dir}
	if err := cells.Eligible(ctx, r, c); err != nil {
		t.Skipf("not runnable here: %v", err)
	}
	if _, code, err := r.Run(ctx, cells.Wrap(c.Body)); err != nil || code != 0 {
		t.Fatalf("body: exit %d, %v", code, err)
	}
	return dir
}

// clone copies a correct end state so that each wrong state starts from it.
func clone(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "ws")
	out, err := exec.Command("cp", "-a", "--reflink=auto", src, dst).CombinedOutput()
	require.NoError(t, err, "cp: %s", out)
	return dst
}

func verify(t *testing.T, dir string, c cells.Cell) error {
	t.Helper()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	return verifier.Verify(t.Context(), root.FS(), c, bashRunner{dir})
}

// mutation is a deliberately wrong end state and the line that must report
// it. apply returns the function that undoes it, so that one correct end
// state serves every mutation (copying it each time is slow on a loaded
// two-core machine).
type mutation struct {
	name  string
	apply func(t *testing.T, dir string) (undo func())
	want  string // a line of the error must start with this
}

// mutations derives the wrong states for e: one missing file, one byte
// changed, a wrong size and an extra file next to an expected one (for C03,
// whose expectation is an empty workspace, a leftover file and an extra one).
func mutations(e cells.Expectation) []mutation {
	opaque := func(p string) bool {
		for _, o := range e.Opaque {
			if strings.HasPrefix(p, o+"/") {
				return true
			}
		}
		return false
	}
	dirs := map[string]bool{".": true}
	var files []cells.Entry
	for _, en := range e.Entries {
		for d := path.Dir(en.Path); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		if en.Kind == cells.File && en.Content.Match != cells.MatchAny && !opaque(en.Path) {
			files = append(files, en)
		}
	}
	var ms []mutation
	var leftovers []string
	for _, p := range e.Absent {
		if dirs[path.Dir(p)] {
			leftovers = append(leftovers, p)
		}
	}
	if len(leftovers) > 0 {
		p := leftovers[len(leftovers)/2]
		ms = append(ms, mutation{"leftover " + p, func(t *testing.T, dir string) func() { return create(t, dir, p) }, p + ": still present"})
	}
	ms = append(ms, mutation{"extra file at the root", func(t *testing.T, dir string) func() { return create(t, dir, "extra") }, "extra: unexpected file"})
	if len(files) == 0 {
		return ms
	}
	f := files[len(files)/2]
	extra := path.Join(path.Dir(f.Path), "unexpected-extra")
	ms = append(ms,
		mutation{"missing " + f.Path, func(t *testing.T, dir string) func() { return remove(t, dir, f.Path) }, f.Path + ": missing"},
		mutation{"wrong size " + f.Path, func(t *testing.T, dir string) func() { return resize(t, dir, f.Path) }, f.Path + ": "},
		mutation{"extra file " + extra, func(t *testing.T, dir string) func() { return create(t, dir, extra) }, extra + ": unexpected file"},
	)
	for i := range files {
		if g := files[(len(files)/2+i)%len(files)]; g.Content.Size > 0 {
			ms = append(ms, mutation{"one byte changed in " + g.Path, func(t *testing.T, dir string) func() { return flip(t, dir, g.Path, g.Content.Size/2) }, g.Path + ": "})
			break
		}
	}
	return ms
}

func create(t *testing.T, dir, p string) (undo func()) {
	t.Helper()
	write(t, dir, p, []byte("x\n"))
	return func() { require.NoError(t, os.Remove(filepath.Join(dir, p))) }
}

func write(t *testing.T, dir, p string, b []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, p), b, 0o644))
}

// remove renames the file aside, so that undo restores the very same file.
func remove(t *testing.T, dir, p string) (undo func()) {
	t.Helper()
	aside := filepath.Join(filepath.Dir(dir), "aside")
	require.NoError(t, os.Rename(filepath.Join(dir, p), aside))
	return func() { require.NoError(t, os.Rename(aside, filepath.Join(dir, p))) }
}

// resize makes the file one byte shorter, or one byte long if it was empty.
func resize(t *testing.T, dir, p string) (undo func()) {
	t.Helper()
	name := filepath.Join(dir, p)
	info, err := os.Stat(name)
	require.NoError(t, err)
	size := info.Size()
	if size == 0 {
		require.NoError(t, os.Truncate(name, 1))
		return func() { require.NoError(t, os.Truncate(name, 0)) }
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	require.NoError(t, err)
	last := make([]byte, 1)
	_, err = f.ReadAt(last, size-1)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size-1))
	require.NoError(t, f.Close())
	return func() {
		f, err := os.OpenFile(name, os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteAt(last, size-1)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
}

func flip(t *testing.T, dir, p string, off int64) (undo func()) {
	t.Helper()
	xor := func() {
		f, err := os.OpenFile(filepath.Join(dir, p), os.O_RDWR, 0)
		require.NoError(t, err)
		b := make([]byte, 1)
		_, err = f.ReadAt(b, off)
		require.NoError(t, err)
		b[0] ^= 0x01
		_, err = f.WriteAt(b, off)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	xor()
	return xor
}

func hasLine(err error, prefix string) bool {
	for _, line := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// TestCells runs every cell's body natively, checks that the end state
// verifies, then that each wrong state fails naming its path.
func TestCells(t *testing.T) {
	requireTools(t, "bash", "cp")
	for _, c := range cells.All() {
		t.Run(c.ID, func(t *testing.T) {
			t.Parallel() // the bodies are spawn-bound; two at a time on two cores
			dir := endState(t, c)
			require.NoError(t, verify(t, dir, c), "correct end state fails")
			for _, m := range mutations(c.Expect()) {
				t.Run(m.name, func(t *testing.T) {
					undo := m.apply(t, dir)
					err := verify(t, dir, c)
					undo()
					require.Error(t, err, "wrong state passes; want a line starting %q", m.want)
					assert.ErrorIs(t, err, verifier.ErrMismatch, "error does not match ErrMismatch")
					if !hasLine(err, m.want) {
						t.Errorf("no line starting %q in:\n%v", m.want, err)
					}
				})
			}
			require.NoError(t, verify(t, dir, c), "end state fails after the mutations were undone")
		})
	}
}

// materialize writes the end state an expectation describes, straight from
// it (files of exact bytes or zeros, directories, links); TestCells shows
// that the bodies produce the same states.
func materialize(t *testing.T, e cells.Expectation) string {
	t.Helper()
	dir := t.TempDir()
	for _, en := range e.Entries {
		p := filepath.Join(dir, filepath.FromSlash(en.Path))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		switch {
		case en.Kind == cells.Dir:
			require.NoError(t, os.MkdirAll(p, 0o755))
		case en.Kind == cells.Symlink:
			require.NoError(t, os.Symlink(en.Target, p))
		case en.Content.Match == cells.MatchBytes:
			require.NoError(t, os.WriteFile(p, en.Content.Data, 0o644))
		case en.Content.Match == cells.MatchZeros:
			require.NoError(t, os.WriteFile(p, nil, 0o644))
			require.NoError(t, os.Truncate(p, en.Content.Size))
		default:
			t.Fatalf("cannot materialize %s", en.Path)
		}
	}
	return dir
}

// TestMessages pins the exact wording the bench's tables and docs quote.
func TestMessages(t *testing.T) {
	requireTools(t, "bash", "cp")
	c01, c04, c06 := mustCell(t, "C01"), mustCell(t, "C04"), mustCell(t, "C06")
	tests := []struct {
		cell  cells.Cell
		apply func(t *testing.T, dir string) (undo func())
		want  string
	}{
		{c01, func(t *testing.T, d string) func() { return remove(t, d, "f17") }, "f17: missing"},
		{c01, func(t *testing.T, d string) func() {
			write(t, d, "f3", []byte("4\n"))
			return func() { write(t, d, "f3", []byte("3\n")) }
		}, `f3: content "4\n", want "3\n"`},
		{c04, func(t *testing.T, d string) func() { return create(t, d, "d3/d4/f11") }, "d3/d4/f11: unexpected file"},
		{c04, func(t *testing.T, d string) func() { return remove(t, d, "d3/d4") }, "d3/d4: missing (and the 10 expected entries under it)"},
		{c04, func(t *testing.T, d string) func() {
			require.NoError(t, os.Mkdir(filepath.Join(d, "d11"), 0o755))
			return func() { require.NoError(t, os.Remove(filepath.Join(d, "d11"))) }
		}, "d11: unexpected directory"},
		{c06, func(t *testing.T, d string) func() { return resize(t, d, "big") }, "big: size 67108863, want 67108864"},
		{c06, func(t *testing.T, d string) func() { return flip(t, d, "big", 5<<20) }, "big: byte 5242880 is 0x01, want 64 MiB of zeros"},
		{c06, func(t *testing.T, d string) func() {
			undo := remove(t, d, "big")
			require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(d, "big")))
			return func() { require.NoError(t, os.Remove(filepath.Join(d, "big"))); undo() }
		}, "big: is a symlink, want a regular file"},
	}
	states := map[string]string{}
	for _, c := range []cells.Cell{c01, c04, c06} {
		states[c.ID] = materialize(t, c.Expect())
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			d := states[tc.cell.ID]
			undo := tc.apply(t, d)
			err := verify(t, d, tc.cell)
			undo()
			if err == nil || !hasLine(err, tc.want) {
				t.Fatalf("got %v\nwant a line %q", err, tc.want)
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != 1 {
				t.Errorf("got %d problems, want 1:\n%v", n, err)
			}
		})
	}
}

// The C09-C11 expectations rest on the base's hash, not on a stored copy.
func TestBaseCells(t *testing.T) {
	c09, c11 := mustCell(t, "C09"), mustCell(t, "C11")
	dir := t.TempDir()
	require.NoError(t, c09.WriteBase(t.Context(), dir))
	require.NoError(t, verify(t, dir, c09), "untouched base fails C09")
	err := verify(t, dir, c11)
	if err == nil || !hasLine(err, "big: byte 0 is 0x") || !hasLine(err, "big: still holds the content") {
		t.Fatalf("untouched base against C11: got %v", err)
	}
	_ = flip(t, dir, "big", 12345)
	if err := verify(t, dir, c09); err == nil || !hasLine(err, "big: content blake3 ") {
		t.Fatalf("changed base against C09: got %v", err)
	}
}

// C12's in-sandbox checks catch what the file tree cannot show.
func TestGitChecks(t *testing.T) {
	requireTools(t, "bash", "git", "cp")
	c := mustCell(t, "C12")
	dir := endState(t, c)
	tests := []struct {
		name, body, want string
	}{
		{"untracked in HEAD", `git rm -q --cached f5 && git -c user.name=x -c user.email=x@x commit -qm drop`, ".git: `git ls-files | wc -l` printed \"99\", want \"100\""},
		{"corrupt object", `chmod -R u+w .git/objects && for f in .git/objects/??/*; do printf 'garbage' > "$f"; break; done`, ".git: `git fsck` exited"},
		{"work tree differs from HEAD", `echo 9 > f7 && git add f7 && git -c user.name=x -c user.email=x@x commit -qm x && echo 7 > f7`, ".git: `git diff HEAD` exited 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := clone(t, dir)
			if _, code, err := (bashRunner{d}).Run(t.Context(), tc.body); err != nil || code != 0 {
				t.Fatalf("mutate: exit %d, %v", code, err)
			}
			err := verify(t, d, c)
			if err == nil || !hasLine(err, tc.want) {
				t.Fatalf("got %v\nwant a line starting %q", err, tc.want)
			}
		})
	}
}

func TestNoRunner(t *testing.T) {
	c := mustCell(t, "C12")
	err := verifier.Verify(t.Context(), os.DirFS(t.TempDir()), c, nil)
	if err == nil || !strings.Contains(err.Error(), "no sandbox runner") {
		t.Fatalf("got %v, want a failure naming the missing runner", err)
	}
	if !hasLine(err, "f1: missing") || !hasLine(err, ".git: missing") {
		t.Errorf("empty workspace: got %v", err)
	}
}

func mustCell(t *testing.T, id string) cells.Cell {
	t.Helper()
	c, err := cells.ByID(id)
	require.NoError(t, err)
	return c
}

// Entries listed inside an opaque directory are checked; the rest of it is not.
func TestOpaque(t *testing.T) {
	var b cells.Builder
	e := b.Opaque(".git").File(".git/sub/out", cells.Text("ok\n")).File("a", cells.Text("a\n")).Build()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, ".git/sub"), 0o755))
	write(t, dir, ".git/sub/out", []byte("ok\n"))
	write(t, dir, ".git/anything", []byte("whatever"))
	write(t, dir, "a", []byte("a\n"))
	fsys := os.DirFS(dir)
	require.NoError(t, verifier.Check(t.Context(), fsys, e, nil), "correct state")
	write(t, dir, ".git/sub/out", []byte("no\n"))
	if err := verifier.Check(t.Context(), fsys, e, nil); err == nil || !hasLine(err, `.git/sub/out: content "no\n", want "ok\n"`) {
		t.Errorf("changed entry in an opaque dir: %v", err)
	}
	require.NoError(t, os.RemoveAll(filepath.Join(dir, ".git/sub")))
	if err := verifier.Check(t.Context(), fsys, e, nil); err == nil || err.Error() != ".git/sub/out: missing" {
		t.Errorf("missing entry in an opaque dir: %v", err)
	}
}
