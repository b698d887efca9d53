package api

import (
	"context"
	"net/http"

	"layerfs.dev/layerfs/wire"
)

// events streams a workspace's changes as wire.FileEvent lines until the
// client goes, the workspace ends, or the daemon drains. The 200 goes out
// with the ready line, so a refused watch (unknown workspace, bad prefix)
// is an ordinary JSON error.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	q, err := query(r.URL.Query(), "prefix")
	if err != nil {
		return err
	}
	prefix, err := workspacePath("query parameter prefix", q["prefix"], true)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctxOf(r))
	defer cancel()
	defer context.AfterFunc(s.drainCtx, cancel)()
	st := &eventStream{w: w, rc: http.NewResponseController(w)}
	err = s.watcher.WatchWorkspace(ctx, id, prefix, func(evs []wire.FileEvent) error {
		st.mu.Lock()
		defer st.mu.Unlock()
		if !st.started {
			st.start()
		}
		for _, ev := range evs {
			if err := st.emit(ev); err != nil {
				return err
			}
		}
		return nil
	})
	if !st.started {
		return err
	}
	if err != nil && ctx.Err() == nil {
		s.log.Debug("event stream ended", "workspace", id, "err", err)
	}
	return nil
}
