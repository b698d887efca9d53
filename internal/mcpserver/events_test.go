package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is a test's clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time          { return c.now }
func (c *clock) advance(d time.Duration) { c.now = c.now.Add(d) }

func newTestStore(limits StreamLimits) (*eventStore, *clock) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	return newEventStore(limits, c.Now), c
}

// replay is After's events as strings, or its error.
func replay(s *eventStore, session, stream string, index int) ([]string, error) {
	var out []string
	for d, err := range s.After(context.Background(), session, stream, index) {
		if err != nil {
			return out, err
		}
		out = append(out, string(d))
	}
	return out, nil
}

// appendAll opens the stream (as the SDK does first) and appends data.
func appendAll(t *testing.T, s *eventStore, session, stream string, data ...string) {
	t.Helper()
	require.NoError(t, s.Open(context.Background(), session, stream))
	for _, d := range data {
		var b []byte
		if d != "" {
			b = []byte(d)
		}
		require.NoError(t, s.Append(context.Background(), session, stream, b))
	}
}

func TestEventStoreReplay(t *testing.T) {
	s, _ := newTestStore(StreamLimits{})
	ctx := context.Background()
	require.NoError(t, s.Open(ctx, "S", "a"))
	appendAll(t, s, "S", "a", "", "one", "two") // the priming event (no data) is #0

	for _, tc := range []struct {
		index int
		want  []string
		err   error
	}{
		{-1, []string{"", "one", "two"}, nil},
		{0, []string{"one", "two"}, nil},
		{2, nil, nil},
		{3, nil, errNeverSent},
		{99, nil, errNeverSent},
	} {
		got, err := replay(s, "S", "a", tc.index)
		if tc.err != nil {
			assert.ErrorIs(t, err, tc.err, "after #%d", tc.index)
			continue
		}
		require.NoError(t, err, "after #%d", tc.index)
		assert.Equal(t, tc.want, got, "after #%d", tc.index)
	}
	_, err := replay(s, "S", "b", 0)
	assert.ErrorIs(t, err, errNoStream)
	_, err = replay(s, "other session", "a", 0)
	assert.ErrorIs(t, err, errNoStream, "a session's streams are its own")
	known, err := s.check("other session", "a", 0)
	assert.False(t, known)
	assert.NoError(t, err)
	known, err = s.check("S", "a", 3)
	assert.True(t, known)
	assert.ErrorIs(t, err, errNeverSent)
}

// TestEventStoreBounds: each bound drops the oldest events first, and a
// resumption from before them is refused with that bound as the reason.
func TestEventStoreBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits StreamLimits
		run    func(t *testing.T, s *eventStore, c *clock)
		why    string
	}{
		{"age", StreamLimits{}, func(t *testing.T, s *eventStore, c *clock) {
			appendAll(t, s, "S", "a", "0", "1")
			c.advance(6 * time.Minute)
			appendAll(t, s, "S", "a", "2")
			c.advance(5 * time.Minute) // #0 and #1 are 11 minutes old, #2 five
		}, "events are kept for 10m0s"},
		{"stream bytes", StreamLimits{MaxStreamBytes: 10}, func(t *testing.T, s *eventStore, _ *clock) {
			appendAll(t, s, "S", "a", "aaaa", "bbbb", "cccc", "dddd")
			appendAll(t, s, "T", "x", "kept")
		}, "a stream keeps its newest 10 bytes"},
		{"total bytes", StreamLimits{MaxBytes: 10}, func(t *testing.T, s *eventStore, _ *clock) {
			appendAll(t, s, "S", "a", "aaaa", "bbbb", "cccc")
			appendAll(t, s, "T", "x", "dddd") // S's #0 and #1 go
		}, "the server keeps 10 bytes of events in all"},
		{"count", StreamLimits{MaxEvents: 2}, func(t *testing.T, s *eventStore, _ *clock) {
			appendAll(t, s, "S", "a", "", "x", "w") // empty events count too
			appendAll(t, s, "T", "x", "y")          // S's #0 and #1 go
		}, "the server keeps 2 events in all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := newTestStore(tc.limits)
			tc.run(t, s, c)
			_, err := replay(s, "S", "a", 0)
			require.ErrorIs(t, err, mcp.ErrEventsPurged)
			assert.Contains(t, err.Error(), tc.why)
			got, err := replay(s, "S", "a", -1)
			require.NoError(t, err, "a new stream gets what is kept")
			assert.NotEmpty(t, got)
			// What is kept of the stream is replayed from the first kept.
			st := s.sessions["S"]["a"]
			got, err = replay(s, "S", "a", st.first-1)
			require.NoError(t, err)
			assert.Len(t, got, len(st.events))
			assertTotals(t, s)
		})
	}
}

