package mcpserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// The watch tool polls a workspace's event stream: the first call opens it
// and returns a watch_id, later calls with that id return what changed
// since the previous one. Streams live in the server between calls.
const (
	watchBuffer      = 4096             // events kept between polls; more are counted as dropped
	watchIdle        = 10 * time.Minute // a watch nobody polls for this long is closed
	defaultWatchWait = 10.0             // seconds a poll waits for a first change
	maxWatchWait     = 120.0
)

type watchIn struct {
	Workspace      string  `json:"workspace,omitempty" jsonschema:"the workspace id (to open a watch)"`
	Prefix         string  `json:"prefix,omitempty" jsonschema:"a directory to watch (default: the whole workspace); only when opening"`
	WatchID        string  `json:"watch_id,omitempty" jsonschema:"the id an earlier call returned: get what changed since then"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"how long to wait for a first change when there is none yet (default 10, at most 120; 0 waits the default)"`
	Stop           bool    `json:"stop,omitempty" jsonschema:"close the watch"`
}

type eventOut struct {
	Kind    string `json:"kind" jsonschema:"created, modified, removed or renamed; net: an egress decision; service: a service started or ended (service says which)"`
	Path    string `json:"path"`
	OldPath string `json:"old_path,omitempty" jsonschema:"renamed: the path before"`
	// Net is a decision of the workspace's egress (kind net).
	Net     *wire.NetEvent `json:"net,omitempty" jsonschema:"kind net: a decision of the workspace's egress (proto dns or tcp, name, address, port, verdict allowed or denied, reason)"`
	Type    string         `json:"type,omitempty"`
	Size    int64          `json:"size,omitempty"`
	Service *serviceOut    `json:"service,omitempty" jsonschema:"kind service: the service as it is now"`
}

type watchOut struct {
	WatchID string     `json:"watch_id"`
	Events  []eventOut `json:"events"`
	Dropped int64      `json:"dropped" jsonschema:"changes not kept since the last call (too many between polls): list_dir to see the current state"`
	Ended   bool       `json:"ended" jsonschema:"the workspace ended (or the watch was stopped): no more events"`
}

type watch struct {
	id       string
	stream   *client.EventStream
	cancel   context.CancelFunc
	events   chan wire.FileEvent
	mu       sync.Mutex
	dropped  int64
	lastPoll time.Time
}

type watchSet struct {
	mu   sync.Mutex
	seq  int
	byID map[string]*watch
}

func (s *Server) addWatchTool() {
	addTool(s, &mcp.Tool{Name: "watch", Annotations: readOnly("Watch a workspace for changes"),
		Description: "Follow the changes made in a workspace by any process (commands you run, other agents, the host). Call it with `workspace` (and optionally `prefix`) to open a watch: it returns a watch_id at once. Call it again with watch_id to get the changes since the previous call (created, modified, removed, renamed paths), waiting up to timeout_seconds for one when there are none. Changes to one path between two calls come back as one. Stop it with stop: true; it ends by itself when the workspace ends or after 10 minutes without a call."},
		s.watchTool)
}

func (s *Server) watchTool(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in watchIn) (watchOut, error) {
	if in.WatchID == "" {
		if in.Stop {
			return watchOut{}, badInput("stop needs the watch_id to stop")
		}
		return s.openWatch(c, in)
	}
	s.watches.mu.Lock()
	w := s.watches.byID[in.WatchID]
	s.watches.mu.Unlock()
	if w == nil {
		return watchOut{}, fmt.Errorf("not_found: no watch %q (it ended, was stopped, or idled out): open a new one with workspace", in.WatchID)
	}
	if in.Stop {
		s.closeWatch(w)
		return watchOut{WatchID: w.id, Events: []eventOut{}, Ended: true}, nil
	}
	wait := in.TimeoutSeconds
	switch {
	case wait < 0 || wait > maxWatchWait:
		return watchOut{}, badInput("timeout_seconds must be from 0 to %v (got %v)", maxWatchWait, wait)
	case wait == 0:
		wait = defaultWatchWait
	}
	return s.pollWatch(ctx, w, time.Duration(wait*float64(time.Second))), nil
}

