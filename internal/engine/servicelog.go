package engine

import "sync"

// serviceLog is a service's output: the last max bytes of it, in memory,
// with a count of every byte ever written so that a follower reads on from
// where it was. Writes never block (a service must not wait for its
// readers); a follower that falls more than max behind skips what was
// dropped.
type serviceLog struct {
	mu      sync.Mutex
	buf     []byte
	max     int
	total   int64         // bytes ever written
	changed chan struct{} // closed at the next write or Close
	closed  bool
}

func newServiceLog(max int) *serviceLog {
	return &serviceLog{max: max, changed: make(chan struct{})}
}

// Write appends p, dropping the oldest bytes past max.
func (l *serviceLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || len(p) == 0 {
		return len(p), nil
	}
	l.total += int64(len(p))
	if len(p) >= l.max {
		l.buf = append(l.buf[:0], p[len(p)-l.max:]...)
	} else {
		if over := len(l.buf) + len(p) - l.max; over > 0 {
			l.buf = append(l.buf[:0], l.buf[over:]...)
		}
		l.buf = append(l.buf, p...)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// Close ends the log: followers stop once they have read it.
func (l *serviceLog) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.changed)
	}
}

// ReadFrom returns the bytes from offset off on (from the oldest held,
// when off is older), the offset after them, whether the log is closed,
// and a channel closed at the next change.
func (l *serviceLog) ReadFrom(off int64) (b []byte, next int64, closed bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := l.total - int64(len(l.buf))
	off = max(off, first)
	b = append([]byte(nil), l.buf[off-first:]...)
	return b, l.total, l.closed, l.changed
}