// TestEventStoreForget: a stream whose events all expired still says so
// for MaxAge, then is forgotten; an event appended to a forgotten stream
// (its call still open) makes it one that no resumption can be served
// from, rather than one with the wrong numbering.
func TestEventStoreForget(t *testing.T) {
	s, c := newTestStore(StreamLimits{})
	appendAll(t, s, "S", "a", "0", "1")
	c.advance(11 * time.Minute)
	_, err := replay(s, "S", "a", 0)
	require.ErrorIs(t, err, mcp.ErrEventsPurged)
	assert.Contains(t, err.Error(), "events are kept for 10m0s")

	c.advance(10 * time.Minute)
	_, err = replay(s, "S", "a", 0)
	require.ErrorIs(t, err, errNoStream)

	require.NoError(t, s.Append(context.Background(), "S", "a", []byte("2"))) // no Open: the SDK's stream goes on
	_, err = replay(s, "S", "a", 1)
	require.ErrorIs(t, err, mcp.ErrEventsPurged)
	assert.Contains(t, err.Error(), "forgotten")
	got, err := replay(s, "S", "a", -1)
	require.NoError(t, err)
	assert.Equal(t, []string{"2"}, got)
	assertTotals(t, s)
}

func TestEventStoreSessionClosed(t *testing.T) {
	s, _ := newTestStore(StreamLimits{})
	appendAll(t, s, "S", "a", "one", "two")
	appendAll(t, s, "S", "b", "three")
	appendAll(t, s, "T", "a", "four")
	require.NoError(t, s.SessionClosed(context.Background(), "S"))
	_, err := replay(s, "S", "a", 0)
	assert.ErrorIs(t, err, errNoStream)
	got, err := replay(s, "T", "a", -1)
	require.NoError(t, err)
	assert.Equal(t, []string{"four"}, got)
	assert.Equal(t, 4, s.bytes)
	assert.Equal(t, 1, s.count)
	assertTotals(t, s)
}

// TestEventStoreCompact: the age order does not grow with the events one
// stream's own bound dropped.
func TestEventStoreCompact(t *testing.T) {
	s, _ := newTestStore(StreamLimits{MaxStreamBytes: 100})
	for i := range 20000 {
		appendAll(t, s, "S", "a", fmt.Sprintf("%09d", i))
	}
	assert.Equal(t, 11, s.count, "11 events of 9 bytes fit in 100")
	assert.LessOrEqual(t, len(s.order), 2*s.count+1024)
	got, err := replay(s, "S", "a", 20000-11-1)
	require.NoError(t, err)
	assert.Len(t, got, 11)
	assert.Equal(t, "000019999", got[10])
	assertTotals(t, s)
}

func TestEventStoreCall(t *testing.T) {
	s, _ := newTestStore(StreamLimits{})
	require.NoError(t, s.Open(context.Background(), "S", "a"))
	_, ok := s.callOf("S", "a")
	assert.False(t, ok)
	id, err := jsonrpc.MakeID(float64(7))
	require.NoError(t, err)
	s.bindCall("S", "a", id)
	s.bindCall("S", "nope", id) // a stream the store does not have: nothing
	got, ok := s.callOf("S", "a")
	assert.True(t, ok)
	assert.Equal(t, id, got)
	_, ok = s.callOf("S", "nope")
	assert.False(t, ok)
}

// assertTotals checks the store's totals against its streams.
func assertTotals(t *testing.T, s *eventStore) {
	t.Helper()
	bytes, count := 0, 0
	for _, streams := range s.sessions {
		for _, st := range streams {
			n := 0
			for _, e := range st.events {
				n += len(e.data)
			}
			assert.Equal(t, n, st.bytes)
			bytes += n
			count += len(st.events)
		}
	}
	assert.Equal(t, bytes, s.bytes, "bytes")
	assert.Equal(t, count, s.count, "count")
	stale := 0
	for _, q := range s.order {
		if q.index < q.stream.first {
			stale++
		}
	}
	assert.Equal(t, stale, s.stale, "stale entries")
	assert.Equal(t, count, len(s.order)-stale, "live entries")
}

func TestParseEventID(t *testing.T) {
	for _, tc := range []struct {
		id     string
		stream string
		index  int
		ok     bool
	}{
		{"ABC_0", "ABC", 0, true},
		{"ABC_12", "ABC", 12, true},
		{"_3", "", 3, true}, // the standalone stream
		{"ABC", "", 0, false},
		{"ABC_", "", 0, false},
		{"ABC_-1", "", 0, false},
		{"A_B_1", "", 0, false},
		{"ABC_x", "", 0, false},
	} {
		stream, index, ok := parseEventID(tc.id)
		assert.Equal(t, tc.ok, ok, tc.id)
		if tc.ok {
			assert.Equal(t, tc.stream, stream, tc.id)
			assert.Equal(t, tc.index, index, tc.id)
		}
	}
	stream, ok := firstStreamID([]byte("event: prime\nid: XYZ_0\ndata: \n\n"))
	assert.True(t, ok)
	assert.Equal(t, "XYZ", stream)
	_, ok = firstStreamID([]byte(": ok\n\n"))
	assert.False(t, ok)
	assert.False(t, errors.Is(nil, errNoStream))
}
