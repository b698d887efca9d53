package commit

import (
	"context"
	"sync"

	"layerfs.dev/layerfs/internal/store"
)

// linkMemoLimit bounds the subtrees a LinkCounter remembers.
const linkMemoLimit = 1 << 20

// LinkCounter counts the hard-linked files of stored trees (file entries
// with a non-zero Link). It remembers each subtree's count, so the count
// of a new commit's root reads only the trees that commit changed.
type LinkCounter struct {
	mu   sync.Mutex
	memo map[store.ID]int64
}

// Count returns the number of hard-linked files in tree id.
func (c *LinkCounter) Count(ctx context.Context, r Reader, id store.ID) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.memo == nil || len(c.memo) > linkMemoLimit {
		c.memo = map[store.ID]int64{}
	}
	return c.count(ctx, r, id)
}

func (c *LinkCounter) count(ctx context.Context, r Reader, id store.ID) (int64, error) {
	if n, ok := c.memo[id]; ok || id.IsZero() {
		return n, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	t, err := r.Tree(ctx, id)
	if err != nil {
		return 0, err
	}
	c.loadSubtrees(ctx, r, t)
	var n int64
	for i := range t.Entries {
		e := &t.Entries[i]
		switch {
		case e.Type == store.TypeFile && e.Link != 0:
			n++
		case e.Type == store.TypeDir:
			sub, err := c.count(ctx, r, e.Object)
			if err != nil {
				return 0, err
			}
			n += sub
		}
	}
	c.memo[id] = n
	return n, nil
}

// loadSubtrees reads t's subtrees not counted yet in one go where r can
// (store.DB.LoadTrees): on a shared Store each tree read alone is a round
// trip. Best effort: what it does not load, count reads one by one.
func (c *LinkCounter) loadSubtrees(ctx context.Context, r Reader, t *store.Tree) {
	l, ok := r.(interface {
		LoadTrees(ctx context.Context, ids []store.ID) error
	})
	if !ok {
		return
	}
	var ids []store.ID
	for i := range t.Entries {
		if e := &t.Entries[i]; e.Type == store.TypeDir {
			if _, ok := c.memo[e.Object]; !ok {
				ids = append(ids, e.Object)
			}
		}
	}
	if len(ids) > 1 {
		l.LoadTrees(ctx, ids)
	}
}
