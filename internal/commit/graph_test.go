package commit

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store"
)

// commitCounter counts the commits read through it.
type commitCounter struct {
	db    *store.DB
	reads int
}

func (c *commitCounter) Commit(ctx context.Context, id store.ID) (*store.Commit, error) {
	c.reads++
	return c.db.Commit(ctx, id)
}

// history builds commit graphs on an empty tree: every commit is named, and
// its time is its order of creation.
type history struct {
	t   *testing.T
	db  *store.DB
	ids map[string]store.ID
	n   int64
}

func newHistory(t *testing.T) *history {
	return &history{t: t, db: newDB(t), ids: map[string]store.ID{}}
}

// add makes commit name on the named parents.
func (h *history) add(name string, parents ...string) store.ID {
	h.t.Helper()
	c := &store.Commit{Message: name}
	for _, p := range parents {
		c.Parents = append(c.Parents, h.ids[p])
	}
	h.n++
	c.TimeNs = h.n
	id, err := writeCommit(h.t.Context(), h.db, c)
	require.NoError(h.t, err)
	h.ids[name] = id
	return id
}

// addV1 makes commit name the way the store wrote commits before
// generations: encoding version 1, on at most one parent.
func (h *history) addV1(name, parent string) store.ID {
	h.t.Helper()
	c := &store.Commit{Message: name, TimeNs: h.n + 1}
	h.n++
	if parent != "" {
		c.Parents = []store.ID{h.ids[parent]}
	}
	id := storeV1Commit(h.t, h.db, c)
	h.ids[name] = id
	return id
}

func (h *history) names(ids []store.ID) []string {
	back := map[store.ID]string{}
	for n, id := range h.ids {
		back[id] = n
	}
	out := []string{}
	for _, id := range ids {
		out = append(out, back[id])
	}
	return out
}

func (h *history) bases(a, b string) []string {
	h.t.Helper()
	got, err := MergeBases(h.t.Context(), h.db, h.ids[a], h.ids[b])
	require.NoError(h.t, err)
	return h.names(got)
}

func TestMergeBases(t *testing.T) {
	h := newHistory(t)
	//   root - a1 - a2 - a3          (main)
	//            \
	//             b1 - b2            (topic)
	//  criss-cross: x and y each merge the other's parent
	//   a3 - c1 - x(c1, d1)
	//      \    X
	//       d1 - y(d1, c1)
	h.add("root")
	h.add("a1", "root")
	h.add("a2", "a1")
	h.add("a3", "a2")
	h.add("b1", "a1")
	h.add("b2", "b1")
	h.add("c1", "a3")
	h.add("d1", "a3")
	h.add("x", "c1", "d1")
	h.add("y", "d1", "c1")
	h.add("m", "a3", "b2") // b2 merged into main
	h.add("after", "m")
	h.add("other") // a second root: unrelated history

	for _, tc := range []struct {
		a, b string
		want []string
	}{
		{"a3", "b2", []string{"a1"}},
		{"b2", "a3", []string{"a1"}},
		{"a1", "a3", []string{"a1"}}, // an ancestor is its own base
		{"a3", "a3", []string{"a3"}},
		{"x", "y", sortedNames(h, "c1", "d1")}, // criss-cross: two best bases
		{"c1", "d1", []string{"a3"}},
		{"after", "b2", []string{"b2"}}, // merged: the branch's head is the base
		{"after", "b1", []string{"b1"}},
		{"other", "a3", []string{}},
	} {
		require.Equal(t, tc.want, h.bases(tc.a, tc.b), "merge bases of %s and %s", tc.a, tc.b)
	}
	for _, tc := range []struct {
		a, b string
		want bool
	}{{"a1", "after", true}, {"b1", "after", true}, {"after", "b1", false}, {"c1", "y", true}, {"x", "y", false}, {"other", "a1", false}} {
		got, err := IsAncestor(t.Context(), h.db, h.ids[tc.a], h.ids[tc.b])
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%s ancestor of %s", tc.a, tc.b)
	}
	gen, err := Generation(t.Context(), h.db, []store.ID{h.ids["x"], h.ids["b2"]})
	require.NoError(t, err)
	require.EqualValues(t, 7, gen, "root 1, a1 2, a2 3, a3 4, c1 5, x 6: a child of x is 7")
}

