package commit

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store"
)

// TestMergeRealHistory checks Merge against git on a real history, by
// hand (it is not part of CI): LAYERFS_MERGE_REAL_REPO names a git
// repository (a bare one will do; it is cloned, never written), whose
// merge commits (with one merge base) and pairs of concurrent pull
// requests (refs/pull/N/head forked from the first-parent line of master
// at most 20 commits apart, both changing a file in common) are the cases.
// Each case's three commits are built as LayerFS trees and merged by
// Merge, and by git merge-tree --write-tree: where git merges cleanly
// Merge must give the same tree, where git conflicts Merge must conflict
// on the same paths.
//
// The cases are the candidates in an order set by a hash of their names,
// the first 47 git merges cleanly and the first 13 it conflicts on
// (LAYERFS_MERGE_REAL_CASES=C,K changes the numbers; "all" takes every
// candidate). They run twice: with one time on every entry of the three
// trees, and with a time per side (each tree as a fresh checkout
// leaves it: every entry of base, ours and theirs at that tree's own
// time). git's directory rename detection is off
// (merge.directoryRenames=false; Merge finds no renamed directories):
// the log says in how many cases git's default reads differently.
//
//	LAYERFS_MERGE_REAL_REPO=/path/to/repo.git go test -run TestMergeRealHistory -v ./internal/commit/
func TestMergeRealHistory(t *testing.T) {
	src := os.Getenv("LAYERFS_MERGE_REAL_REPO")
	if src == "" {
		t.Skip("a check by hand: LAYERFS_MERGE_REAL_REPO names the git repository of its cases")
	}
	repo := t.TempDir()
	run := gitIn(t, "git", repo)
	git := func(args ...string) string { return strings.TrimSpace(string(run(nil, args...))) }
	// mergeBases are the merge bases of two commits; none for unrelated
	// histories (git merge-base fails).
	mergeBases := func(a, b string) []string {
		cmd := exec.Command("git", "merge-base", "--all", a, b)
		cmd.Dir = repo
		out, _ := cmd.Output()
		return strings.Fields(string(out))
	}
	out, err := exec.Command("git", "clone", "-q", "--mirror", src, repo).CombinedOutput()
	require.NoError(t, err, "clone %s: %s", src, out)

	cands := realCandidates(git, mergeBases)
	var lines bytes.Buffer
	for _, c := range cands {
		fmt.Fprintf(&lines, "%s %s\n", c.ours, c.theirs)
	}
	gitOut := parseMergeTree(t, run(lines.Bytes(), "-c", "merge.directoryRenames=false", "merge-tree", "--write-tree", "--stdin", "-z"))
	gitDirs := parseMergeTree(t, run(lines.Bytes(), "merge-tree", "--write-tree", "--stdin", "-z"))
	require.Len(t, gitOut, len(cands))
	wantClean, wantConflicted := 47, 13
	if s := os.Getenv("LAYERFS_MERGE_REAL_CASES"); s == "all" {
		wantClean, wantConflicted = len(cands), len(cands)
	} else if s != "" {
		_, err := fmt.Sscanf(s, "%d,%d", &wantClean, &wantConflicted)
		require.NoError(t, err, "LAYERFS_MERGE_REAL_CASES=%q: want C,K or all", s)
	}
	var cases []realCase
	var nClean, nConflicted, dirRenames int
	for i, c := range cands {
		c.git = gitOut[i]
		switch {
		case c.git.clean && nClean < wantClean:
			nClean++
		case !c.git.clean && nConflicted < wantConflicted:
			nConflicted++
		default:
			continue
		}
		if gitDirs[i].clean != c.git.clean || gitDirs[i].tree != c.git.tree {
			dirRenames++
		}
		cases = append(cases, c)
	}
	t.Logf("%s: %d candidates, %d cases: %d git merges cleanly, %d it conflicts on; in %d of them git's directory rename detection reads differently",
		src, len(cands), len(cases), nClean, nConflicted, dirRenames)

	ctx := t.Context()
	db := newDB(t)
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	defer b.Abort()
	p := newPending(b, db)
	ld := newGitLoader(t, repo, p)
	defer ld.close()
	for _, times := range []string{"same times", "times per side"} {
		t.Run(strings.ReplaceAll(times, " ", "-"), func(t *testing.T) {
			var cleanSame, cleanConflicts, cleanDiffers, confSame, confClean, confDiffers int
			for _, c := range cases {
				stamps := [3]int64{1.5e18, 1.5e18, 1.5e18}
				if times == "times per side" {
					stamps = [3]int64{1.5e18, 1.6e18, 1.7e18}
				}
				var trees [3]store.ID
				for j, commit := range []string{c.base, c.ours, c.theirs} {
					trees[j] = ld.tree(git("rev-parse", commit+"^{tree}"), stamps[j])
				}
				res, err := Merge(ctx, p, p, trees[0], trees[1], trees[2], nil)
				require.NoError(t, err, c.name)
				got := conflictPaths(res.Conflicts)
				switch {
				case c.git.clean && res.Clean && gitTreeID(t, p, res.Tree) == c.git.tree:
					cleanSame++
				case c.git.clean && res.Clean:
					cleanDiffers++
					t.Errorf("%s: merged tree differs from git's:\n%s", c.name, git("diff", "--stat", c.git.tree, ld.gitTree(t, p, res.Tree)))
				case c.git.clean:
					cleanConflicts++
					t.Errorf("%s: git merges cleanly, Merge conflicts at %v", c.name, describe(res.Conflicts))
				case !res.Clean && slices.Equal(got, c.git.paths):
					confSame++
				case res.Clean:
					confClean++
					t.Errorf("%s: git conflicts at %v, Merge merges cleanly", c.name, c.git.paths)
				default:
					confDiffers++
					t.Errorf("%s: Merge conflicts at %v, git at %v", c.name, describe(res.Conflicts), c.git.paths)
				}
			}
			t.Logf("%s: %d clean by git: %d the same tree, %d conflicted, %d another tree; %d conflicted by git: %d on the same paths, %d clean, %d on other paths",
				times, nClean, cleanSame, cleanConflicts, cleanDiffers, nConflicted, confSame, confClean, confDiffers)
		})
	}
}

