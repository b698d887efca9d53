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
