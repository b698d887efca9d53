package commit

import (
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"fmt"

	"layerfs.dev/layerfs/internal/store"
)

// History reads commits by ID: the graph a walk follows; *store.DB
// implements it.
type History interface {
	Commit(ctx context.Context, id store.ID) (*store.Commit, error)
}

// graph walks the commit graph. It remembers every commit it read and the
// generation of commits written before generations were recorded, so one
// question costs each commit one read. It serves one call and is then
// dropped: nothing of it outlives the question.
type graph struct {
	r     History
	nodes map[store.ID]*gnode
}

type gnode struct {
	id  store.ID
	c   *store.Commit
	gen uint64 // the commit's generation, computed for version 1 commits
}

func newGraph(r History) *graph { return &graph{r: r, nodes: map[store.ID]*gnode{}} }

// node reads commit id, with its generation.
func (g *graph) node(ctx context.Context, id store.ID) (*gnode, error) {
	if n := g.nodes[id]; n != nil {
		return n, nil
	}
	// A commit without a generation (version 1) has at most one parent:
	// its generation is its depth, found by walking the first-parent chain
	// down to a commit whose generation is known.
	var chain []*gnode
	for cur := id; ; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, err := g.r.Commit(ctx, cur)
		if err != nil {
			return nil, fmt.Errorf("read commit %s: %w", cur.Short(), err)
		}
		n := &gnode{id: cur, c: c, gen: c.Generation}
		g.nodes[cur] = n
		if n.gen != 0 {
			break
		}
		chain = append(chain, n)
		if len(c.Parents) == 0 {
			break
		}
		p := c.Parents[0]
		if pn := g.nodes[p]; pn != nil {
			break
		}
		cur = p
	}
	for i := len(chain) - 1; i >= 0; i-- {
		n := chain[i]
		n.gen = 1
		if len(n.c.Parents) > 0 {
			n.gen = g.nodes[n.c.Parents[0]].gen + 1
		}
	}
	return g.nodes[id], nil
}

// Generation is the generation a commit whose parents are parents gets:
// one more than the highest of theirs (1 without parents).
func Generation(ctx context.Context, r History, parents []store.ID) (uint64, error) {
	g := newGraph(r)
	var top uint64
	for _, p := range parents {
		n, err := g.node(ctx, p)
		if err != nil {
			return 0, err
		}
		top = max(top, n.gen)
	}
	return top + 1, nil
}

// newer orders commits for walks: higher generation first (a commit always
// comes before its ancestors), then later time, then id, so every walk is
// deterministic.
func newer(a, b *gnode) int {
	return cmp.Or(-cmp.Compare(a.gen, b.gen), -cmp.Compare(a.c.TimeNs, b.c.TimeNs), bytes.Compare(a.id[:], b.id[:]))
}

// queue is a priority queue of commits, newest (see newer) first.
type queue []*gnode

func (q queue) Len() int           { return len(q) }
func (q queue) Less(i, j int) bool { return newer(q[i], q[j]) < 0 }
func (q queue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)        { *q = append(*q, x.(*gnode)) }
func (q *queue) Pop() any {
	old := *q
	n := old[len(old)-1]
	*q = old[:len(old)-1]
	return n
}

// Walk calls fn for every commit reachable from the heads through any
// parent, each once, a commit before all of its ancestors (by generation,
// then time, then id: a deterministic order). fn returning false stops the
// walk.
func Walk(ctx context.Context, r History, heads []store.ID, fn func(id store.ID, c *store.Commit) bool) error {
	g := newGraph(r)
	q := &queue{}
	seen := map[store.ID]bool{}
	for _, h := range heads {
		if h.IsZero() || seen[h] {
			continue
		}
		n, err := g.node(ctx, h)
		if err != nil {
			return err
		}
		seen[h] = true
		heap.Push(q, n)
	}
	for q.Len() > 0 {
		n := heap.Pop(q).(*gnode)
		if !fn(n.id, n.c) {
			return nil
		}
		for _, p := range n.c.Parents {
			if seen[p] {
				continue
			}
			pn, err := g.node(ctx, p)
			if err != nil {
				return err
			}
			seen[p] = true
			heap.Push(q, pn)
		}
	}
	return nil
}

// Flags of the merge base search.
const (
	fromA = 1 << iota // reached from the first commit
	fromB             // reached from the second
	stale             // below a common ancestor already found
)

