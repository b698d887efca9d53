package cache

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store/object"
)

// memLimit bounds the bytes memFiles holds.
const memLimit = 1 << 30

// memFiles holds file contents in anonymous memory files (memfd) when the
// disk is too full for the cache: reads of committed data keep working
// (on the overlay data path, overlayfs fills the disk with the daemon's
// credentials, so even root's reserved blocks can be gone). A memory file
// backs FUSE passthrough and copy-up like a cache file, through its
// /proc/self/fd path. Entries live until the cache closes; contents not
// held here go to the disk cache again as soon as there is room.
type memFiles struct {
	mu    sync.Mutex
	files map[object.ID]*os.File
	bytes int64
}

// PutInMemory returns the path of a memory file holding the content id of
// size bytes, made by fill (given the empty file) unless one is held
// already, or diskErr (the disk cache's failure) when the content does not
// fit within memLimit.
func (d *Dir) PutInMemory(id object.ID, size int64, fill func(*os.File) error, diskErr error) (string, error) {
	c := &d.mem
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.files[id]; f != nil {
		return memPath(f), nil
	}
	if c.bytes+size > memLimit {
		return "", fmt.Errorf("%w (and %d bytes of contents already held in memory)", diskErr, c.bytes)
	}
	fd, err := unix.MemfdCreate("layerfs-"+id.Short(), unix.MFD_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("%w (in memory: %w)", diskErr, err)
	}
	f := os.NewFile(uintptr(fd), "memfd:"+id.Short())
	if err := fill(f); err != nil {
		f.Close()
		return "", fmt.Errorf("%w (in memory: %w)", diskErr, err)
	}
	if c.files == nil {
		c.files = map[object.ID]*os.File{}
	}
	c.files[id] = f
	c.bytes += size
	d.log.Warn("disk full: a committed file's content is held in memory", "object", id.Short(), "bytes", size, "held", c.bytes)
	return memPath(f), nil
}

// InMemory returns the memory file holding id's content, if there is one.
func (d *Dir) InMemory(id object.ID) (string, bool) {
	c := &d.mem
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.files[id]; f != nil {
		return memPath(f), true
	}
	return "", false
}

func memPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// close releases the memory files.
func (c *memFiles) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, f := range c.files {
		f.Close()
		delete(c.files, id)
	}
	c.bytes = 0
}
