package cells

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The bodies, titles and bases must be exactly those of CELLS.md, read from
// the shared design directory beside the checkout (where CI puts it too).
func TestTwelveMatchCELLSmd(t *testing.T) {
	spec, err := os.ReadFile(filepath.Join("..", "..", "shared", "design", "CELLS.md"))
	if err != nil {
		t.Skipf("CELLS.md not beside the checkout: %v", err)
	}
	row := regexp.MustCompile("(?m)^\\| (C\\d\\d) \\| ([^|]+) \\| (.+) \\| (empty|`big`: 64 MiB) \\|$")
	code := regexp.MustCompile("`((?:[^`])*)`")
	want := map[string]Cell{}
	for _, m := range row.FindAllStringSubmatch(string(spec), -1) {
		id, title, body, base := m[1], m[2], m[3], m[4]
		c := Cell{ID: id, Title: title}
		spans := code.FindAllStringSubmatch(body, -1)
		if len(spans) != 1 {
			t.Fatalf("%s: cannot read the body %q", id, body)
		}
		b := strings.ReplaceAll(spans[0][1], `\|`, "|")
		if prev, _, ok := strings.Cut(body, ", then "); ok {
			b = want[prev].Body + "; " + b
		}
		c.Body = b
		if base != "empty" {
			c.Base.Name = BigName
		}
		want[id] = c
	}
	got := Twelve()
	if len(want) != 12 || len(got) != 12 {
		t.Fatalf("CELLS.md has %d cells, Twelve %d; want 12", len(want), len(got))
	}
	for _, c := range got {
		w := want[c.ID]
		assert.Equal(t, w.Body, c.Body, "%s body", c.ID)
		assert.Equal(t, w.Title, c.Title, "%s title", c.ID)
		assert.Equal(t, w.Base.Name, c.Base.Name, "%s base", c.ID)
	}
}

func TestCellsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range All() {
		if seen[c.ID] {
			t.Errorf("duplicate id %s", c.ID)
		}
		seen[c.ID] = true
		if c.Body == "" || c.Title == "" || c.Expect == nil {
			t.Errorf("%s: body, title and expectation are required", c.ID)
			continue
		}
		if (c.Base.Name == "") != (c.Base.Write == nil) {
			t.Errorf("%s: a base needs both a name and a writer", c.ID)
		}
		e := c.Expect()
		paths := map[string]bool{}
		for _, en := range e.Entries {
			if paths[en.Path] {
				t.Errorf("%s: %s expected twice", c.ID, en.Path)
			}
			paths[en.Path] = true
			if en.Path == "." || strings.HasPrefix(en.Path, "..") || strings.HasPrefix(en.Path, "/") {
				t.Errorf("%s: entry path %q is not inside the workspace", c.ID, en.Path)
			}
		}
		for _, p := range e.Absent {
			if paths[p] {
				t.Errorf("%s: %s is both expected and absent", c.ID, p)
			}
		}
		if len(e.Entries) == 0 && len(e.Absent) == 0 && c.ID != "C03" {
			t.Errorf("%s: expects nothing", c.ID)
		}
	}
	for _, id := range []string{"c01", "C12", "X01"} {
		_, err := ByID(id)
		assert.NoError(t, err)
	}
	_, err := ByID("C13")
	assert.ErrorIs(t, err, ErrUnknown, "ByID(C13)")
	if got, err := Select(nil); err != nil || len(got) != 12 {
		t.Errorf("Select(nil) = %d cells, %v; want the twelve", len(got), err)
	}
}

type bash struct{ dir string }

func (b bash) Run(ctx context.Context, body string) (string, int, error) {
	cmd := exec.CommandContext(ctx, "bash", "-c", body)
	cmd.Dir = b.dir
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode(), nil
	}
	return string(out), 0, err
}

func TestEligible(t *testing.T) {
	r := bash{t.TempDir()}
	ok := Cell{ID: "T1", Probe: needs("bash", "cat")}
	assert.NoError(t, Eligible(t.Context(), r, ok), "bash and cat")
	missing := Cell{ID: "T2", Probe: needs("bash", "no-such-tool-here")}
	err := Eligible(t.Context(), r, missing)
	if !errors.Is(err, ErrIneligible) || !strings.Contains(err.Error(), "no-such-tool-here is not on the sandbox's PATH") {
		t.Errorf("missing tool: got %v", err)
	}
}

// The repository base is the same, commit for commit, wherever it is built:
// the ids below are pinned.
func TestRepoDeterministic(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not on PATH")
	}
	heads := func() string {
		dir := t.TempDir()
		require.NoError(t, writeRepo(t.Context(), dir))
		cmd := exec.Command("git", "rev-parse", "main", "feature", "HEAD")
		cmd.Dir = dir
		out, err := cmd.Output()
		require.NoError(t, err)
		return string(out)
	}
	a, b := heads(), heads()
	if a != b {
		t.Fatalf("two builds differ:\n%s\n%s", a, b)
	}
	const want = "4dd7899f8bb9f616798d6d544121e179d798d003\n3e6fa4872f6770bdc0622b615517f9acfd73798d\n4dd7899f8bb9f616798d6d544121e179d798d003\n"
	assert.Equal(t, want, a, "heads (main, feature, HEAD)")
}

func TestTarballDeterministic(t *testing.T) {
	a, err := tarball()
	require.NoError(t, err)
	b, _ := tarball()
	if !bytes.Equal(a, b) {
		t.Fatal("two archives differ")
	}
	dir := t.TempDir()
	require.NoError(t, writeTarball(t.Context(), dir))
	got, err := os.ReadFile(filepath.Join(dir, "src.tar.gz"))
	if err != nil || !bytes.Equal(got, a) {
		t.Fatalf("written archive differs from the expectation's (%v)", err)
	}
}
