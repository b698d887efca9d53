package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/flock"
	"layerfs.dev/layerfs/wire/errclass"
)

// Cache files are written without an fsync each.
//
// The kernel reads a content in the cache (the overlay's data layer) with
// no check of its bytes, so a cache file in place must be whole even after
// the host stops. An fsync per file made it so at the price of a journal
// commit per content, most of the cost of a first read of a content.
// Instead, a process about to write cache files opens a window: a marker
// in cache/.unsynced, named by the boot and the process
// (BOOT.PID.NANOSECONDS), holding the time
// the window opened, written and fsynced (with its directory) before any
// cache file it covers, and held with an exclusive flock. Once the process
// has written nothing for writebackIdle, it syncs the file system
// (syncfs) and removes the marker. An Open of the cache that finds a
// marker nobody holds:
//
//   - of this boot (its process died): the page cache still holds what
//     the process wrote; the open syncs and removes the marker;
//   - of another boot: the host stopped inside the window, so a cache file
//     changed since the window opened (its ctime, which the inode carries
//     with the directory entry in the file system's journal) may have lost
//     data: every such file is removed, to be materialized again.
//
// A window's time is taken WindowMargin before the marker is made, so
// that the file system's coarse clock cannot stamp a file of the window
// earlier than the marker says.

// UnsyncedDir is the directory of the cache that holds the write-back
// markers.
const UnsyncedDir = ".unsynced"

// WindowMargin is how long before its marker is made a window's time is
// taken; writebackIdle is how long a process writes nothing before it
// syncs and closes its window.
const (
	WindowMargin  = 2 * time.Second
	writebackIdle = 2 * time.Second
)

// writeback keeps one process's window of unsynced cache files.
type writeback struct {
	dir string // the cache directory
	log *slog.Logger

	mu     sync.Mutex
	marker *os.File // held while this process has unsynced cache files
	active int      // cache writes under way
	ended  uint64   // cache writes ended, ever
	timer  *time.Timer
	closed bool
}

// begin is called before a cache file is written: it opens the window if
// none is open. Each begin that succeeds is followed by one end, once the
// file is in place or dropped.
func (w *writeback) begin() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.marker == nil {
		m, err := openMarker(w.dir)
		if err != nil {
			return fmt.Errorf("cache write-back marker: %w", err)
		}
		w.marker = m
	}
	w.active++
	return nil
}

// end closes a write begun by begin and schedules the sync.
func (w *writeback) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.active--
	w.ended++
	if w.timer == nil && !w.closed {
		w.timer = time.AfterFunc(writebackIdle, w.tick)
	}
}

// tick syncs the window once writes have stopped, and closes it when
// none ended or is under way since the sync began.
func (w *writeback) tick() {
	w.mu.Lock()
	w.timer = nil
	if w.marker == nil || w.closed {
		w.mu.Unlock()
		return
	}
	ended := w.ended
	w.mu.Unlock()
	err := syncDir(w.dir)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.marker == nil {
		return
	}
	if err != nil {
		w.log.Warn("sync the Store's cache", "err", err)
	}
	if err != nil || w.ended != ended || w.active > 0 {
		w.timer = time.AfterFunc(writebackIdle, w.tick)
		return
	}
	w.dropMarker()
}

// sync syncs the window now and closes it (for tests and callers that
// need the cache durable at once).
func (w *writeback) sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.marker == nil {
		return nil
	}
	// Under the lock: no write begins or ends until the marker is gone.
	if w.active > 0 {
		return fmt.Errorf("sync the Store's cache: %d writes under way: %w", w.active, errclass.Busy)
	}
	if err := syncDir(w.dir); err != nil {
		return fmt.Errorf("sync the Store's cache: %w", err)
	}
	w.dropMarker()
	return nil
}

// close stops the window's timer and lets go of the marker without a
// sync: the next open of the Store syncs it, or, after a stop of the
// host, removes what it covers.
func (w *writeback) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if w.marker != nil {
		w.marker.Close()
		w.marker = nil
	}
}

