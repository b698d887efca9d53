package api

import (
	"context"
	"net/http"
	"time"

	"layerfs.dev/layerfs/wire"
)

// Services are a workspace's services: commands kept running in its
// sandbox (docs/api.md#services).

func serviceParams(r *http.Request) (id, name string, err error) {
	if id, err = idParam(r); err != nil {
		return "", "", err
	}
	name = r.PathValue("name")
	if name == "" || len(name) > 63 {
		return "", "", invalid("service name %q: want 1 to 63 bytes", name)
	}
	return id, name, nil
}

func (s *Server) startService(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	var req wire.ServiceRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	sv, err := s.services.StartService(ctxOf(r), id, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sv)
	return nil
}

func (s *Server) listServices(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	list, err := s.services.Services(ctxOf(r), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.ServiceList{Services: list})
	return nil
}

func (s *Server) stopService(w http.ResponseWriter, r *http.Request) error {
	id, name, err := serviceParams(r)
	if err != nil {
		return err
	}
	var req wire.ServiceStopRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	if req.GraceMs < 0 || req.GraceMs > int64(time.Hour/time.Millisecond) {
		return invalid("grace_ms %d: want 0 (the default) to %d", req.GraceMs, int64(time.Hour/time.Millisecond))
	}
	sv, err := s.services.StopService(ctxOf(r), id, name, time.Duration(req.GraceMs)*time.Millisecond)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sv)
	return nil
}

func (s *Server) waitService(w http.ResponseWriter, r *http.Request) error {
	id, name, err := serviceParams(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctxOf(r))
	defer cancel()
	defer context.AfterFunc(s.drainCtx, cancel)()
	sv, err := s.services.WaitService(ctx, id, name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sv)
	return nil
}

// serviceLogs writes a service's log as text/plain; with follow=true it
// streams what comes until the service ends for good, the client goes or
// the daemon drains. A refused call (no such service) is a JSON error.
func (s *Server) serviceLogs(w http.ResponseWriter, r *http.Request) error {
	id, name, err := serviceParams(r)
	if err != nil {
		return err
	}
	q, err := query(r.URL.Query(), "follow")
	if err != nil {
		return err
	}
	follow, err := boolParam(q, "follow")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctxOf(r))
	defer cancel()
	defer context.AfterFunc(s.drainCtx, cancel)()
	lw := &logWriter{w: w, rc: http.NewResponseController(w)}
	err = s.services.ServiceLogs(ctx, id, name, follow, lw, lw.flush)
	if !lw.started {
		if err != nil {
			return err
		}
		lw.start()
	}
	return nil
}

// logWriter sends the 200 with the first bytes (or at the end), so that
// an error before them is an ordinary JSON answer.
type logWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (l *logWriter) start() {
	l.started = true
	l.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	l.w.Header().Set("X-Content-Type-Options", "nosniff")
	l.w.WriteHeader(http.StatusOK)
	_ = l.rc.Flush()
}

func (l *logWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.start()
	}
	return l.w.Write(p)
}

func (l *logWriter) flush() { _ = l.rc.Flush() }
