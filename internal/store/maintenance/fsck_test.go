package maintenance

import (
	"errors"
	"strings"
	"testing"

	"layerfs.dev/layerfs/internal/store/object"
)

// TestCommitGraphGenerations: a commit's generation is one above its
// highest parent's; one at or below a parent's, or skipping, is
// reported, and commits without generations (version 1) are not.
func TestCommitGraphGenerations(t *testing.T) {
	id := func(b byte) object.ID { return object.ID{b} }
	g := commitGraph{}
	add := func(b byte, gen uint64, parents ...byte) {
		c := &object.Commit{Generation: gen}
		for _, p := range parents {
			c.Parents = append(c.Parents, id(p))
		}
		g.add(id(b), c)
	}
	add(1, 1)
	add(2, 2, 1)
	add(3, 3, 2, 1) // right: one above the highest
	add(4, 2, 3)    // not above its parent
	add(5, 5, 2)    // skips
	add(6, 0, 5)    // no generation: not checked
	add(7, 4, 6)    // above an unknown parent: only "above" is checked
	var rep FsckReport
	g.check(&rep)
	got := map[object.ID]string{}
	for _, p := range rep.Problems {
		if p.Kind != "generation" {
			t.Errorf("problem of kind %q, want generation: %v", p.Kind, p)
		}
		got[p.Object] = p.Detail
	}
	if len(got) != 2 || !strings.Contains(got[id(4)], "not above") || !strings.Contains(got[id(5)], "want 3") {
		t.Errorf("problems %v, want commit 4 not above its parent and commit 5 skipping", rep.Problems)
	}
}

// TestFsckReportErr: a clean report is no error; one with problems wraps
// ErrCorrupt and names the first three.
func TestFsckReportErr(t *testing.T) {
	var rep FsckReport
	if !rep.OK() || rep.Err() != nil {
		t.Fatalf("empty report: OK %v, Err %v", rep.OK(), rep.Err())
	}
	for i := range 5 {
		rep.add("missing", object.ID{byte(i + 1)}, "tree", "problem %d", i)
	}
	err := rep.Err()
	if !errors.Is(err, object.ErrCorrupt) {
		t.Errorf("Err() = %v, want it to wrap ErrCorrupt", err)
	}
	if s := err.Error(); !strings.Contains(s, "problem 2") || strings.Contains(s, "problem 3") || !strings.Contains(s, "and 2 more") {
		t.Errorf("Err() = %q, want the first three problems and a count of the rest", s)
	}
}
