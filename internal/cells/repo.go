package cells

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// The repository base of the git cells: a small Go-like source tree with a
// linear history on main and a feature branch, generated in Go and fed to
// git fast-import, so every byte, date and commit id is the same on every
// build (there is no clock and no user configuration involved).
const (
	repoMainCommits    = 36
	repoFeatureFrom    = 30 // feature forks from main's 30th commit
	repoFeatureCommits = 4
	repoEpoch          = 1767225600 // 2026-01-01T00:00:00Z
	repoAuthor         = "Cell Bot <cellbot@example.invalid>"
	grepToken          = "TODO(cell)"
)

type repoFile struct {
	data []byte
	exec bool
}

type repoChange struct {
	path string
	file repoFile
	del  bool
}

type repoCommit struct {
	ref     string // refs/heads/main or refs/heads/feature
	subject string
	when    int64
	changes []repoChange
}

// repoCommits returns main's commits followed by feature's.
func repoCommits() []repoCommit {
	var cs []repoCommit
	// The first commit: 12 packages of 20 files, 30 docs, 5 scripts.
	first := repoCommit{ref: "refs/heads/main", subject: "initial import", when: repoEpoch}
	first.changes = append(first.changes,
		repoChange{path: "README.md", file: repoFile{data: []byte("# cellapp\n\nA generated repository for the LayerFS git cells.\n")}},
		repoChange{path: ".gitignore", file: repoFile{data: []byte("*.tmp\n/build/\n")}},
	)
	for p := 1; p <= 12; p++ {
		for f := 1; f <= 20; f++ {
			first.changes = append(first.changes, repoChange{path: srcPath(p, f), file: repoFile{data: srcFile(p, f)}})
		}
	}
	for d := 1; d <= 30; d++ {
		first.changes = append(first.changes, repoChange{path: fmt.Sprintf("docs/guide%02d.md", d), file: repoFile{data: docFile(d)}})
	}
	for s := 1; s <= 5; s++ {
		first.changes = append(first.changes, repoChange{path: fmt.Sprintf("scripts/build%02d.sh", s), file: repoFile{data: scriptFile(s), exec: true}})
	}
	cs = append(cs, first)

	tree := map[string]repoFile{}
	apply(tree, first.changes)
	for k := 2; k <= repoMainCommits; k++ {
		c := repoCommit{ref: "refs/heads/main", subject: fmt.Sprintf("change %d: tune pkg%02d", k, k%12+1), when: repoEpoch + int64(k)*3600}
		// Each commit edits three source files; every fifth adds one and
		// every seventh removes a guide.
		for j := 0; j < 3; j++ {
			p := srcPath((k+j*5)%12+1, (k*7+j*3)%20+1)
			c.changes = append(c.changes, repoChange{path: p, file: repoFile{data: appendChange(tree[p].data, k, j)}})
		}
		if k%5 == 0 {
			c.changes = append(c.changes, repoChange{path: fmt.Sprintf("src/pkg%02d/extra%02d.go", k%12+1, k), file: repoFile{data: extraFile(k)}})
		}
		if k%7 == 0 {
			c.changes = append(c.changes, repoChange{path: fmt.Sprintf("docs/guide%02d.md", k/7*4), del: true})
		}
		apply(tree, c.changes)
		cs = append(cs, c)
	}

	// feature: forks at main's repoFeatureFrom-th commit.
	ftree := replay(cs[:repoFeatureFrom])
	for k := 1; k <= repoFeatureCommits; k++ {
		c := repoCommit{ref: "refs/heads/feature", subject: fmt.Sprintf("feature %d", k), when: repoEpoch + int64(repoMainCommits+k)*3600}
		switch k {
		case 1: // a new package
			for f := 1; f <= 20; f++ {
				c.changes = append(c.changes, repoChange{path: fmt.Sprintf("feature/flag%02d.go", f), file: repoFile{data: featureFile(f)}})
			}
		case 2: // drop a package
			for f := 1; f <= 20; f++ {
				c.changes = append(c.changes, repoChange{path: srcPath(12, f), del: true})
			}
		case 3: // edit files that main also edits, and a mode change
			for _, p := range []string{srcPath(1, 1), srcPath(4, 8), srcPath(9, 2), "README.md"} {
				c.changes = append(c.changes, repoChange{path: p, file: repoFile{data: appendChange(ftree[p].data, 100+k, 0)}})
			}
			s := "scripts/build02.sh"
			c.changes = append(c.changes, repoChange{path: s, file: repoFile{data: ftree[s].data, exec: false}})
		case 4: // a new script
			c.changes = append(c.changes, repoChange{path: "scripts/feature.sh", file: repoFile{data: scriptFile(9), exec: true}})
		}
		apply(ftree, c.changes)
		cs = append(cs, c)
	}
	return cs
}

func apply(tree map[string]repoFile, changes []repoChange) {
	for _, ch := range changes {
		if ch.del {
			delete(tree, ch.path)
		} else {
			tree[ch.path] = ch.file
		}
	}
}

// replay applies commits in order and returns the resulting tree.
func replay(cs []repoCommit) map[string]repoFile {
	t := map[string]repoFile{}
	for _, c := range cs {
		apply(t, c.changes)
	}
	return t
}

// repoTree returns the tree at the head of "main" or "feature".
func repoTree(branch string) map[string]repoFile {
	cs := repoCommits()
	if branch == "main" {
		return replay(cs[:repoMainCommits])
	}
	return replay(append(append([]repoCommit(nil), cs[:repoFeatureFrom]...), cs[repoMainCommits:]...))
}

