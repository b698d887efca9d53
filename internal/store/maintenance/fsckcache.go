package maintenance

import (
	"errors"
	"io/fs"
	"os"
	"sync"

	"layerfs.dev/layerfs/internal/store/object"
)

// fsckCacheWorkers check the cache's files in parallel: most are small,
// and an open and a read cost more waiting than hashing.
const fsckCacheWorkers = 4

// cacheFiles checks every file of the cache of contents against its
// content's ID, as a workspace's first use does (trust.go), whether this
// process trusts it or not: a file damaged since it was trusted is found
// here. A file that is no content of the index is left to the gc.
func (c *checker) cacheFiles() error {
	type file struct {
		ct   Content
		path string
	}
	files := make(chan file)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range fsckCacheWorkers {
		wg.Go(func() {
			for f := range files {
				detail, checked := c.cacheFile(f.ct, f.path)
				mu.Lock()
				if checked {
					c.rep.CacheFiles++
					c.rep.CacheBytes += f.ct.Size
				}
				if detail != "" {
					c.rep.add("cache", f.ct.ID, f.path, "%s", detail)
				}
				mu.Unlock()
			}
		})
	}
	err := c.s.Cache.Each(func(id object.ID, path string) error {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		if ct, ok := c.content(id); ok {
			files <- file{ct, path}
		}
		return nil
	})
	close(files)
	wg.Wait()
	if err == nil {
		err = c.ctx.Err()
	}
	return err
}

// cacheFile checks the cache file at path of the content ct: it reports
// what is wrong with it ("" if nothing) and whether it was there to
// check.
func (c *checker) cacheFile(ct Content, path string) (string, bool) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false // evicted meanwhile
	}
	if err != nil {
		return "open: " + err.Error(), false
	}
	defer f.Close()
	if err := c.s.CheckCacheFile(c.ctx, ct, f); err != nil && c.ctx.Err() == nil {
		return err.Error(), true
	}
	return "", true
}

// content is the content named id, as the index has it.
func (c *checker) content(id object.ID) (Content, bool) {
	if ch, ok := c.chunks[id]; ok {
		return Content{ID: id, Kind: object.KindChunk, Size: ch.len}, true
	}
	if n, ok := c.manifestSize[id]; ok {
		return Content{ID: id, Kind: object.KindManifest, Size: n}, true
	}
	return Content{}, false
}

// RepairCache evicts the cache files rep found damaged (problems of kind
// "cache"), so that their contents are made again from the packs on next
// use, and returns how many it evicted.
func (s *Store) RepairCache(rep FsckReport) (int, error) {
	n := 0
	for _, p := range rep.Problems {
		if p.Kind != "cache" {
			continue
		}
		if err := s.Cache.Remove(p.Object); err != nil {
			return n, err
		}
		s.Log.Warn("evicted a damaged cache file: it will be made again from the packs", "content", p.Object.String(), "path", p.Where)
		n++
	}
	return n, nil
}