// MergeBases returns the best common ancestors of a and b: the common
// ancestors that are not ancestors of another common ancestor, ordered by
// id. It is a itself when a is an ancestor of b (and b when b is an
// ancestor of a); none when the two share no history. Several mean a
// criss-cross history (see MergeBase).
//
// The search walks down from both commits, highest generation first, and
// stops as soon as every commit left to visit lies below a common ancestor
// already found: it reads the commits between the two heads and their
// bases, not the whole history.
func MergeBases(ctx context.Context, r History, a, b store.ID) ([]store.ID, error) {
	g := newGraph(r)
	cands, err := g.paint(ctx, []store.ID{a}, []store.ID{b})
	if err != nil {
		return nil, err
	}
	return g.removeRedundant(ctx, cands)
}

// paint marks what as and bs reach and returns the common ancestors it
// met before every commit left to visit was stale (some may be ancestors
// of others). Commits are visited highest generation first, so a commit's
// flags are whole when it is visited: every child that reaches it has a
// higher generation and was visited before.
func (g *graph) paint(ctx context.Context, as, bs []store.ID) ([]store.ID, error) {
	p := painter{g: g, flags: map[store.ID]uint8{}, queued: map[store.ID]bool{}, done: map[store.ID]bool{}, q: &queue{}}
	for _, id := range as {
		if err := p.add(ctx, id, fromA); err != nil {
			return nil, err
		}
	}
	for _, id := range bs {
		if err := p.add(ctx, id, fromB); err != nil {
			return nil, err
		}
	}
	var out []store.ID
	for p.live > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := heap.Pop(p.q).(*gnode)
		p.queued[n.id], p.done[n.id] = false, true
		f := p.flags[n.id]
		if f&stale == 0 {
			p.live--
			if f&(fromA|fromB) == fromA|fromB {
				out = append(out, n.id)
				f |= stale
			}
		}
		for _, parent := range n.c.Parents {
			if err := p.add(ctx, parent, f); err != nil {
				return nil, fmt.Errorf("commit %s: %w", n.id.Short(), err)
			}
		}
	}
	return out, nil
}

// painter is the state of one paint: each commit's flags, the queue of
// commits to visit (each queued once) and how many of them are not stale.
type painter struct {
	g      *graph
	flags  map[store.ID]uint8
	queued map[store.ID]bool
	done   map[store.ID]bool
	q      *queue
	live   int
}

// add gives commit id the flags f, queueing it if it gains any.
func (p *painter) add(ctx context.Context, id store.ID, f uint8) error {
	old := p.flags[id]
	nf := old | f
	if nf == old {
		return nil
	}
	if p.done[id] {
		// A child of lower generation than its parent: the generations
		// stored in the commits are wrong.
		return fmt.Errorf("parent %s reached after it was visited: %w", id.Short(), store.ErrCorrupt)
	}
	p.flags[id] = nf
	if p.queued[id] {
		if old&stale == 0 && nf&stale != 0 {
			p.live--
		}
		return nil
	}
	n, err := p.g.node(ctx, id)
	if err != nil {
		return err
	}
	p.queued[id] = true
	heap.Push(p.q, n)
	if nf&stale == 0 {
		p.live++
	}
	return nil
}

// removeRedundant drops candidates that are ancestors of other candidates
// and orders the rest by id.
func (g *graph) removeRedundant(ctx context.Context, cands []store.ID) ([]store.ID, error) {
	if len(cands) < 2 {
		return cands, nil
	}
	var out []store.ID
	for i, c := range cands {
		redundant := false
		for j, o := range cands {
			if i == j {
				continue
			}
			anc, err := g.isAncestor(ctx, c, o)
			if err != nil {
				return nil, err
			}
			if anc {
				redundant = true
				break
			}
		}
		if !redundant {
			out = append(out, c)
		}
	}
	sortIDs(out)
	return out, nil
}

// isAncestor reports whether a is b or one of b's ancestors. The walk down
// from b stops at a's generation.
func (g *graph) isAncestor(ctx context.Context, a, b store.ID) (bool, error) {
	if a == b {
		return true, nil
	}
	an, err := g.node(ctx, a)
	if err != nil {
		return false, err
	}
	seen := map[store.ID]bool{b: true}
	stack := []store.ID{b}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n, err := g.node(ctx, id)
		if err != nil {
			return false, err
		}
		if n.gen <= an.gen {
			continue
		}
		for _, p := range n.c.Parents {
			if p == a {
				return true, nil
			}
			if !seen[p] {
				seen[p] = true
				stack = append(stack, p)
			}
		}
	}
	return false, nil
}

// IsAncestor reports whether a is b or one of b's ancestors.
func IsAncestor(ctx context.Context, r History, a, b store.ID) (bool, error) {
	return newGraph(r).isAncestor(ctx, a, b)
}

func sortIDs(ids []store.ID) {
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && bytes.Compare(ids[j][:], ids[j-1][:]) < 0; j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
}
