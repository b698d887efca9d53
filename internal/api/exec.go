package api

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"sync"

	"layerfs.dev/layerfs/internal/outputcap"
	"layerfs.dev/layerfs/wire"
)

func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	var req wire.ExecRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if wantsNDJSON(r) {
		return s.execStream(w, r, id, req)
	}
	stdout := outputcap.NewBuffer(s.opts.MaxExecOutput)
	stderr := outputcap.NewBuffer(s.opts.MaxExecOutput)
	res, err := s.executor.Exec(ctxOf(r), id, req, stdout, stderr)
	if err != nil {
		return err
	}
	res.Stdout, res.Stderr = stdout.Bytes(), stderr.Bytes()
	if stdout.Truncated() || stderr.Truncated() {
		res.OutputTruncated = true
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func wantsNDJSON(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == wire.MediaNDJSON {
			return true
		}
	}
	return false
}

// execStream answers an exec as ExecEvent lines. The 200 and the first line
// go out with the first output, so an exec the engine refuses outright
// (unknown workspace, busy) still gets an ordinary JSON error.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, id string, req wire.ExecRequest) error {
	st := &eventStream{w: w, rc: http.NewResponseController(w)}
	res, err := s.executor.Exec(ctxOf(r), id, req, st.writer("stdout"), st.writer("stderr"))
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.started {
		if err != nil {
			return err
		}
		st.start()
	}
	ev := wire.ExecEvent{Result: &res}
	if err != nil {
		_, e, internal := classify(err)
		if internal {
			s.log.Error("exec failed mid-stream", "id", w.Header().Get("X-Request-Id"), "workspace", id, "err", err)
			e.Message = "internal error; the daemon's log has the details under request id " + w.Header().Get("X-Request-Id")
		}
		ev = wire.ExecEvent{Error: &e}
	}
	if werr := st.emit(ev); werr != nil {
		s.log.Debug("exec stream: client gone", "workspace", id, "err", werr)
	}
	return nil
}

// eventStream writes ExecEvent lines; the engine may write stdout and
// stderr from two goroutines.
type eventStream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (st *eventStream) start() {
	st.started = true
	st.w.Header().Set("Content-Type", wire.MediaNDJSON)
	st.w.Header().Set("X-Content-Type-Options", "nosniff")
	st.w.WriteHeader(http.StatusOK)
}

// emit writes one line and flushes it; st.mu is held.
func (st *eventStream) emit(ev any) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if _, err := st.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return st.rc.Flush()
}

func (st *eventStream) writer(stream string) *streamWriter {
	return &streamWriter{st: st, stream: stream}
}

type streamWriter struct {
	st     *eventStream
	stream string
}

func (sw *streamWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	sw.st.mu.Lock()
	defer sw.st.mu.Unlock()
	if !sw.st.started {
		sw.st.start()
	}
	if err := sw.st.emit(wire.ExecEvent{Stream: sw.stream, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}
