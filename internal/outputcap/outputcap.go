package outputcap

import (
	"bytes"
	"io"
	"reflect"
	"sync"
)

// Writer passes the first limit bytes written to it on to its destination
// and counts the rest as dropped. It is safe for concurrent use; the two
// Writers of a Pair over one destination take turns at it.
type Writer struct {
	mu        *sync.Mutex
	w         io.Writer
	limit, n  int64
	truncated bool
	err       error
}

// New caps w at limit bytes (none when limit is 0 or less: everything is
// dropped); a nil w drops everything too.
func New(w io.Writer, limit int64) *Writer {
	return &Writer{mu: &sync.Mutex{}, w: w, limit: limit}
}

// Pair caps an exec's stdout and stderr at limit bytes each. When both are
// the same writer they share one lock, so that writer, as with os/exec,
// gets one Write at a time.
func Pair(stdout, stderr io.Writer, limit int64) (out, err *Writer) {
	out, err = New(stdout, limit), New(stderr, limit)
	if same(stdout, stderr) {
		err.mu = out.mu
	}
	return out, err
}

// same reports whether a and b are the same comparable writer.
func same(a, b io.Writer) bool {
	if a == nil || b == nil {
		return false
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// Write passes on what fits under the limit and always reports all of p
// written.
func (c *Writer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := p
	if room := c.limit - c.n; int64(len(p)) > room {
		keep = p[:max(room, 0)]
		c.truncated = true
	}
	c.n += int64(len(keep))
	if len(keep) > 0 && c.w != nil && c.err == nil {
		if _, err := c.w.Write(keep); err != nil {
			c.err = err
		}
	}
	return len(p), nil
}

// Truncated reports whether bytes were dropped.
func (c *Writer) Truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.truncated
}

// Err is the destination's first write error, if any.
func (c *Writer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Buffer collects up to a limit of bytes in memory.
type Buffer struct {
	buf bytes.Buffer
	*Writer
}

// NewBuffer collects up to limit bytes.
func NewBuffer(limit int64) *Buffer {
	b := &Buffer{}
	b.Writer = New(&b.buf, limit)
	return b
}

// Bytes is what was kept.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Bytes()
}
