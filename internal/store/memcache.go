package store

import (
	"context"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// memCacheLimit bounds the bytes memCache holds.
const memCacheLimit = 1 << 30

// memCache holds file contents in anonymous memory files (memfd) when the
// disk is too full for the cache: reads of committed data keep working
// (on the overlay data path, overlayfs fills the disk with the daemon's
// credentials, so even root's reserved blocks can be gone). A memory file
// backs FUSE passthrough and copy-up like a cache file, through its
// /proc/self/fd path. Entries live until the Store closes; contents not
// held here go to the disk cache again as soon as there is room.
type memCache struct {
	mu    sync.Mutex
	files map[ID]*os.File
	bytes int64
}

// materialize returns the path of a memory file holding e's content, or
// diskErr (the disk cache's failure) when the content does not fit within
// memCacheLimit.
func (c *memCache) materialize(ctx context.Context, db *DB, e *Entry, diskErr error) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.files[e.Object]; f != nil {
		return memPath(f), nil
	}
	if c.bytes+e.Size > memCacheLimit {
		return "", fmt.Errorf("%w (and %d bytes of contents already held in memory)", diskErr, c.bytes)
	}
	fd, err := unix.MemfdCreate("layerfs-"+e.Object.Short(), unix.MFD_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("%w (in memory: %w)", diskErr, err)
	}
	f := os.NewFile(uintptr(fd), "memfd:"+e.Object.Short())
	if err := db.fill(ctx, e, f); err != nil {
		f.Close()
		return "", fmt.Errorf("%w (in memory: %w)", diskErr, err)
	}
	if c.files == nil {
		c.files = map[ID]*os.File{}
	}
	c.files[e.Object] = f
	c.bytes += e.Size
	db.log.Warn("disk full: a committed file's content is held in memory", "object", e.Object.Short(), "bytes", e.Size, "held", c.bytes)
	return memPath(f), nil
}

// path returns the memory file holding id's content, if there is one.
func (c *memCache) path(id ID) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.files[id]; f != nil {
		return memPath(f), true
	}
	return "", false
}

func memPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// close releases the memory files.
func (c *memCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, f := range c.files {
		f.Close()
		delete(c.files, id)
	}
	c.bytes = 0
}
