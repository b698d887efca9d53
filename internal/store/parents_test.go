package store

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGCReachesEveryParent: a merge commit keeps its second parent, and what
// that parent reaches, alive after the branch it was made on is deleted,
// on both backends; fsck stays clean.
func TestGCReachesEveryParent(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := t.Context()
		db := newDB(t)
		base := commitMerge(t, db, nil, 1, "base", map[string][]byte{"a": []byte("a")})
		_, err := db.CreateProject(ctx, "p", base)
		require.NoError(t, err)
		sideFiles := map[string][]byte{"a": []byte("a"), "side": randBytes(5, 3*testChunkSize)}
		side := commitMerge(t, db, []ID{base}, 2, "side", sideFiles)
		_, err = db.CreateBranch(ctx, "p", "topic", side)
		require.NoError(t, err)
		main := commitMerge(t, db, []ID{base}, 2, "main", map[string][]byte{"a": []byte("a2")})
		merge := commitMerge(t, db, []ID{main, side}, 3, "merge", map[string][]byte{"a": []byte("a2"), "side": sideFiles["side"]})
		r, err := db.SetBranchHead(ctx, "p", "main", base, merge)
		require.NoError(t, err)
		require.Equal(t, PublishCreated, r)
		require.NoError(t, db.DeleteBranch(ctx, "p", "topic"))
		if db.Shared() {
			ageRows(t, db, DefaultGCGrace*2)
		}
		st, err := db.GC(ctx, GCOptions{})
		require.NoError(t, err)
		require.EqualValues(t, 4, st.LiveCommits, "base, main, side and the merge: %+v", st)
		require.Zero(t, st.DeadObjects+st.DeadChunks, "GC collected what a second parent reaches: %+v", st)
		c := mustCommit(t, db, merge)
		require.Equal(t, []ID{main, side}, c.Parents)
		require.Equal(t, sideFiles, readAll(t, db, side), "the second parent's files after GC")
		mustFsck(t, db)
	})
}

// TestFsckChecksParents: fsck names a missing second parent and a
// generation that breaks its rule, and reads version 1 commits as they are.
func TestFsckChecksParents(t *testing.T) {
	ctx := t.Context()
	db := newDB(t)
	files := map[string][]byte{"a": []byte("a")}
	first := commitMerge(t, db, nil, 1, "first", files)

	// A version 1 commit on first, as the store wrote them before.
	b, err := db.NewBatch(ctx)
	require.NoError(t, err)
	root := mustCommit(t, db, first).Root
	old, err := b.putObject(KindCommit, commitV1(root, first, "old"))
	require.NoError(t, err)
	require.NoError(t, b.Flush(ctx))
	b.Abort()
	c := mustCommit(t, db, old)
	require.Equal(t, []ID{first}, c.Parents)
	require.Zero(t, c.Generation)
	// Its child has a generation above its parents' known ones.
	child := commitMerge(t, db, []ID{old, first}, 5, "on old", files)
	mustFsck(t, db)

	missing := Hash(KindCommit, []byte("never stored"))
	commitMerge(t, db, []ID{child, missing}, 6, "bad parent", files)
	commitMerge(t, db, []ID{first}, 1, "bad generation", files)
	commitMerge(t, db, []ID{child}, 9, "skipped generation", files)
	rep, err := db.Fsck(ctx, nil)
	require.NoError(t, err)
	var kinds []string
	for _, p := range rep.Problems {
		kinds = append(kinds, p.Kind)
		if p.Kind == "missing" {
			require.Equal(t, missing, p.Object, "the missing parent: %v", p)
		}
	}
	require.ElementsMatch(t, []string{"missing", "generation", "generation"}, kinds, "problems: %v", rep.Problems)
}

// commitV1 is the bytes of a version 1 commit (package object's encoding
// before commits had several parents): version byte 1, root, parent,
// message, author, time and the four stats.
func commitV1(root, parent ID, msg string) []byte {
	b := append([]byte{1}, root[:]...)
	b = append(b, parent[:]...)
	for _, s := range []string{msg, "old author"} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, v := range []int64{42, 1, 2, 3, 4} {
		b = binary.AppendVarint(b, v)
	}
	return b
}
