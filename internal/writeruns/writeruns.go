package writeruns

// Size is the run a Writer gathers by default: the largest folio the page
// cache makes on x86-64 (a PMD, 2 MiB).
const Size = 2 << 20

// Writer gathers contiguous data into runs of up to its buffer's size and
// hands each run to its write function, with the run's offset.
type Writer struct {
	write func(b []byte, off int64) error
	buf   []byte
	off   int64 // where buf starts
}

// New returns a Writer that starts at offset 0 and writes runs of up to
// size bytes with write.
func New(size int, write func(b []byte, off int64) error) *Writer {
	return &Writer{write: write, buf: make([]byte, 0, size)}
}

// NewInto is New with the runs gathered in buf (of any length; its
// capacity is the run size), for a caller that reuses buffers.
func NewInto(buf []byte, write func(b []byte, off int64) error) *Writer {
	return &Writer{write: write, buf: buf[:0]}
}

// Write appends data at the current offset.
func (w *Writer) Write(data []byte) error {
	for len(data) > 0 {
		n := min(len(data), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, data[:n]...)
		data = data[n:]
		if len(w.buf) == cap(w.buf) {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Skip leaves n bytes unwritten (a hole) at the current offset.
func (w *Writer) Skip(n int64) error {
	if err := w.Flush(); err != nil {
		return err
	}
	w.off += n
	return nil
}

// Flush writes what is gathered.
func (w *Writer) Flush() error {
	if len(w.buf) > 0 {
		if err := w.write(w.buf, w.off); err != nil {
			return err
		}
	}
	w.off += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}
