package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/wire/errclass"
)

// Cache files are trusted once per process.
//
// The kernel reads a cache file with no check of its bytes: overlayfs
// reads the data layer itself, FUSE passthrough reads the backing file.
// A file damaged on disk (a failing disk, a stray tool, a user with write
// access to the Store) would be served as committed content. So a content
// is given to the kernel only once this process has checked it against
// its ID (Trust; the check is the Store's, which knows how IDs are made),
// and the overlay's data layer is not the cache directory but this
// process's trusted layer (Layer): a directory, TrustedDir/<process>/,
// laid out as the cache (<xx>/<id>), of hard links to the contents
// trusted so far. A content not linked there is looked up in the
// daemon's view, whose open trusts it first.
//
// A content this process placed from bytes it had checked (Place) is
// trusted without a second read while its inode, size and change time
// are those it had once in place: any write to it, by any process,
// moves its change time (which nobody can set back). A content placed by
// another process, or by this one before a restart, is read and checked.
//
// What is trusted is never checked again in this process's life: a file
// damaged after it was trusted is served until the next start (or until
// fsck evicts it). A trusted layer lives as long as its process holds the
// lock beside it; Open removes those of dead processes.

// TrustedDir is the cache's directory of trusted layers.
const TrustedDir = ".trusted"

// ErrDamaged is a cache file whose bytes are not its content's.
var ErrDamaged = errclass.New(errclass.Corrupt, "damaged cache file")

// trust is this process's trusted layer and what it knows of the cache's
// files.
type trust struct {
	mu      sync.Mutex
	dir     string   // the layer; "" when it could not be made
	lock    *os.File // held while the layer is in use
	made    [256]bool
	trusted map[object.ID]struct{}
	written map[object.ID]fingerprint // placed by this process, checked bytes
	wanted  map[object.ID]int         // contents a workspace's readying waits for (Want)
}

// fingerprint tells a file apart from what it was: its inode, size and
// change time.
type fingerprint struct {
	dev, ino uint64
	size     int64
	ctime    unix.Timespec
}

func fingerprintOf(st *unix.Stat_t) fingerprint {
	return fingerprint{dev: st.Dev, ino: st.Ino, size: st.Size, ctime: st.Ctim}
}

