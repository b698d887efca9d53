package hostview

import "fmt"

// Owner is the host user a view is for: its uid and gid.
type Owner struct{ UID, GID uint32 }

// Range is the sandboxes' ids on the host: id n inside is host id Base+n,
// for n below Size.
type Range struct{ Base, Size uint32 }

// check says why r and o cannot make a view: the shown ids (below Size)
// and the range's host ids must not meet, and the owner must be a host
// user, not one of the range's ids.
func check(r Range, o Owner) error {
	switch {
	case r.Size == 0 || r.Base < r.Size || r.Base+r.Size < r.Base:
		return fmt.Errorf("hostview: id range %d+%d: the range must lie above its own size", r.Base, r.Size)
	case o.UID >= r.Base && o.UID-r.Base < r.Size:
		return fmt.Errorf("hostview: owner uid %d is one of the sandboxes' ids", o.UID)
	case o.GID >= r.Base && o.GID-r.Base < r.Size:
		return fmt.Errorf("hostview: owner gid %d is one of the sandboxes' ids", o.GID)
	}
	return nil
}

// idMap translates one kind of id between the view and the inner mount,
// which shows id n of the range as Base+n (see the package doc).
type idMap struct{ owner, base, size uint32 }

func newIDMaps(r Range, o Owner) (uids, gids idMap) {
	return idMap{o.UID, r.Base, r.Size}, idMap{o.GID, r.Base, r.Size}
}

// shown is the id the view shows for inner id k.
func (m idMap) shown(k uint32) uint32 {
	if k < m.base || k-m.base >= m.size {
		return k // not of the range: the overflow id
	}
	switch n := k - m.base; {
	case n == 0:
		return m.owner
	case n == m.owner:
		return k
	default:
		return n
	}
}

// inner is the inner id for shown id h; one with no place in the range is
// the owner's.
func (m idMap) inner(h uint32) uint32 {
	switch {
	case h == m.owner:
		return m.base
	case m.owner != 0 && m.owner < m.size && h == m.base+m.owner:
		return h
	case h == 0 || h >= m.size:
		return m.base
	}
	return m.base + h
}
