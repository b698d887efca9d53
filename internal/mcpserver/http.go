package mcpserver

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Handler serves streamable HTTP; every request must carry
// "Authorization: Bearer token". Its SSE streams are resumable: each starts
// with a retry field and (from protocol version 2025-11-25) a priming event
// with an id, every event has an id, and the events are kept in memory
// within Config.Streams, so that a client whose connection dropped in the
// middle of a call (a long exec) sends GET with Last-Event-ID and gets the
// events it missed, then the rest as they come. A resumption that cannot be
// served is refused with the reason (see resumable).
func (s *Server) Handler(token string) (http.Handler, error) {
	if token == "" {
		return nil, errors.New("mcpserver: the HTTP transport never runs without a token")
	}
	want := []byte(token)
	verify := func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			return nil, fmt.Errorf("wrong bearer token: %w", auth.ErrInvalidToken)
		}
		// A static token: it lasts as long as the server.
		return &auth.TokenInfo{}, nil
	}
	limits := s.cfg.Streams.withDefaults()
	events := newEventStore(limits, s.cfg.Now)
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{Logger: s.log, EventStore: events})
	front := &resumable{events: events, retry: limits.Retry, next: sdk}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(front), nil
}

// resumable is the front of the SDK's streamable HTTP handler. It starts
// every SSE stream with the retry field (the SDK sends one only when a
// handler closes a stream), notes which call each POST's stream answers,
// and checks a resumption against the event store before the SDK replays
// it, so that one it cannot serve is refused with the reason (the SDK's own
// answer is a bare 400 "failed to replay events"):
//
//   - when the events a call's stream missed are gone, the call is answered
//     on the resumed stream with a JSON-RPC error that says so (the client's
//     call fails with the reason; its session goes on);
//   - otherwise (an id the session never sent, a stream it does not have,
//     a malformed id) the GET gets 400 and a JSON-RPC error.
type resumable struct {
	events *eventStore
	retry  time.Duration
	next   http.Handler
}

// Header names of the streamable HTTP transport.
const (
	lastEventIDHeader = "Last-Event-ID"
	sessionIDHeader   = "Mcp-Session-Id"
)

// maxPeek bounds the POST bodies read for their call's id (the SDK's
// default bound on a request body): a larger one is left to the SDK.
const maxPeek = mcp.DefaultMaxRequestBodyBytes

func (h *resumable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	session := r.Header.Get(sessionIDHeader)
	sw := &sseWriter{ResponseWriter: w, retry: h.retry}
	switch ids := r.Header.Values(lastEventIDHeader); {
	case r.Method == http.MethodGet && len(ids) > 0:
		if h.refuse(sw, session, ids[0]) {
			return
		}
	case r.Method == http.MethodPost && session != "":
		if call, ok := peekCall(r); ok {
			sw.bind = func(stream string) { h.events.bindCall(session, stream, call) }
		}
	}
	h.next.ServeHTTP(sw, r)
}

// refuse answers a resumption that the event store cannot serve, and
// reports whether it did. A session the store does not know is left to the
// SDK, which answers 404 when the session is gone (a client then starts a
// new one). The store may still drop events between this check and the
// SDK's replay; the SDK then refuses the replay itself.
func (h *resumable) refuse(w *sseWriter, session, eventID string) bool {
	if session == "" {
		return false
	}
	stream, index, ok := parseEventID(eventID)
	if !ok {
		writeRPCError(w, http.StatusBadRequest, fmt.Sprintf("cannot resume from Last-Event-ID %q: not an event id of this server (STREAM_INDEX)", eventID))
		return true
	}
	known, err := h.events.check(session, stream, index)
	if !known || err == nil {
		return false
	}
	if call, ok := h.events.callOf(session, stream); ok && errors.Is(err, mcp.ErrEventsPurged) {
		answerLost(w, call, fmt.Sprintf("cannot resume from Last-Event-ID %q: %v; the call's result and the events it missed cannot be delivered (a command it ran may still be running, or have run)", eventID, err))
		return true
	}
	writeRPCError(w, http.StatusBadRequest, fmt.Sprintf("cannot resume from Last-Event-ID %q: %v", eventID, err))
	return true
}

// peekCall reads a POST's body for the id of the call it carries (one
// message, a request with an id), and puts the body back for the SDK.
func peekCall(r *http.Request) (jsonrpc.ID, bool) {
	if r.Body == nil {
		return jsonrpc.ID{}, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPeek+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if err != nil || len(body) > maxPeek {
		return jsonrpc.ID{}, false
	}
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return jsonrpc.ID{}, false
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return jsonrpc.ID{}, false
	}
	return req.ID, true
}

// parseEventID splits an event id of the SDK's form, "STREAM_INDEX" (the
// stream ids are base32, without "_").
func parseEventID(id string) (stream string, index int, ok bool) {
	stream, n, ok := strings.Cut(id, "_")
	if !ok || strings.Contains(n, "_") {
		return "", 0, false
	}
	index, err := strconv.Atoi(n)
	if err != nil || index < 0 {
		return "", 0, false
	}
	return stream, index, true
}

// writeRPCError answers with a JSON-RPC error of no request (null id).
func writeRPCError(w http.ResponseWriter, status int, msg string) {
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Response{Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: msg}})
	if err != nil {
		http.Error(w, msg, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// answerLost answers call on the resumed stream with a JSON-RPC error, as
// an event without an id (there is nothing to resume after it).
func answerLost(w http.ResponseWriter, call jsonrpc.ID, msg string) {
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: call, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg}})
	if err != nil {
		writeRPCError(w, http.StatusBadRequest, msg)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
}

// sseWriter writes the SSE retry field first in an event stream (a block
// with no data, which sets the client's reconnection delay and dispatches
// no event), and gives bind the stream id of the first event (the SDK
// writes an event per Write, its id as "id: STREAM_INDEX").
type sseWriter struct {
	http.ResponseWriter
	retry   time.Duration
	bind    func(stream string)
	started bool
	bound   bool
}

func (w *sseWriter) WriteHeader(status int) {
	if w.started {
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.started = true
	w.ResponseWriter.WriteHeader(status)
	if status == http.StatusOK && strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		// A failed write shows again on the SDK's own first write.
		_, _ = fmt.Fprintf(w.ResponseWriter, "retry: %d\n\n", w.retry.Milliseconds())
	} else {
		w.bound = true // not a stream: nothing to bind
	}
}

func (w *sseWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bound && w.bind != nil {
		w.bound = true
		if stream, ok := firstStreamID(b); ok {
			w.bind(stream)
		}
	}
	return w.ResponseWriter.Write(b)
}

// firstStreamID is the stream of the first "id:" line of an event.
func firstStreamID(event []byte) (string, bool) {
	for line := range strings.SplitSeq(string(event), "\n") {
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			stream, _, ok := parseEventID(id)
			return stream, ok
		}
	}
	return "", false
}

// Flush lets the SDK flush each event through this writer.
func (w *sseWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap gives http.ResponseController the connection's own writer.
func (w *sseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