// openTrust removes the trusted layers of dead processes and makes this
// process's.
func (d *Dir) openTrust() error {
	top := filepath.Join(d.root, TrustedDir)
	if err := os.MkdirAll(top, 0o700); err != nil {
		return fmt.Errorf("trusted layer: %w", err)
	}
	if err := removeDeadLayers(top); err != nil {
		return fmt.Errorf("trusted layer: %w", err)
	}
	name := fmt.Sprintf("%d.%d", os.Getpid(), time.Now().UnixNano())
	lock, err := os.OpenFile(filepath.Join(top, name+".lock"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("trusted layer: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return fmt.Errorf("trusted layer: lock: %w", err)
	}
	dir := filepath.Join(top, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		lock.Close()
		return fmt.Errorf("trusted layer: %w", err)
	}
	d.trust = trust{dir: dir, lock: lock, trusted: map[object.ID]struct{}{}, written: map[object.ID]fingerprint{},
		wanted: map[object.ID]int{}}
	return nil
}

// removeDeadLayers removes the layers in top whose lock no process holds.
func removeDeadLayers(top string) error {
	ents, err := os.ReadDir(top)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok {
			if _, err := os.Stat(filepath.Join(top, e.Name()+".lock")); errors.Is(err, fs.ErrNotExist) {
				// A layer whose lock is gone: its process removed
				// the lock last, or died making it.
				if err := os.RemoveAll(filepath.Join(top, e.Name())); err != nil {
					return err
				}
			}
			continue
		}
		f, err := os.Open(filepath.Join(top, e.Name()))
		if err != nil {
			continue
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			err = os.RemoveAll(filepath.Join(top, name))
			if err == nil {
				err = os.Remove(f.Name())
			}
		} else if errors.Is(err, unix.EWOULDBLOCK) {
			err = nil // alive
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// closeTrust removes this process's layer (its mounts are gone by then)
// and lets go of its lock.
func (d *Dir) closeTrust() {
	t := &d.trust
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lock == nil {
		return
	}
	if err := os.RemoveAll(t.dir); err != nil && d.log != nil {
		d.log.Warn("remove the cache's trusted layer", "dir", t.dir, "err", err)
	} else {
		os.Remove(t.lock.Name())
	}
	t.lock.Close()
	t.lock = nil
}

// Layer is the directory of the contents this process trusts, laid out as
// the cache (<xx>/<id>): what the kernel may read with no check.
func (d *Dir) Layer() string { return d.trust.dir }

// Trusted reports whether this process trusts the content id.
func (d *Dir) Trusted(id object.ID) bool {
	t := &d.trust
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.trusted[id]
	return ok
}

// TrustedCount is how many contents this process trusts.
func (d *Dir) TrustedCount() int64 {
	t := &d.trust
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(len(t.trusted))
}

// written records that this process placed the content id, from checked
// bytes, as the file st describes (taken once in place). A content a
// workspace's readying waits for (Want) is trusted at once: it is being
// given to the kernel now, as it was written.
func (d *Dir) written(id object.ID, st *unix.Stat_t) {
	t := &d.trust
	t.mu.Lock()
	if t.written == nil {
		t.mu.Unlock()
		return
	}
	t.written[id] = fingerprintOf(st)
	wanted := t.wanted[id] > 0
	t.mu.Unlock()
	if wanted {
		d.Trust(id, func(*os.File) error { return errChanged })
	}
}

// errChanged is a content this process wrote that changed before it was
// trusted: the Store checks it when next asked.
var errChanged = errors.New("cache file changed since it was written")

// Want marks the contents ids as awaited by a workspace's readying until
// release is called: one this process places meanwhile (a capture's fill,
// a prefetch) is trusted as soon as it is in place, rather than when the
// readying next looks.
func (d *Dir) Want(ids []object.ID) (release func()) {
	t := &d.trust
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		t.wanted[id]++
	}
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, id := range ids {
			if t.wanted[id]--; t.wanted[id] <= 0 {
				delete(t.wanted, id)
			}
		}
	}
}

// Trust makes the content id's cache file one the kernel may read: it
// checks the file (unless this process placed it and it has not changed
// since) with check, which reads the open file and says whether it holds
// the content, then links it into Layer. A file that fails check is
// removed from the cache, and the error wraps ErrDamaged; a missing one
// wraps fs.ErrNotExist. Trusting a content already trusted does nothing
// while its file is in the cache.
func (d *Dir) Trust(id object.ID, check func(f *os.File) error) error {
	path := d.Path(id)
	if d.Trusted(id) {
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		// Removed from the cache by another process: the layer's link
		// goes too, and the content is placed and checked again.
		d.forget(id)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	d.trust.mu.Lock()
	fp, wrote := d.trust.written[id]
	d.trust.mu.Unlock()
	if !wrote || fp != fingerprintOf(&st) {
		if err := check(f); err != nil {
			if errors.Is(err, ErrDamaged) {
				d.evictDamaged(id, path, &st)
			}
			return err
		}
		d.seal(path, &st) // placed by a process that did not seal it

	}
	return d.link(id, f)
}

// link links the trusted file f, the content id, into the layer.
func (d *Dir) link(id object.ID, f *os.File) error {
	t := &d.trust
	if t.dir == "" {
		return errors.New("trust cache file: no trusted layer")
	}
	s := id.String()
	sub := filepath.Join(t.dir, s[:2])
	b, _ := strconv.ParseUint(s[:2], 16, 8)
	t.mu.Lock()
	made := t.made[b]
	t.mu.Unlock()
	if !made {
		if err := os.Mkdir(sub, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("trust cache file: %w", err)
		}
		t.mu.Lock()
		t.made[b] = true
		t.mu.Unlock()
	}
	err := d.dirs.link(int(f.Fd()), filepath.Join(sub, s))
	if errors.Is(err, fs.ErrExist) {
		// Linked by a concurrent Trust, or left by an eviction of
		// another process: the same inode is trusted.
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) == nil && unix.Lstat(filepath.Join(sub, s), &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
			err = nil
		} else if err = os.Remove(filepath.Join(sub, s)); err == nil {
			err = d.dirs.link(int(f.Fd()), filepath.Join(sub, s))
		}
	}
	if err != nil {
		return fmt.Errorf("trust cache file %s: %w", s, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.trusted[id] = struct{}{}
	delete(t.written, id)
	return nil
}

// evictDamaged removes the damaged file path (st) of content id, unless
// it was replaced meanwhile.
func (d *Dir) evictDamaged(id object.ID, path string, st *unix.Stat_t) {
	var now unix.Stat_t
	if unix.Lstat(path, &now) == nil && now.Ino == st.Ino && now.Dev == st.Dev {
		os.Remove(path)
	}
	d.forget(id)
}

// Remove removes the content id from the cache and from the trusted layer
// (fsck's repair of a damaged file).
func (d *Dir) Remove(id object.ID) error {
	err := os.Remove(d.Path(id))
	d.forget(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// forget drops what this process knows of the content id and its link in
// the layer: the content was removed from the cache.
func (d *Dir) forget(id object.ID) {
	t := &d.trust
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.trusted, id)
	delete(t.written, id)
	if t.dir != "" {
		s := id.String()
		os.Remove(filepath.Join(t.dir, s[:2], s))
	}
}

// sweepLayer removes the links of the trusted layer whose content is no
// longer in the cache (removed by another process: the link alone keeps
// the inode).
func (d *Dir) sweepLayer() error {
	t := &d.trust
	if t.dir == "" {
		return nil
	}
	return eachEntry(t.dir, isPrefixDir, func(sub string, e os.DirEntry) error {
		id, err := object.ParseID(e.Name())
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(sub, e.Name()), &st) == nil && st.Nlink < 2 {
			d.forget(id)
		}
		return nil
	})
}

// Each calls fn with every content in the cache and its file's path; it
// stops at fn's first error.
func (d *Dir) Each(fn func(id object.ID, path string) error) error {
	return eachEntry(d.root, isPrefixDir, func(sub string, e os.DirEntry) error {
		id, err := object.ParseID(e.Name())
		if err != nil {
			return nil
		}
		return fn(id, filepath.Join(sub, e.Name()))
	})
}
