package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"layerfs.dev/layerfs/wire"
)

// FileEvent is one change in a workspace (or, for the kinds
// wire.EventOverflow and wire.EventDropped, a loss of changes).
type FileEvent = wire.FileEvent

// EventStream is an open stream of a workspace's changes. It is for one
// goroutine; Close it when done.
type EventStream struct {
	body io.ReadCloser
	dec  *json.Decoder
}

// Watch opens the stream of changes below the directory prefix of the
// workspace ("" for all of it), made by any process on the host or in any
// sandbox. It returns once the daemon watches: every change made after it
// returns is reported. The stream ends with an event of kind
// wire.EventEnded when the workspace ends; ctx bounds the whole stream.
func (ws *Workspace) Watch(ctx context.Context, prefix string) (*EventStream, error) {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	resp, err := ws.send(ctx, call{method: http.MethodGet, path: ws.path("/events"), query: q, size: -1, accept: wire.MediaNDJSON})
	if err != nil {
		return nil, err
	}
	s := &EventStream{body: resp.Body, dec: json.NewDecoder(resp.Body)}
	ev, err := s.Next()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("watch %s: %w", ws.ID(), err)
	}
	if ev.Kind != wire.EventReady {
		s.Close()
		return nil, fmt.Errorf("watch %s: the stream began with %q, not %q", ws.ID(), ev.Kind, wire.EventReady)
	}
	return s, nil
}

// Next returns the next event, waiting for it; io.EOF once the stream is
// over (after wire.EventEnded, or when the daemon shuts down).
func (s *EventStream) Next() (FileEvent, error) {
	var ev FileEvent
	if err := s.dec.Decode(&ev); err != nil {
		if errors.Is(err, io.EOF) {
			return ev, io.EOF
		}
		return ev, fmt.Errorf("read event stream: %w", err)
	}
	return ev, nil
}

// Close ends the stream.
func (s *EventStream) Close() error { return s.body.Close() }