// describe names each conflict's paths and kind.
func describe(cs []Conflict) []string {
	var out []string
	for i := range cs {
		out = append(out, strings.Join(cs[i].Paths(), ",")+" ("+string(cs[i].Kind)+")")
	}
	return out
}

// realCase is a merge of a real history: three commits.
type realCase struct {
	name               string
	base, ours, theirs string
	git                gitResult
	key                [20]byte // orders the candidates
}

// realCandidates are the merges of the repository's history with one
// merge base, and pairs of concurrent pull requests (see
// TestMergeRealHistory), ordered by a hash of their names.
func realCandidates(git func(args ...string) string, mergeBases func(a, b string) []string) []realCase {
	var out []realCase
	seen := map[string]bool{}
	add := func(name, ours, theirs string) {
		if seen[ours+theirs] || ours == theirs {
			return
		}
		seen[ours+theirs] = true
		bases := mergeBases(ours, theirs)
		if len(bases) != 1 || bases[0] == ours || bases[0] == theirs {
			return // a criss-cross, or a fast-forward
		}
		out = append(out, realCase{name: name, base: bases[0], ours: ours, theirs: theirs, key: sha1.Sum([]byte(name))})
	}
	for _, l := range strings.Split(git("rev-list", "--merges", "--parents", "--all"), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 {
			add("merge "+f[0][:10], f[1], f[2])
		}
	}
	master := git("rev-parse", "HEAD")
	first := map[string]int{}
	for i, c := range strings.Fields(git("rev-list", "--first-parent", master)) {
		first[c] = i
	}
	type pr struct {
		ref, head, fork string
		files           []string
	}
	var prs []pr
	for _, l := range strings.Split(git("for-each-ref", "refs/pull/*/head", "--format=%(refname) %(objectname)"), "\n") {
		ref, head, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		forks := mergeBases(head, master)
		if len(forks) != 1 {
			continue
		}
		fork := forks[0]
		if _, on := first[fork]; !on || fork == head {
			continue
		}
		files := strings.Fields(git("diff", "--name-only", fork, head))
		prs = append(prs, pr{strings.TrimSuffix(strings.TrimPrefix(ref, "refs/pull/"), "/head"), head, fork, files})
	}
	slices.SortFunc(prs, func(a, b pr) int { return strings.Compare(a.ref, b.ref) })
	for i, a := range prs {
		for _, b := range prs[i+1:] {
			d := first[a.fork] - first[b.fork]
			if d > 20 || d < -20 || !slices.ContainsFunc(a.files, func(f string) bool { return slices.Contains(b.files, f) }) {
				continue
			}
			add("pulls "+a.ref+" and "+b.ref, a.head, b.head)
		}
	}
	slices.SortFunc(out, func(a, b realCase) int { return bytes.Compare(a.key[:], b.key[:]) })
	return out
}

// gitLoader builds git trees as LayerFS trees, each entry with one time.
type gitLoader struct {
	t     *testing.T
	repo  string
	w     *pending
	ch    *Chunker
	cat   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	trees map[string]store.ID // git tree id and time -> tree
	blobs map[string]*store.Entry
}

