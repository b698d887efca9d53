package bucketpack

import (
	"container/list"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"layerfs.dev/layerfs/internal/store/object"
)

// chunkCache keeps chunks a host read from the bucket in files
// chunks/<xx>/<id>, bounded in bytes, the least recently used evicted
// first. A file is checked against its id every time it is read: a
// corrupted one is removed and reported as a miss (the chunk is fetched
// again), never served. The index of what is cached lives in memory and
// is rebuilt from the directory at open, oldest modification first.
type chunkCache struct {
	dir string
	max int64

	mu    sync.Mutex
	lru   *list.List // of cacheItem, most recently used first
	items map[object.ID]*list.Element
	size  int64
}

type cacheItem struct {
	id   object.ID
	size int64
}

// openChunkCache opens the cache in dir; max < 0 disables it (nil).
func openChunkCache(dir string, max int64) (*chunkCache, error) {
	if max < 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &chunkCache{dir: dir, max: max, lru: list.New(), items: map[object.ID]*list.Element{}}
	type found struct {
		id    object.ID
		size  int64
		mtime int64
	}
	var all []found
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		id, perr := object.ParseID(d.Name())
		info, ierr := d.Info()
		if perr != nil || ierr != nil {
			os.Remove(p) // a temporary file of an interrupted put
			return nil
		}
		all = append(all, found{id, info.Size(), info.ModTime().UnixNano()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mtime > all[j].mtime })
	for _, f := range all {
		c.items[f.id] = c.lru.PushBack(cacheItem{f.id, f.size})
		c.size += f.size
	}
	c.mu.Lock()
	c.evict()
	c.mu.Unlock()
	return c, nil
}

func (c *chunkCache) path(id object.ID) string {
	s := id.String()
	return filepath.Join(c.dir, s[:2], s)
}

// get returns chunk id's bytes if cached and intact.
func (c *chunkCache) get(id object.ID) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	e, ok := c.items[id]
	if ok {
		c.lru.MoveToFront(e)
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	data, err := os.ReadFile(c.path(id))
	if err == nil && object.Hash(object.KindChunk, data) == id {
		return data, true
	}
	// Gone (evicted meanwhile) or corrupted: forget it either way.
	c.mu.Lock()
	if e, ok := c.items[id]; ok {
		c.remove(e)
	}
	c.mu.Unlock()
	if err == nil {
		os.Remove(c.path(id))
	}
	return nil, false
}

// put caches a verified chunk; errors only cost a later refetch.
func (c *chunkCache) put(id object.ID, data []byte) {
	if c == nil || int64(len(data)) > c.max {
		return
	}
	c.mu.Lock()
	_, ok := c.items[id]
	c.mu.Unlock()
	if ok {
		return
	}
	p := c.path(id)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[id]; ok {
		return
	}
	c.items[id] = c.lru.PushFront(cacheItem{id, int64(len(data))})
	c.size += int64(len(data))
	c.evict()
}

// evict removes least recently used chunks until the cache fits; c.mu held.
func (c *chunkCache) evict() {
	for c.size > c.max {
		e := c.lru.Back()
		if e == nil {
			return
		}
		id := e.Value.(cacheItem).id
		c.remove(e)
		os.Remove(c.path(id))
	}
}

func (c *chunkCache) remove(e *list.Element) {
	it := e.Value.(cacheItem)
	c.lru.Remove(e)
	delete(c.items, it.id)
	c.size -= it.size
}

// bytes is what the cache holds.
func (c *chunkCache) bytes() int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}
