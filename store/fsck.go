package store

import (
	"context"
	"errors"
)

// Problem is one thing Fsck found wrong.
type Problem struct {
	Kind   string `json:"kind"`   // "integrity", "missing", "hash", "decode", "range", "pack"
	Object ID     `json:"object"` // the object concerned, zero for store-wide problems
	Where  string `json:"where"`  // the table, ref or pack file
	Detail string `json:"detail"`
}

func (p Problem) String() string {
	if p.Object.IsZero() {
		return p.Kind + ": " + p.Where + ": " + p.Detail
	}
	return p.Kind + ": " + p.Object.String() + " in " + p.Where + ": " + p.Detail
}

// FsckReport is the result of Fsck. OK reports whether Problems is empty.
type FsckReport struct {
	Refs     int64     `json:"refs"`
	Objects  int64     `json:"objects"`
	Chunks   int64     `json:"chunks"`
	Bytes    int64     `json:"bytes"` // chunk payload bytes read and verified
	Packs    int       `json:"packs"`
	Problems []Problem `json:"problems"`
}

// OK reports whether no problem was found.
func (r *FsckReport) OK() bool { return len(r.Problems) == 0 }

// Fsck checks the whole store: SQLite's integrity_check and foreign keys,
// that every reference resolves (branch, layer and workspace -> commit ->
// parent and tree -> trees, manifests and chunks), that every object and
// chunk hashes to its id and every chunk's range lies within its pack. It
// reports each problem with the object and where it is; the error is for
// failures to run the check, not for what it found. progress, if not nil,
// is called with objects checked so far and the total.
func (db *DB) Fsck(ctx context.Context, progress func(done, total int)) (FsckReport, error) {
	return FsckReport{}, errors.New("fsck: not implemented yet")
}