func (s *Server) openWatch(c *client.Client, in watchIn) (watchOut, error) {
	ws, err := handle(context.Background(), c, in.Workspace)
	if err != nil {
		return watchOut{}, err
	}
	// The stream outlives this call: its context is the watch's own.
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := ws.Watch(sctx, in.Prefix)
	if err != nil {
		cancel()
		return watchOut{}, err
	}
	s.watches.mu.Lock()
	s.watches.seq++
	w := &watch{id: fmt.Sprintf("w%d", s.watches.seq), stream: stream, cancel: cancel,
		events: make(chan wire.FileEvent, watchBuffer), lastPoll: time.Now()}
	if s.watches.byID == nil {
		s.watches.byID = map[string]*watch{}
	}
	s.watches.byID[w.id] = w
	s.watches.mu.Unlock()
	go w.pump()
	return watchOut{WatchID: w.id, Events: []eventOut{}}, nil
}

// pump moves the stream's events into the buffer, counting what does not fit.
func (w *watch) pump() {
	defer close(w.events)
	for {
		ev, err := w.stream.Next()
		if err != nil {
			return
		}
		switch ev.Kind {
		case wire.EventDropped:
			w.addDropped(ev.Count)
			continue
		case wire.EventOverflow:
			w.addDropped(1)
			continue
		}
		select {
		case w.events <- ev:
		default:
			w.addDropped(1)
		}
		if ev.Kind == wire.EventEnded {
			return
		}
	}
}

func (w *watch) addDropped(n int64) {
	w.mu.Lock()
	w.dropped += n
	w.mu.Unlock()
}

// pollWatch returns what is buffered, waiting up to wait for a first event.
func (s *Server) pollWatch(ctx context.Context, w *watch, wait time.Duration) watchOut {
	out := watchOut{WatchID: w.id, Events: []eventOut{}}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	take := func(ev wire.FileEvent, ok bool) {
		if !ok || ev.Kind == wire.EventEnded {
			out.Ended = true
			return
		}
		eo := eventOut{Kind: ev.Kind, Path: ev.Path, OldPath: ev.OldPath, Type: ev.Type, Size: ev.Size, Net: ev.Net}
		if ev.Service != nil {
			sv := serviceOf(*ev.Service)
			eo.Service = &sv
		}
		out.Events = append(out.Events, eo)
	}
	select {
	case ev, ok := <-w.events:
		take(ev, ok)
	case <-timer.C:
	case <-ctx.Done():
	}
	for !out.Ended && len(out.Events) < watchBuffer {
		select {
		case ev, ok := <-w.events:
			take(ev, ok)
			continue
		default:
		}
		break
	}
	w.mu.Lock()
	out.Dropped, w.dropped = w.dropped, 0
	w.lastPoll = time.Now()
	w.mu.Unlock()
	if out.Ended {
		s.closeWatch(w)
	}
	return out
}

func (s *Server) closeWatch(w *watch) {
	s.watches.mu.Lock()
	delete(s.watches.byID, w.id)
	s.watches.mu.Unlock()
	w.cancel()
	w.stream.Close()
}

// reapWatches closes the watches nobody polled for watchIdle; every tool
// call runs it.
func (s *Server) reapWatches() {
	s.watches.mu.Lock()
	var idle []*watch
	for _, w := range s.watches.byID {
		w.mu.Lock()
		if time.Since(w.lastPoll) > watchIdle {
			idle = append(idle, w)
		}
		w.mu.Unlock()
	}
	s.watches.mu.Unlock()
	for _, w := range idle {
		s.closeWatch(w)
	}
}

func (s *Server) closeWatches() {
	s.watches.mu.Lock()
	all := make([]*watch, 0, len(s.watches.byID))
	for _, w := range s.watches.byID {
		all = append(all, w)
	}
	s.watches.mu.Unlock()
	for _, w := range all {
		s.closeWatch(w)
	}
}