func newGitLoader(t *testing.T, repo string, w *pending) *gitLoader {
	ch, err := NewChunker(DefaultParams)
	require.NoError(t, err)
	cat := exec.Command("git", "cat-file", "--batch")
	cat.Dir = repo
	in, err := cat.StdinPipe()
	require.NoError(t, err)
	out, err := cat.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cat.Start())
	return &gitLoader{t: t, repo: repo, w: w, ch: ch, cat: cat, in: in, out: bufio.NewReader(out),
		trees: map[string]store.ID{}, blobs: map[string]*store.Entry{}}
}

func (l *gitLoader) close() {
	l.in.Close()
	l.cat.Wait()
}

// object reads a git object's bytes.
func (l *gitLoader) object(oid string) []byte {
	_, err := fmt.Fprintln(l.in, oid)
	require.NoError(l.t, err)
	hdr, err := l.out.ReadString('\n')
	require.NoError(l.t, err)
	f := strings.Fields(hdr)
	require.Len(l.t, f, 3, "cat-file %s: %q", oid, hdr)
	n, err := strconv.Atoi(f[2])
	require.NoError(l.t, err)
	data := make([]byte, n+1)
	_, err = io.ReadFull(l.out, data)
	require.NoError(l.t, err)
	return data[:n]
}

// tree is git's tree oid as a LayerFS tree with every entry at time ns.
func (l *gitLoader) tree(oid string, ns int64) store.ID {
	key := oid + "@" + strconv.FormatInt(ns, 10)
	if id, ok := l.trees[key]; ok {
		return id
	}
	data := l.object(oid)
	tr := &store.Tree{}
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		nul := bytes.IndexByte(data, 0)
		mode, name, sum := string(data[:sp]), string(data[sp+1:nul]), fmt.Sprintf("%x", data[nul+1:nul+21])
		data = data[nul+21:]
		e := store.Entry{Name: name, MtimeNs: ns}
		switch mode {
		case "40000":
			e.Type, e.Mode, e.ObjectKind, e.Object = store.TypeDir, 0o755, store.KindTree, l.tree(sum, ns)
		case "120000":
			target := string(l.object(sum))
			e.Type, e.Mode, e.Target, e.Size = store.TypeSymlink, 0o777, target, int64(len(target))
		case "100644", "100755":
			b := l.blobs[sum]
			if b == nil {
				content := l.object(sum)
				obj, kind, err := storeBytes(l.w, l.ch, content)
				require.NoError(l.t, err)
				b = &store.Entry{Object: obj, ObjectKind: kind, Size: int64(len(content))}
				l.blobs[sum] = b
			}
			e.Type, e.Object, e.ObjectKind, e.Size, e.Mode = store.TypeFile, b.Object, b.ObjectKind, b.Size, 0o644
			if mode == "100755" {
				e.Mode = 0o755
			}
		default:
			continue // a submodule: not a file LayerFS holds
		}
		tr.Entries = append(tr.Entries, e)
	}
	slices.SortFunc(tr.Entries, func(a, b store.Entry) int { return strings.Compare(a.Name, b.Name) })
	id, err := l.w.PutTree(tr)
	require.NoError(l.t, err)
	l.trees[key] = id
	return id
}

// gitTree writes a LayerFS tree into the repository as a git tree (for a
// diff with git's) and returns its id.
func (l *gitLoader) gitTree(t *testing.T, r Reader, id store.ID) string {
	tr, err := r.Tree(t.Context(), id)
	require.NoError(t, err)
	var b strings.Builder
	for i := range tr.Entries {
		e := &tr.Entries[i]
		switch e.Type {
		case store.TypeDir:
			fmt.Fprintf(&b, "040000 tree %s\t%s\n", l.gitTree(t, r, e.Object), e.Name)
		case store.TypeSymlink:
			fmt.Fprintf(&b, "120000 blob %s\t%s\n", l.hashObject([]byte(e.Target)), e.Name)
		default:
			data, err := readContent(t.Context(), r, e)
			require.NoError(t, err)
			fmt.Fprintf(&b, "%o blob %s\t%s\n", 0o100000|(e.Mode&0o755|0o644), l.hashObject(data), e.Name)
		}
	}
	return l.run([]byte(b.String()), "mktree")
}

func (l *gitLoader) hashObject(data []byte) string {
	return l.run(data, "hash-object", "-w", "--stdin")
}

func (l *gitLoader) run(stdin []byte, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = l.repo
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.Output()
	require.NoError(l.t, err, "git %v", args)
	return strings.TrimSpace(string(out))
}
