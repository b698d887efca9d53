package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StreamLimits bounds what the HTTP transport keeps of its SSE streams so
// that a client whose connection dropped can resume one with Last-Event-ID.
// Zero fields take the defaults.
type StreamLimits struct {
	// MaxAge is how long an event is kept after it was sent (default 10
	// minutes).
	MaxAge time.Duration
	// MaxBytes bounds the events of all sessions together (default 32 MiB);
	// past it the oldest go first.
	MaxBytes int
	// MaxStreamBytes bounds one stream, such as one exec's output (default
	// 8 MiB); past it the stream's oldest events go first.
	MaxStreamBytes int
	// MaxEvents bounds the number of events of all sessions together,
	// empty ones included (default 65,536).
	MaxEvents int
	// Retry is the SSE retry field every stream starts with: how long a
	// client waits before it reconnects after a dropped connection (default
	// one second).
	Retry time.Duration
}

// The defaults of StreamLimits.
const (
	DefaultStreamMaxAge   = 10 * time.Minute
	DefaultStreamMaxBytes = 32 << 20
	DefaultMaxStreamBytes = 8 << 20
	DefaultStreamEvents   = 1 << 16
	DefaultStreamRetry    = time.Second
)

func (l StreamLimits) withDefaults() StreamLimits {
	if l.MaxAge <= 0 {
		l.MaxAge = DefaultStreamMaxAge
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultStreamMaxBytes
	}
	if l.MaxStreamBytes <= 0 {
		l.MaxStreamBytes = DefaultMaxStreamBytes
	}
	if l.MaxEvents <= 0 {
		l.MaxEvents = DefaultStreamEvents
	}
	if l.Retry <= 0 {
		l.Retry = DefaultStreamRetry
	}
	return l
}

// Errors of a resumption that cannot be served.
var (
	// errNoStream: the session has no such stream (it never had one, or
	// the stream's events all expired and it was forgotten).
	errNoStream = errors.New("no such stream in this session")
	// errNeverSent: the event index is past the stream's newest event.
	errNeverSent = errors.New("no such event was sent on this stream")
)

// eventStore is the SDK's EventStore for the HTTP transport, in memory and
// bounded by StreamLimits: events are kept per session and stream, in the
// order the SDK numbers them (index i of a stream is its i-th event, the
// priming event 0 included), and dropped oldest first when they are older
// than MaxAge or over a bound. A stream whose events were dropped still
// knows where they ended, so a resumption from before that point is refused
// with the reason (mcp.ErrEventsPurged wrapped) rather than silently given
// a gap; a stream with no event left is forgotten MaxAge after its last
// event expired (then errNoStream), and a session's streams go when the SDK
// closes the session.
//
// Only the SDK calls it, with the session ID of the request's own
// Mcp-Session-Id, so a session's events are only ever given to that
// session.
type eventStore struct {
	limits StreamLimits
	now    func() time.Time

	mu        sync.Mutex
	sessions  map[string]map[string]*streamEvents // session ID -> stream ID -> events
	order     []queued                            // every event appended, oldest first
	stale     int                                 // entries of order whose event is already gone
	bytes     int                                 // data kept, all sessions
	count     int                                 // events kept, all sessions
	lastSweep time.Time
}

// streamEvents is what is kept of one stream.
type streamEvents struct {
	first   int      // the index of events[0]
	events  []stored // the kept events, oldest first
	bytes   int      // their data
	last    time.Time
	dropped string // why the events before first are gone ("" when none are)
	lost    bool   // the stream was forgotten while open: its indexes are not the SDK's
	call    jsonrpc.ID
}

type stored struct {
	data []byte
	at   time.Time
}

// queued is an event in the store's age order.
type queued struct {
	stream *streamEvents
	index  int
}

var _ mcp.EventStore = (*eventStore)(nil)

func newEventStore(limits StreamLimits, now func() time.Time) *eventStore {
	if now == nil {
		now = time.Now
	}
	return &eventStore{limits: limits.withDefaults(), now: now, sessions: map[string]map[string]*streamEvents{}}
}

// Open implements mcp.EventStore: the SDK opens each stream before its
// first event.
func (s *eventStore) Open(_ context.Context, sessionID, streamID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.purge(now)
	streams := s.session(sessionID)
	if _, ok := streams[streamID]; !ok {
		streams[streamID] = &streamEvents{last: now}
	}
	return nil
}

// Append implements mcp.EventStore.
func (s *eventStore) Append(_ context.Context, sessionID, streamID string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	streams := s.session(sessionID)
	st, ok := streams[streamID]
	if !ok {
		// The stream was forgotten (no event for twice MaxAge) while its
		// request was still open: the index of this event is the SDK's
		// alone now, so no resumption of this stream can be served.
		st = &streamEvents{lost: true, dropped: fmt.Sprintf("the stream sent nothing for %v and was forgotten", 2*s.limits.MaxAge)}
		streams[streamID] = st
	}
	index := st.first + len(st.events)
	st.events = append(st.events, stored{data: data, at: now})
	st.bytes += len(data)
	st.last = now
	s.bytes += len(data)
	s.count++
	s.order = append(s.order, queued{stream: st, index: index})
	for st.bytes > s.limits.MaxStreamBytes && len(st.events) > 1 {
		s.dropFirst(st, fmt.Sprintf("a stream keeps its newest %d bytes", s.limits.MaxStreamBytes))
	}
	s.purge(now)
	return nil
}

