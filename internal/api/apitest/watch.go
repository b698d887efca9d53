package apitest

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// watchChecks are those of Watcher.
var watchChecks = []check{
	{"Watch", checkWatch},
	{"WatchRefused", checkWatchRefused},
}

// watch runs a watch of prefix in its own goroutine, its events arriving
// on events until it returns (its error on done).
type watch struct {
	events chan wire.FileEvent
	done   chan error
	cancel context.CancelFunc
}

func (f *fixture) watch(id, prefix string) *watch {
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	w := &watch{events: make(chan wire.FileEvent, 1024), done: make(chan error, 1), cancel: cancel}
	f.t.Cleanup(cancel)
	go func() {
		w.done <- f.eng.WatchWorkspace(ctx, id, prefix, func(evs []wire.FileEvent) error {
			for _, ev := range evs {
				select {
				case w.events <- ev:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
		close(w.events)
	}()
	return w
}

// next is the watch's next event; the check fails after a minute without
// one.
func (w *watch) next(f *fixture) (wire.FileEvent, bool) {
	f.t.Helper()
	select {
	case ev, ok := <-w.events:
		return ev, ok
	case <-time.After(time.Minute):
		f.t.Fatal("no event in a minute")
		return wire.FileEvent{}, false
	}
}

// checkWatch: ready first, then the changes below the prefix and none
// outside it, and ended last when the workspace ends, after which the
// watch returns nil.
func checkWatch(f *fixture) {
	ws := f.workspace(f.project(), "main")
	f.sh(ws.ID, "mkdir -p src other")
	w := f.watch(ws.ID, "src")
	ev, ok := w.next(f)
	if !ok {
		f.t.Fatalf("the watch ended before its first event: %v", <-w.done)
	}
	require.Equal(f.t, wire.EventReady, ev.Kind, "the first event")
	f.sh(ws.ID, "echo x > other/outside.txt")
	f.write(ws.ID, "src/api.txt", "from the API")
	f.sh(ws.ID, "echo y > src/sandbox.txt")
	seen := map[string]bool{}
	for !seen["src/api.txt"] || !seen["src/sandbox.txt"] {
		ev, ok := w.next(f)
		if !ok {
			f.t.Fatalf("the watch ended early: %v", <-w.done)
		}
		assert.True(f.t, strings.HasPrefix(ev.Path, "src/"), "an event outside the prefix: %+v", ev)
		if ev.Kind != wire.EventReady && ev.Kind != wire.EventEnded {
			seen[ev.Path] = true
		}
	}
	require.NoError(f.t, f.eng.EndWorkspace(f.ctx, ws.ID, true))
	var last wire.FileEvent
	for {
		ev, ok := w.next(f)
		if !ok {
			break
		}
		last = ev
	}
	assert.Equal(f.t, wire.EventEnded, last.Kind, "the last event")
	assert.NoError(f.t, <-w.done, "a watch of an ended workspace returns nil")
}

// checkWatchRefused: a watch of a missing prefix is not found, of a file
// invalid; a watch whose emit fails returns that error; one whose context
// ends returns.
func checkWatchRefused(f *fixture) {
	ws := f.workspace(f.project(), "main")
	f.write(ws.ID, "file", "x")
	never := func([]wire.FileEvent) error { return errors.New("emitted") }
	f.isClass(f.eng.WatchWorkspace(f.ctx, ws.ID, "missing", never), errclass.NotFound, "watch a missing directory")
	f.isClass(f.eng.WatchWorkspace(f.ctx, ws.ID, "file", never), errclass.Invalid, "watch a file")
	failed := errors.New("the consumer went")
	err := f.eng.WatchWorkspace(f.ctx, ws.ID, ".", func([]wire.FileEvent) error { return failed })
	assert.ErrorIs(f.t, err, failed, "a watch whose emit fails")
	w := f.watch(ws.ID, ".")
	ev, _ := w.next(f)
	require.Equal(f.t, wire.EventReady, ev.Kind)
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		f.t.Fatal("a watch whose context ended did not return in 30s")
	}
}
