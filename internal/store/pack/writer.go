package pack

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store/object"
)

// bufSize is how much a Writer gathers before it writes: appends reach the
// file in writes of this size (a multiple of directAlign).
const bufSize = 4 << 20

// directAlign is the alignment O_DIRECT writes need, of offsets, lengths
// and memory.
const directAlign = 4096

// Writer appends to one pack file on which it holds an exclusive flock,
// so no other writer (in this process or another) appends to it.
//
// Appends are collected in an aligned buffer that reaches the file in large
// writes. Where the file system supports it the writes use O_DIRECT:
// buffered writes that need fresh page-cache pages are slower than direct
// writes of the same data, and a capture should not evict the page cache
// anyway. Direct writes need aligned offsets and lengths, so the buffer
// starts at the block boundary below the end of what is on disk
// (re-writing that partial block with the same bytes), and a sync pads the
// last block and truncates the padding off.
type Writer struct {
	num  int64
	path string
	f    *os.File // O_RDWR: flock, truncate, fdatasync, buffered fallback
	d    *os.File // O_WRONLY|O_DIRECT, nil where unsupported
	base int64    // file offset of buf[0]; block aligned when d != nil
	size int64    // logical size: base + len(buf)
	// started is how far buffered writeback was started (fallback only).
	started int64
	buf     []byte // cap is bufSize, block aligned
	spare   []byte // the other buffer, being written while inflight is set
	// inflight receives the result of the background write of spare.
	inflight chan error
	full     bool // reached the Set's maximum size: retire after use
}

func alignedBuffer(n int) []byte {
	raw := make([]byte, n+directAlign)
	off := (directAlign - int(uintptr(unsafe.Pointer(&raw[0]))&(directAlign-1))) & (directAlign - 1)
	return raw[off : off : off+n]
}

// openWriter prepares appends at the end of a locked pack file of the
// given size.
func openWriter(num int64, path string, f *os.File, size int64, direct bool) (*Writer, error) {
	w := &Writer{num: num, path: path, f: f, buf: alignedBuffer(bufSize)}
	if direct {
		if d, err := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0); err == nil {
			w.d = d
		}
	}
	if size < int64(len(Magic)) {
		// New, or created by a writer that died before its header landed.
		if err := f.Truncate(0); err != nil {
			w.close()
			return nil, fmt.Errorf("pack %s: %w", path, err)
		}
		w.buf = append(w.buf, Magic...)
		w.size = int64(len(Magic))
		return w, nil
	}
	if err := w.load(size); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// load positions the buffer for appends at size, reading the partial
// block below it when writes are direct.
func (w *Writer) load(size int64) error {
	w.base, w.size, w.started = size, size, size
	w.buf = w.buf[:0]
	if w.d == nil {
		return nil
	}
	w.base = size &^ (directAlign - 1)
	w.buf = w.buf[:size-w.base]
	if _, err := w.f.ReadAt(w.buf, w.base); err != nil {
		return fmt.Errorf("read pack %s: %w", w.path, err)
	}
	return nil
}

// Number is the pack's number.
func (w *Writer) Number() int64 { return w.num }

// End is the pack's size so far.
func (w *Writer) End() int64 { return w.size }

// Retire marks the pack full: the Set closes it when it is released.
func (w *Writer) Retire() { w.full = true }

// Direct reports whether the writer bypasses the page cache (O_DIRECT).
func (w *Writer) Direct() bool { return w.d != nil }

func (w *Writer) close() error {
	w.wait()
	var err error
	if w.d != nil {
		err = w.d.Close()
	}
	return errors.Join(err, w.f.Close())
}

// Append adds one record and returns the payload's offset.
func (w *Writer) Append(id object.ID, data []byte) (int64, error) {
	hdr := Header(id, len(data))
	off := w.size + HeaderSize
	for _, part := range [][]byte{hdr[:], data} {
		for len(part) > 0 {
			if len(w.buf) == cap(w.buf) {
				if err := w.writeFull(); err != nil {
					return 0, err
				}
			}
			n := copy(w.buf[len(w.buf):cap(w.buf)], part)
			w.buf = w.buf[:len(w.buf)+n]
			part = part[n:]
		}
	}
	w.size += int64(len(hdr) + len(data))
	return off, nil
}

// writeFull hands the full buffer to a background write and continues in
// the spare one, so that filling one buffer (the caller hashing and
// appending) overlaps with the disk taking the other. At most one write is
// in flight; its error surfaces at the next writeFull, Sync or Rollback.
func (w *Writer) writeFull() error {
	if err := w.wait(); err != nil {
		return err
	}
	if w.spare == nil {
		w.spare = alignedBuffer(bufSize)
	}
	full, at := w.buf, w.base
	w.base += int64(len(full))
	w.buf, w.spare = w.spare[:0], full
	done := make(chan error, 1)
	w.inflight = done
	go func() { done <- w.writeAt(full, at) }()
	return nil
}

// wait waits for the write in flight, if any.
func (w *Writer) wait() error {
	if w.inflight == nil {
		return nil
	}
	err := <-w.inflight
	w.inflight = nil
	return err
}

func (w *Writer) writeAt(b []byte, at int64) error {
	if w.d != nil {
		if _, err := w.d.WriteAt(b, at); err != nil {
			return fmt.Errorf("write pack %s: %w", w.path, err)
		}
		return nil
	}
	if _, err := w.f.WriteAt(b, at); err != nil {
		return fmt.Errorf("write pack %s: %w", w.path, err)
	}
	// Start writeback now so that Sync has little left to wait for.
	end := at + int64(len(b))
	if err := unix.SyncFileRange(int(w.f.Fd()), w.started, end-w.started, unix.SYNC_FILE_RANGE_WRITE); err == nil {
		w.started = end
	}
	return nil
}

// Sync makes everything appended durable.
func (w *Writer) Sync() error {
	if err := w.wait(); err != nil {
		return err
	}
	if n := len(w.buf); n > 0 {
		if w.d != nil {
			// Pad to the block size, write, cut the padding off, and keep
			// the partial last block for the next append.
			padded := (n + directAlign - 1) &^ (directAlign - 1)
			clear(w.buf[n:padded])
			if err := w.writeAt(w.buf[:padded], w.base); err != nil {
				return err
			}
			if padded != n {
				if err := w.f.Truncate(w.size); err != nil {
					return fmt.Errorf("truncate pack %s: %w", w.path, err)
				}
			}
			keep := n &^ (directAlign - 1)
			copy(w.buf, w.buf[keep:n])
			w.buf = w.buf[:n-keep]
			w.base += int64(keep)
		} else {
			if err := w.writeAt(w.buf, w.base); err != nil {
				return err
			}
			w.base += int64(n)
			w.buf = w.buf[:0]
		}
	}
	if err := unix.Fdatasync(int(w.f.Fd())); err != nil {
		return fmt.Errorf("sync pack %s: %w", w.path, err)
	}
	return nil
}

// Rollback forgets everything appended since the file was size bytes long.
// Safe because this writer holds the pack's exclusive flock and no index
// row points past size.
func (w *Writer) Rollback(size int64) error {
	w.wait() // its bytes are being cut off anyway
	if err := w.f.Truncate(size); err != nil {
		return fmt.Errorf("truncate pack %s: %w", w.path, err)
	}
	return w.load(size)
}