// After implements mcp.EventStore: the events of the stream after index,
// or an error if any of them is gone. Index -1 is a new stream (a GET
// without Last-Event-ID): it gets what is kept, whatever was dropped.
func (s *eventStore) After(_ context.Context, sessionID, streamID string, index int) iter.Seq2[[]byte, error] {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purge(s.now())
	data, err := s.after(sessionID, streamID, index)
	return func(yield func([]byte, error) bool) {
		if err != nil {
			yield(nil, err)
			return
		}
		for _, d := range data {
			if !yield(d, nil) {
				return
			}
		}
	}
}

// after is After under s.mu: a copy of the data to replay.
func (s *eventStore) after(sessionID, streamID string, index int) ([][]byte, error) {
	st, ok := s.sessions[sessionID][streamID]
	if !ok {
		return nil, fmt.Errorf("%w (a stream's events are kept for %v)", errNoStream, s.limits.MaxAge)
	}
	next := st.first + len(st.events)
	switch {
	case index == -1:
		index = st.first - 1
	case st.lost:
		return nil, fmt.Errorf("the events of this stream are gone (%s): %w", st.dropped, mcp.ErrEventsPurged)
	case index >= next:
		return nil, fmt.Errorf("%w: the newest is #%d", errNeverSent, next-1)
	case index+1 < st.first:
		return nil, fmt.Errorf("the events after #%d are gone (%s): %w", index, st.dropped, mcp.ErrEventsPurged)
	}
	out := make([][]byte, 0, next-index-1)
	for _, e := range st.events[index+1-st.first:] {
		out = append(out, e.data)
	}
	return out, nil
}

// check reports whether the session is known and, if it is, whether a
// resumption of the stream after index can be served (After's error).
func (s *eventStore) check(sessionID, streamID string, index int) (known bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purge(s.now())
	if _, ok := s.sessions[sessionID]; !ok {
		return false, nil
	}
	_, err = s.after(sessionID, streamID, index)
	return true, err
}

// bindCall records the JSON-RPC call a stream answers.
func (s *eventStore) bindCall(sessionID, streamID string, call jsonrpc.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sessions[sessionID][streamID]; ok {
		st.call = call
	}
}

// callOf is the call a stream answers, if bindCall recorded it.
func (s *eventStore) callOf(sessionID, streamID string) (jsonrpc.ID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.sessions[sessionID][streamID]
	if !ok || !st.call.IsValid() {
		return jsonrpc.ID{}, false
	}
	return st.call, true
}

// SessionClosed implements mcp.EventStore.
func (s *eventStore) SessionClosed(_ context.Context, sessionID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.sessions[sessionID] {
		for len(st.events) > 0 {
			s.dropFirst(st, "the session closed")
		}
	}
	delete(s.sessions, sessionID)
	s.compact()
	return nil
}

func (s *eventStore) session(id string) map[string]*streamEvents {
	streams, ok := s.sessions[id]
	if !ok {
		streams = map[string]*streamEvents{}
		s.sessions[id] = streams
	}
	return streams
}

// purge drops the oldest events while any is older than MaxAge or the
// store is over MaxBytes or MaxEvents, and forgets the streams that are
// empty and had no event for twice MaxAge (a sweep at most every
// MaxAge/4). Called under s.mu.
func (s *eventStore) purge(now time.Time) {
	for len(s.order) > 0 {
		q := s.order[0]
		if q.index < q.stream.first {
			// Already dropped with its stream's own bound or its session.
			s.popOrder()
			s.stale--
			continue
		}
		at := q.stream.events[0].at
		var why string
		switch {
		case now.Sub(at) > s.limits.MaxAge:
			why = fmt.Sprintf("events are kept for %v", s.limits.MaxAge)
		case s.bytes > s.limits.MaxBytes:
			why = fmt.Sprintf("the server keeps %d bytes of events in all", s.limits.MaxBytes)
		case s.count > s.limits.MaxEvents:
			why = fmt.Sprintf("the server keeps %d events in all", s.limits.MaxEvents)
		default:
			s.compact()
			s.sweep(now)
			return
		}
		s.popOrder()
		s.dropFirst(q.stream, why)
		s.stale-- // dropFirst counted the entry just removed from order
	}
	s.sweep(now)
}

// popOrder removes the oldest entry of s.order. Called under s.mu.
func (s *eventStore) popOrder() {
	s.order[0] = queued{} // the stream may be forgotten: hold no pointer to it
	s.order = s.order[1:]
}

// dropFirst drops a stream's oldest event; its entry in s.order is now
// stale. Called under s.mu.
func (s *eventStore) dropFirst(st *streamEvents, why string) {
	n := len(st.events[0].data)
	st.events[0] = stored{}
	st.events = st.events[1:]
	st.first++
	st.bytes -= n
	st.dropped = why
	s.bytes -= n
	s.count--
	s.stale++
}

// compact rewrites s.order without its stale entries once they are most of
// it, so that it stays within twice the events kept. Called under s.mu.
func (s *eventStore) compact() {
	if s.stale <= len(s.order)/2 || s.stale < 1024 {
		return
	}
	kept := make([]queued, 0, len(s.order)-s.stale)
	for _, q := range s.order {
		if q.index >= q.stream.first {
			kept = append(kept, q)
		}
	}
	s.order, s.stale = kept, 0
}

// sweep forgets the streams that hold no event and had none appended for
// twice MaxAge: for MaxAge after its events expired, a stream still says
// so. Called under s.mu.
func (s *eventStore) sweep(now time.Time) {
	if now.Sub(s.lastSweep) < s.limits.MaxAge/4 {
		return
	}
	s.lastSweep = now
	for _, streams := range s.sessions {
		for id, st := range streams {
			if len(st.events) == 0 && now.Sub(st.last) > 2*s.limits.MaxAge {
				delete(streams, id)
			}
		}
	}
}
