package hostview

import "testing"

// TestIDMaps: the translation is a bijection between the range and the
// ids shown, the owner stands for the range's root, and ids without a
// place in the range fall to the owner.
func TestIDMaps(t *testing.T) {
	r := Range{Base: 2_000_000_000, Size: 65536}
	for _, owner := range []uint32{0, 1000, 65535, 100000} {
		m, _ := newIDMaps(r, Owner{owner, owner})
		seen := map[uint32]uint32{}
		for n := range r.Size {
			k := r.Base + n
			h := m.shown(k)
			if prev, dup := seen[h]; dup {
				t.Fatalf("owner %d: inner %d and %d both shown as %d", owner, prev, k, h)
			}
			seen[h] = k
			if back := m.inner(h); back != k {
				t.Fatalf("owner %d: inner %d shown as %d comes back as %d", owner, k, h, back)
			}
		}
		if got := m.shown(r.Base); got != owner {
			t.Errorf("owner %d: the range's root shown as %d", owner, got)
		}
		if got := m.shown(65534); got != 65534 {
			t.Errorf("owner %d: the overflow id shown as %d", owner, got)
		}
		for _, h := range []uint32{r.Base - 1, 4_000_000_000} {
			if got := m.inner(h); got != r.Base {
				t.Errorf("owner %d: id %d without a place creates as %d, want the owner's %d", owner, h, got, r.Base)
			}
		}
		if owner != 0 {
			if got := m.inner(0); got != r.Base {
				t.Errorf("owner %d: root creates as %d, want the owner's %d", owner, got, r.Base)
			}
		}
	}
	if err := check(r, Owner{r.Base + 5, 0}); err == nil {
		t.Error("an owner of the range was accepted")
	}
	if err := check(Range{Base: 10, Size: 65536}, Owner{}); err == nil {
		t.Error("a range below its size was accepted")
	}
}
