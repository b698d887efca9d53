package engine

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"layerfs.dev/layerfs/internal/fswatch"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// batch is one fswatch.Watcher.Next.
type batch struct {
	events []fswatch.Event
	err    error
}

// nextBatches calls fw.Next until it fails or ctx ends, handing each
// answer on.
func nextBatches(ctx context.Context, fw *fswatch.Watcher) <-chan batch {
	out := make(chan batch)
	go func() {
		for {
			evs, err := fw.Next(ctx)
			select {
			case out <- batch{evs, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// WatchWorkspace reports the changes below the directory prefix of a
// workspace ("" or "." for all) to emit, a batch at a time: first one
// EventReady, then changes as any process makes them, until ctx ends or
// emit fails; when the workspace ends (or the prefix directory goes away)
// the last batch is EventEnded and it returns nil. It watches the mount
// (package fswatch), so it works on every data path and platform.
func (e *Engine) WatchWorkspace(ctx context.Context, id, prefix string, emit func([]wire.FileEvent) error) error {
	rel, err := cleanRel(prefix)
	if err != nil {
		return err
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return err
	}
	w.mu.RLock()
	mount := w.data
	w.mu.RUnlock()
	fw, err := fswatch.Watch(mount, fswatch.Options{Prefix: rel})
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("watch %q: %w", relOrRoot(rel), errclass.NotFound)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EXDEV):
		return fmt.Errorf("%w: watch %q: not a directory inside the workspace", errclass.Invalid, relOrRoot(rel))
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EMFILE):
		return fmt.Errorf("%w: watch %s: the host's inotify limits are reached (fs.inotify.max_user_watches, max_user_instances): %w", errclass.Unavailable, id, err)
	case err != nil:
		return err
	}
	defer fw.Close()
	netc, unsubscribe := w.net.subscribe()
	defer unsubscribe()
	// A stream of the whole workspace carries its services' events too.
	var svcs <-chan wire.Service
	if rel == "" {
		ch, stop := w.serviceSet().subscribe()
		defer stop()
		svcs = ch
	}
	if err := emit([]wire.FileEvent{{Kind: wire.EventReady}}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := nextBatches(ctx, fw)
	for {
		var batch []fswatch.Event
		var err error
		select {
		case ev := <-netc:
			if err := emit([]wire.FileEvent{{Kind: wire.EventNet, Net: &ev, Time: ev.Time}}); err != nil {
				return err
			}
			continue
		case sv := <-svcs:
			if err := emit([]wire.FileEvent{{Kind: wire.EventService, Service: &sv, Time: time.Now()}}); err != nil {
				return err
			}
			continue
		case b := <-batches:
			batch, err = b.events, b.err
		case <-ctx.Done():
			return ctx.Err()
		}
		if errors.Is(err, fswatch.ErrEnded) {
			return emit([]wire.FileEvent{{Kind: wire.EventEnded}})
		}
		if err != nil {
			return err
		}
		out := make([]wire.FileEvent, len(batch))
		for i, ev := range batch {
			out[i] = wire.FileEvent{Kind: ev.Kind, Path: ev.Path, OldPath: ev.OldPath, Size: ev.Size, Count: ev.Count, Time: ev.Time}
			// A removal knows only whether a directory went.
			if ev.Path != "" && (ev.Kind != fswatch.Removed || ev.Mode.IsDir()) {
				out[i].Type = entryTypeOf(ev.Mode)
			}
		}
		if err := emit(out); err != nil {
			return err
		}
	}
}
