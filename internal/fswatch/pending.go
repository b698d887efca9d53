package fswatch

// pending is the coalescing buffer between the kernel's queue and the
// consumer: at most one event per path, in the order paths first changed.
type pending struct {
	order    []string
	byPath   map[string]*Event
	dropped  int64
	overflow bool
}

// add merges ev into the buffer, or counts it as dropped when the buffer
// already holds max paths and ev's path is not among them.
func (p *pending) add(ev Event, max int) {
	switch ev.Kind {
	case Overflow:
		p.overflow = true
		return
	}
	limit := max
	if ev.Kind == Renamed {
		// A path created since the last take and renamed now: the reader
		// never saw the old name, so it sees the new one created. The old
		// slot is freed (a tombstone, so allow one more, up to twice max).
		if old, ok := p.byPath[ev.OldPath]; ok && old.Kind == Created {
			*old = Event{}
			ev = Event{Kind: Created, Path: ev.Path, Mode: ev.Mode, Time: ev.Time}
			limit = 2 * max
		}
	}
	if old, ok := p.byPath[ev.Path]; ok {
		if old.Kind == "" { // cancelled earlier: the path keeps its slot
			*old = ev
			return
		}
		merged, keep := merge(*old, ev)
		if !keep {
			merged = Event{} // a tombstone, skipped by take
		}
		*old = merged
		return
	}
	if len(p.byPath) >= limit {
		p.dropped++
		return
	}
	e := ev
	p.byPath[ev.Path] = &e
	p.order = append(p.order, ev.Path)
}

// merge folds a later event on the same path into an earlier one; false
// when the two cancel out (created, then removed before anyone saw it).
func merge(old, ev Event) (Event, bool) {
	switch {
	case old.Kind == Created && ev.Kind == Modified:
		return old, true // still new, with new content
	case old.Kind == Created && ev.Kind == Removed:
		return Event{}, false
	case old.Kind == Modified && ev.Kind == Modified:
		return old, true
	}
	ev.Time = old.Time
	return ev, true
}

// take empties the buffer: the events in order, then what was lost.
func (p *pending) take() []Event {
	var out []Event
	for _, path := range p.order {
		if e := p.byPath[path]; e.Kind != "" {
			out = append(out, *e)
		}
		delete(p.byPath, path)
	}
	p.order = p.order[:0]
	if p.dropped > 0 {
		out = append(out, Event{Kind: Dropped, Count: p.dropped})
		p.dropped = 0
	}
	if p.overflow {
		out = append(out, Event{Kind: Overflow})
		p.overflow = false
	}
	return out
}
