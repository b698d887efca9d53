package store

import (
	"container/list"
	"sync"
)

// treeCache is a bounded LRU of decoded trees, sized by encoded bytes
// (a decoded tree takes a small multiple of that).
type treeCache struct {
	max int64

	mu    sync.Mutex
	size  int64
	order *list.List // front = most recent; values are *treeItem
	items map[ID]*list.Element
}

type treeItem struct {
	id   ID
	t    *Tree
	size int64
}

func newTreeCache(max int64) *treeCache {
	return &treeCache{max: max, order: list.New(), items: map[ID]*list.Element{}}
}

func (c *treeCache) get(id ID) *Tree {
	if c.max <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.items[id]; e != nil {
		c.order.MoveToFront(e)
		return e.Value.(*treeItem).t
	}
	return nil
}

func (c *treeCache) put(id ID, t *Tree, size int64) {
	if c.max <= 0 || size > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.items[id]; e != nil {
		c.order.MoveToFront(e)
		return
	}
	c.items[id] = c.order.PushFront(&treeItem{id: id, t: t, size: size})
	c.size += size
	for c.size > c.max {
		e := c.order.Back()
		it := e.Value.(*treeItem)
		c.order.Remove(e)
		delete(c.items, it.id)
		c.size -= it.size
	}
}

// flightGroup runs one call per key at a time; concurrent callers of the
// same key wait for and share its result.
type flightGroup struct {
	mu    sync.Mutex
	calls map[string]*flight
}

type flight struct {
	done chan struct{}
	val  string
	err  error
}

func (g *flightGroup) do(key string, fn func() (string, error)) (string, error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[string]*flight{}
	}
	if f := g.calls[key]; f != nil {
		g.mu.Unlock()
		<-f.done
		return f.val, f.err
	}
	f := &flight{done: make(chan struct{})}
	g.calls[key] = f
	g.mu.Unlock()

	f.val, f.err = fn()
	g.mu.Lock()
	delete(g.calls, key)
	g.mu.Unlock()
	close(f.done)
	return f.val, f.err
}