func sortedNames(h *history, names ...string) []string {
	ids := make([]store.ID, len(names))
	for i, n := range names {
		ids[i] = h.ids[n]
	}
	sortIDs(ids)
	return h.names(ids)
}

// TestMergeBaseReadsOnlyTheRecentHistory: the base of two commits near the
// head of a long history is found reading the commits down to the base,
// not the history.
func TestMergeBaseReadsOnlyTheRecentHistory(t *testing.T) {
	h := newHistory(t)
	h.add("c0")
	for i := 1; i <= 500; i++ {
		h.add(fmt.Sprint("c", i), fmt.Sprint("c", i-1))
	}
	h.add("left", "c500")
	h.add("right", "c500")
	r := &commitCounter{db: h.db}
	got, err := MergeBases(t.Context(), r, h.ids["left"], h.ids["right"])
	require.NoError(t, err)
	require.Equal(t, []string{"c500"}, h.names(got))
	require.LessOrEqual(t, r.reads, 4, "commits read to find the base of two children of c500")
}

// TestGraphOverVersion1Commits: commits written before generations (one
// parent, no generation) take part in merge bases and walks, and their
// children get generations that count them.
func TestGraphOverVersion1Commits(t *testing.T) {
	h := newHistory(t)
	h.addV1("v1a", "")
	h.addV1("v1b", "v1a")
	h.addV1("v1c", "v1b")
	h.add("left", "v1c")
	h.add("right", "v1b")
	h.add("merge", "left", "right")
	require.Equal(t, []string{"v1b"}, h.bases("left", "right"))
	c, err := h.db.Commit(t.Context(), h.ids["left"])
	require.NoError(t, err)
	require.EqualValues(t, 4, c.Generation, "three version 1 commits below")
	m, err := h.db.Commit(t.Context(), h.ids["merge"])
	require.NoError(t, err)
	require.EqualValues(t, 5, m.Generation)
	var order []string
	require.NoError(t, Walk(t.Context(), h.db, []store.ID{h.ids["merge"]}, func(id store.ID, _ *store.Commit) bool {
		order = append(order, h.names([]store.ID{id})[0])
		return true
	}))
	require.Equal(t, []string{"merge", "left", "right", "v1c", "v1b", "v1a"}, order)
}

// TestLogWalksEveryParent: a log from a merge lists both sides, each commit
// once and before its parents, and pages by the last commit seen.
func TestLogWalksEveryParent(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	_, first, _, err := CreateProject(ctx, db, "p", "", Meta{Message: "first", TimeNs: 1}, nil)
	require.NoError(t, err)
	mk := func(msg string, tm int64, parents ...store.ID) store.ID {
		id, err := writeCommit(ctx, db, &store.Commit{Root: emptyRoot(t, db, first), Parents: parents, Message: msg, TimeNs: tm})
		require.NoError(t, err)
		return id
	}
	a := mk("a", 2, first)
	b := mk("b", 3, first)
	a2 := mk("a2", 4, a)
	m := mk("merge", 5, a2, b)
	_, err = db.SetBranchHead(ctx, "p", "main", first, m)
	require.NoError(t, err)
	all, err := Log(ctx, db, "p", "main", store.ZeroID, 0)
	require.NoError(t, err)
	var msgs []string
	for _, e := range all {
		msgs = append(msgs, e.Message)
	}
	require.Equal(t, []string{"merge", "a2", "b", "a", "first"}, msgs)
	require.Equal(t, []store.ID{a2, b}, all[0].Parents)
	var paged []string
	after := store.ZeroID
	for {
		page, err := Log(ctx, db, "p", "main", after, 2)
		require.NoError(t, err)
		for _, e := range page {
			paged = append(paged, e.Message)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].ID
	}
	require.Equal(t, msgs, paged, "paged log")
	_, err = Log(ctx, db, "p", "a", store.ZeroID, 0)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = Log(ctx, db, "p", "main", store.Hash(store.KindCommit, []byte("elsewhere")), 0)
	require.ErrorIs(t, err, store.ErrNotFound, "a cursor that is not in the log")
}

func emptyRoot(t *testing.T, db *store.DB, c store.ID) store.ID {
	cm, err := db.Commit(t.Context(), c)
	require.NoError(t, err)
	return cm.Root
}
