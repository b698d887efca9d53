package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// flipPackByte flips one byte of chunk id's payload in its pack and returns
// the pack's path.
func flipPackByte(t *testing.T, db *DB, id ID, at int64) string {
	t.Helper()
	var pack, off int64
	if err := db.withTx(context.Background(), txRead, func(tx *tx) error {
		return tx.row(context.Background(), `SELECT pack, off FROM chunks WHERE id = ?`, id[:]).Scan(&pack, &off)
	}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(db.PacksDir(), packName(pack))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off+at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off+at); err != nil {
		t.Fatal(err)
	}
	return path
}

func wantCorrupt(t *testing.T, what string, err error, names ...string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: got %v, want ErrCorrupt", what, err)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("%s: error %q does not name %s", what, err, n)
		}
	}
}

func TestCorruptPackIsCaught(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	small := randBytes(1, 5000)
	big := randBytes(2, 3*testChunkSize+7)
	c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"small": small, "big": big})
	tr, _ := db.Tree(ctx, mustCommit(t, db, c).Root)
	bigE, _ := tr.Find("big")
	smallE, _ := tr.Find("small")
	m, err := db.Manifest(ctx, bigE.Object)
	if err != nil {
		t.Fatal(err)
	}
	victim := m.Extents[1].Chunk
	pack := flipPackByte(t, db, victim, 100)
	smallPack := flipPackByte(t, db, smallE.Object, 0)

	_, err = db.Chunk(ctx, victim)
	wantCorrupt(t, "Chunk", err, victim.String(), pack)
	rc, err := db.OpenContent(ctx, bigE)
	if err != nil {
		t.Fatal(err)
	}
	_, err = readCloser(rc)
	wantCorrupt(t, "OpenContent", err, victim.String(), pack)
	_, err = db.OpenContent(ctx, smallE)
	wantCorrupt(t, "OpenContent small", err, smallE.Object.String(), smallPack)
	_, err = db.Materialize(ctx, bigE)
	wantCorrupt(t, "Materialize", err, victim.String(), pack)
	if _, err := os.Stat(db.CachePath(bigE.Object)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed Materialize left a cache file: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Dir(db.CachePath(bigE.Object)))
	if len(ents) != 0 {
		t.Fatalf("a failed Materialize left %d files", len(ents))
	}

	rep, err := db.Fsck(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := map[ID]Problem{}
	for _, p := range rep.Problems {
		found[p.Object] = p
	}
	if len(rep.Problems) != 2 || found[victim].Kind != "hash" || found[victim].Where != pack || found[smallE.Object].Kind != "hash" {
		t.Fatalf("Fsck problems = %v", rep.Problems)
	}
	wantCorrupt(t, "FsckReport.Err", rep.Err(), victim.String())
	if _, err := db.GC(ctx, GCOptions{}); err != nil {
		t.Fatalf("GC over a bad chunk still runs (chunks are not decoded): %v", err)
	}
}

func TestCorruptRowsAreCaught(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": []byte("a"), "b": randBytes(3, 2*testChunkSize)})
	root := mustCommit(t, db, c).Root
	tr, _ := db.Tree(ctx, root)
	bE, _ := tr.Find("b")
	manifest := bE.Object
	if _, err := db.CreateProject(ctx, "p", c); err != nil {
		t.Fatal(err)
	}
	// A fresh handle, so the tree is not cached.
	dir := db.Dir()
	db.Close()
	db, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	flipRow := func(id ID) {
		if err := db.withTx(ctx, txWrite, func(tx *tx) error {
			_, err := tx.exec(ctx, `UPDATE objects SET data = CAST(substr(data, 1, length(data) - 1) || x'7f' AS BLOB) WHERE id = ?`, id[:])
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	flipRow(root)
	flipRow(manifest)
	_, err = db.Tree(ctx, root)
	wantCorrupt(t, "Tree", err, root.String())
	_, err = db.Manifest(ctx, manifest)
	wantCorrupt(t, "Manifest", err, manifest.String())
	_, err = db.OpenContent(ctx, bE)
	wantCorrupt(t, "OpenContent", err, manifest.String())

	rep, err := db.Fsck(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[ID]bool{}
	for _, p := range rep.Problems {
		if p.Kind == "hash" {
			bad[p.Object] = true
		}
	}
	if !bad[root] || !bad[manifest] {
		t.Fatalf("Fsck problems = %v", rep.Problems)
	}
	// GC refuses to delete anything over a corrupt reachable object.
	if _, err := db.GC(ctx, GCOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GC over a corrupt tree = %v, want ErrCorrupt", err)
	}
}

func TestFsckFindsDanglingAndRangeProblems(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": randBytes(1, 100)})
	if _, err := db.CreateProject(ctx, "p", c); err != nil {
		t.Fatal(err)
	}
	tr, _ := db.Tree(ctx, mustCommit(t, db, c).Root)
	chunk := tr.Entries[0].Object
	mustFsck(t, db)
	// Point the chunk past the end of its pack.
	if err := db.withTx(ctx, txWrite, func(tx *tx) error {
		_, err := tx.exec(ctx, `UPDATE chunks SET off = off + 1000000 WHERE id = ?`, chunk[:])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Fsck(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != "range" || rep.Problems[0].Object != chunk {
		t.Fatalf("Fsck problems = %v", rep.Problems)
	}
	_, err = db.Chunk(ctx, chunk)
	wantCorrupt(t, "Chunk out of range", err, chunk.String())
}

func TestFsckFindsMissingObjects(t *testing.T) {
	eachBackend(t, func(t *testing.T, newDB func(testing.TB) *DB) {
		ctx := context.Background()
		db := newDB(t)
		c := commitFiles(t, db, ZeroID, "c", map[string][]byte{"a": randBytes(1, 3*testChunkSize)})
		if _, err := db.CreateProject(ctx, "p", c); err != nil {
			t.Fatal(err)
		}
		root := mustCommit(t, db, c).Root
		tr, _ := db.Tree(ctx, root)
		m, _ := db.Manifest(ctx, tr.Entries[0].Object)
		gone := m.Extents[2].Chunk
		if err := db.withTx(ctx, txWrite, func(tx *tx) error {
			if _, err := tx.exec(ctx, `DELETE FROM chunks WHERE id = ?`, gone[:]); err != nil {
				return err
			}
			_, err := tx.exec(ctx, `DELETE FROM objects WHERE id = ?`, root[:])
			return err
		}); err != nil {
			t.Fatal(err)
		}
		rep, err := db.Fsck(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		missing := map[ID]string{}
		for _, p := range rep.Problems {
			if p.Kind == "missing" {
				missing[p.Object] = p.Where
			}
		}
		if len(rep.Problems) != 2 || !strings.Contains(missing[root], c.String()) || !strings.Contains(missing[gone], "manifest") {
			t.Fatalf("Fsck problems = %v", rep.Problems)
		}
		var wantGC error = ErrNotFound
		if db.Shared() {
			wantGC = ErrUnsupported // no GC on a shared Store yet
		}
		if _, err := db.GC(ctx, GCOptions{}); !errors.Is(err, wantGC) {
			t.Fatalf("GC with a missing reachable tree = %v, want %v", err, wantGC)
		}
	})
}