func (w *writeback) dropMarker() {
	if err := os.Remove(w.marker.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.log.Warn("remove the cache's write-back marker", "err", err)
	}
	w.marker.Close()
	w.marker = nil
}

// openMarker makes, locks and syncs a new marker of this process.
func openMarker(cacheDir string) (*os.File, error) {
	boot, err := bootID()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cacheDir, UnsyncedDir)
	if err := os.Mkdir(dir, 0o700); err == nil {
		if err := fsyncDir(cacheDir); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	since := time.Now().Add(-WindowMargin).UnixNano()
	name := fmt.Sprintf("%s.%d.%d", boot, os.Getpid(), time.Now().UnixNano())
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		_, err = f.WriteString(strconv.FormatInt(since, 10))
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = fsyncDir(dir)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// recoverCache settles the markers of cache/.unsynced that no process
// holds (see the top of this file) before the Store serves its cache.
func recoverCache(ctx context.Context, cacheDir string, log *slog.Logger) error {
	dir := filepath.Join(cacheDir, UnsyncedDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cache write-back markers: %w", err)
	}
	boot, err := bootID()
	if err != nil {
		return err
	}
	var taken []*os.File
	defer func() {
		for _, f := range taken {
			f.Close()
		}
	}()
	since := int64(math.MaxInt64)
	for _, e := range ents {
		mboot, _, _ := strings.Cut(e.Name(), ".")
		f, ok, err := takeMarker(ctx, filepath.Join(dir, e.Name()), mboot != boot)
		if err != nil {
			return fmt.Errorf("cache write-back marker %s: %w", e.Name(), err)
		}
		if !ok {
			continue
		}
		taken = append(taken, f)
		if mboot == boot {
			continue
		}
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		t, err := strconv.ParseInt(string(b[:n]), 10, 64)
		if err != nil {
			t = 0 // unreadable: every cache file is suspect
		}
		since = min(since, t)
	}
	if len(taken) == 0 {
		return nil
	}
	if since != math.MaxInt64 {
		n, err := removeChangedSince(cacheDir, since)
		if err != nil {
			return fmt.Errorf("remove cache files of an unsynced window: %w", err)
		}
		log.Warn("the host stopped before the Store's cache was synced: removed the cache files written since", "files", n, "since", time.Unix(0, since).UTC())
	}
	if err := syncDir(cacheDir); err != nil {
		return fmt.Errorf("sync the Store's cache: %w", err)
	}
	for _, f := range taken {
		if err := os.Remove(f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// takeMarker locks the marker at path if no live process holds it. A
// marker of another boot can be held only by another open recovering it:
// wait for that one to finish (wait), rather than serve the cache while
// files are removed.
func takeMarker(ctx context.Context, path string, wait bool) (*os.File, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if wait {
		err = flock.Lock(ctx, f, unix.LOCK_EX)
	} else {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return nil, false, nil
	}
	if err != nil {
		f.Close()
		return nil, false, err
	}
	// Settled and removed by another open while this one waited?
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil || a.Ino != b.Ino {
		f.Close()
		return nil, false, nil
	}
	return f, true, nil
}

// removeChangedSince removes the content files of the cache whose ctime
// is at or after since (Unix nanoseconds) and returns how many it removed.
func removeChangedSince(cacheDir string, since int64) (int, error) {
	n := 0
	err := eachEntry(cacheDir, isPrefixDir, func(sub string, e os.DirEntry) error {
		p := filepath.Join(sub, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil || st.Ctim.Nano() < since {
			return nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		n++
		return nil
	})
	return n, err
}

// isPrefixDir reports whether name is a cache directory of contents: two
// lower-case hex digits.
func isPrefixDir(name string) bool {
	const hex = "0123456789abcdef"
	return len(name) == 2 && strings.IndexByte(hex, name[0]) >= 0 && strings.IndexByte(hex, name[1]) >= 0
}

// syncDir syncs the file system holding dir.
func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// fsyncDir makes dir's entries durable.
func fsyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// bootID names this boot of the host.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
