package store

import (
	"errors"
	"io/fs"
	"os"

	"layerfs.dev/layerfs/internal/store/object"
)

// cacheFiles checks every file of the cache of contents against its
// content's ID, as a workspace's first use does (trust.go), whether this
// process trusts it or not: a file damaged since it was trusted is found
// here. A file that is no content of the index is left to the gc.
func (c *checker) cacheFiles() error {
	return c.db.cache.Each(func(id object.ID, path string) error {
		if err := checkContext(c.ctx); err != nil {
			return err
		}
		ct, ok := c.content(id)
		if !ok {
			return nil
		}
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // evicted meanwhile
		}
		if err != nil {
			c.rep.add("cache", id, path, "open: %v", err)
			return nil
		}
		defer f.Close()
		c.rep.CacheFiles++
		c.rep.CacheBytes += ct.Size
		if err := c.db.checkCacheFile(c.ctx, ct, f); err != nil {
			if cerr := checkContext(c.ctx); cerr != nil {
				return cerr
			}
			c.rep.add("cache", id, path, "%v", err)
		}
		return nil
	})
}

// content is the content named id, as the index has it.
func (c *checker) content(id ID) (Content, bool) {
	if ch, ok := c.chunks[id]; ok {
		return Content{ID: id, Kind: KindChunk, Size: ch.len}, true
	}
	if n, ok := c.manifestSize[id]; ok {
		return Content{ID: id, Kind: KindManifest, Size: n}, true
	}
	return Content{}, false
}

// RepairCache evicts the cache files rep found damaged (problems of kind
// "cache"), so that their contents are made again from the packs on next
// use, and returns how many it evicted.
func (db *DB) RepairCache(rep FsckReport) (int, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range rep.Problems {
		if p.Kind != "cache" {
			continue
		}
		if err := db.cache.Remove(p.Object); err != nil {
			return n, err
		}
		db.log.Warn("evicted a damaged cache file: it will be made again from the packs", "content", p.Object.String(), "path", p.Where)
		n++
	}
	return n, nil
}