func srcPath(p, f int) string { return fmt.Sprintf("src/pkg%02d/file%02d.go", p, f) }

func srcFile(p, f int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Package pkg%02d is generated for the LayerFS git cells.\npackage pkg%02d\n\n", p, p)
	for l := 1; l <= 12; l++ {
		fmt.Fprintf(&b, "// F%02d_%02d returns a fixed value.\nfunc F%02d_%02d() int { return %d }\n\n", f, l, f, l, p*1000+f*10+l)
		if (p+f+l)%9 == 0 {
			fmt.Fprintf(&b, "// %s: F%02d_%02d should be table-driven.\n\n", grepToken, f, l)
		}
	}
	return b.Bytes()
}

func appendChange(old []byte, k, j int) []byte {
	var b bytes.Buffer
	b.Write(old)
	fmt.Fprintf(&b, "// Change%d_%d was added by change %d.\nfunc Change%d_%d() int { return %d }\n", k, j, k, k, j, k*10+j)
	if (k+j)%3 == 0 {
		fmt.Fprintf(&b, "// %s: revisit change %d.\n", grepToken, k)
	}
	return b.Bytes()
}

func extraFile(k int) []byte {
	return fmt.Appendf(nil, "package pkg%02d\n\n// Extra%d came with change %d.\nconst Extra%d = %d\n", k%12+1, k, k, k, k)
}

func featureFile(f int) []byte {
	return fmt.Appendf(nil, "package feature\n\n// Flag%02d is a feature flag.\nconst Flag%02d = %t\n\n// %s: remove Flag%02d once it ships.\n", f, f, f%2 == 0, grepToken, f)
}

func docFile(d int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Guide %d\n\n", d)
	for l := 1; l <= 20; l++ {
		fmt.Fprintf(&b, "Step %d of guide %d: run the tool with option %d.\n", l, d, l*d)
	}
	return b.Bytes()
}

func scriptFile(s int) []byte {
	return fmt.Appendf(nil, "#!/bin/sh\n# build step %d\nset -eu\necho step %d\n", s, s)
}

// fastImport renders the history as a git fast-import stream.
func fastImport(cs []repoCommit) []byte {
	var b bytes.Buffer
	marks := map[int]int{} // commit index -> mark
	for i, c := range cs {
		mark := i + 1
		marks[i] = mark
		fmt.Fprintf(&b, "commit %s\nmark :%d\n", c.ref, mark)
		fmt.Fprintf(&b, "author %s %d +0000\ncommitter %s %d +0000\n", repoAuthor, c.when, repoAuthor, c.when)
		fmt.Fprintf(&b, "data %d\n%s\n", len(c.subject)+1, c.subject)
		switch {
		case i == repoMainCommits: // feature's first commit
			fmt.Fprintf(&b, "from :%d\n", marks[repoFeatureFrom-1])
		case i > 0:
			fmt.Fprintf(&b, "from :%d\n", marks[i-1])
		}
		for _, ch := range c.changes {
			if ch.del {
				fmt.Fprintf(&b, "D %s\n", ch.path)
				continue
			}
			mode := "100644"
			if ch.file.exec {
				mode = "100755"
			}
			fmt.Fprintf(&b, "M %s inline %s\ndata %d\n", mode, ch.path, len(ch.file.data))
			b.Write(ch.file.data)
			b.WriteByte('\n')
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// writeRepo builds the repository in dir with its work tree checked out on
// main. It runs the host's git; the cells need git in the sandbox anyway.
func writeRepo(ctx context.Context, dir string) error {
	git, err := exec.LookPath("git")
	if err != nil {
		return fmt.Errorf("%w: git is not on PATH: %w", ErrUnavailable, err)
	}
	steps := []struct {
		args  []string
		stdin []byte
	}{
		{args: []string{"init", "-q", "-b", "main"}},
		{args: []string{"fast-import", "--quiet"}, stdin: fastImport(repoCommits())},
		// No automatic gc or maintenance: it could detach and rewrite .git
		// after a body returns.
		{args: []string{"config", "gc.auto", "0"}},
		{args: []string{"config", "maintenance.auto", "false"}},
		{args: []string{"reset", "-q", "--hard", "main"}},
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, git, s.args...)
		cmd.Dir = dir
		cmd.Env = gitEnv()
		if s.stdin != nil {
			cmd.Stdin = bytes.NewReader(s.stdin)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w: %s", s.args[0], err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// gitEnv isolates the base build from the host's git configuration.
func gitEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/nonexistent",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"LC_ALL=C",
	}
}

func repoBase() Base { return Base{Name: "repo", Write: writeRepo} }

// expectTree adds a repository tree to b as the work tree, with exec bits.
func expectTree(b *Builder, tree map[string]repoFile) {
	for p, f := range tree {
		b.Executable(p, Bytes(f.data), f.exec)
	}
}

// grepOutput is what git grep -n -F TODO(cell) prints for tree.
func grepOutput(tree map[string]repoFile) string {
	paths := make([]string, 0, len(tree))
	for p := range tree {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	for _, p := range paths {
		for i, line := range strings.Split(strings.TrimSuffix(string(tree[p].data), "\n"), "\n") {
			if strings.Contains(line, grepToken) {
				b.WriteString(p + ":" + strconv.Itoa(i+1) + ":" + line + "\n")
			}
		}
	}
	return b.String()
}

// logOutput is what git log --format='%at %s' prints on main.
func logOutput() string {
	cs := repoCommits()[:repoMainCommits]
	var b strings.Builder
	for i := len(cs) - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "%d %s\n", cs[i].when, cs[i].subject)
	}
	return b.String()
}
