package api

import (
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"layerfs.dev/layerfs/wire"
)

// upload wraps a request body with the upload cap and remembers whether the
// cap was hit, so that the answer is 413 however the engine wraps the error.
type upload struct {
	r   io.Reader
	max int64
	err error
}

func (u *upload) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		u.err = tooLarge("upload exceeds the limit of %s", fmtBytes(u.max))
	}
	return n, err
}

func (s *Server) uploadBody(w http.ResponseWriter, r *http.Request) (*upload, error) {
	max := s.opts.MaxUpload
	if r.ContentLength > max {
		return nil, tooLarge("upload of %d bytes exceeds the limit of %s", r.ContentLength, fmtBytes(max))
	}
	return &upload{r: http.MaxBytesReader(w, r.Body, max), max: max}, nil
}

func filePath(r *http.Request) (string, string, error) {
	id, err := idParam(r)
	if err != nil {
		return "", "", err
	}
	p, err := workspacePath("path", r.PathValue("path"), false)
	return id, p, err
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request) error {
	id, p, err := filePath(r)
	if err != nil {
		return err
	}
	q, err := query(r.URL.Query(), "mode")
	if err != nil {
		return err
	}
	mode, err := modeParam(q)
	if err != nil {
		return err
	}
	body, err := s.uploadBody(w, r)
	if err != nil {
		return err
	}
	// The engine writes to a temporary file that replaces the target only
	// when the body is whole, so a cap tripped mid-stream changes nothing.
	err = s.files.WriteFile(ctxOf(r), id, p, fs.FileMode(mode), body)
	if body.err != nil {
		return body.err
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) error {
	id, p, err := filePath(r)
	if err != nil {
		return err
	}
	lw := &lazyWriter{w: w, contentType: "application/octet-stream", log: s.log}
	_, err = s.files.ReadFile(ctxOf(r), id, p, lw)
	return lw.finish(err)
}

func pathQuery(r *http.Request) (string, string, error) {
	id, err := idParam(r)
	if err != nil {
		return "", "", err
	}
	q, err := query(r.URL.Query(), "path")
	if err != nil {
		return "", "", err
	}
	p, err := workspacePath("query parameter path", q["path"], true)
	return id, p, err
}

func (s *Server) putTar(w http.ResponseWriter, r *http.Request) error {
	id, dir, err := pathQuery(r)
	if err != nil {
		return err
	}
	body, err := s.uploadBody(w, r)
	if err != nil {
		return err
	}
	err = s.files.PutTar(ctxOf(r), id, dir, body)
	if err == nil {
		// Whatever follows the end of the archive is read too, so that an
		// oversized body is still refused rather than cut off silently.
		_, err = io.Copy(io.Discard, body)
	}
	if body.err != nil {
		return body.err
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) getTar(w http.ResponseWriter, r *http.Request) error {
	id, p, err := pathQuery(r)
	if err != nil {
		return err
	}
	lw := &lazyWriter{w: w, contentType: wire.MediaTar, log: s.log}
	if !acceptsGzip(r) {
		return lw.finish(s.files.GetTar(ctxOf(r), id, p, lw))
	}
	// Compressed for a client that asks (the SDK's WithCompressedDownloads):
	// over a slow link, such as a VM's forwarded socket, the bytes saved
	// cost far less than the compression. Nothing is written before the
	// first byte of the archive, so an early error is still a JSON error.
	lw.encoding = "gzip"
	gz, _ := gzip.NewWriterLevel(lw, gzip.BestSpeed)
	err = s.files.GetTar(ctxOf(r), id, p, gz)
	if err == nil {
		err = gz.Close()
	}
	return lw.finish(err)
}

// acceptsGzip tells whether the request's Accept-Encoding names gzip.
func acceptsGzip(r *http.Request) bool {
	for _, v := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if name, _, _ := strings.Cut(strings.TrimSpace(v), ";"); name == "gzip" {
			return true
		}
	}
	return false
}

// lazyWriter sends the 200 and its headers with the first byte, so that an
// error before any output is still answered as a JSON error.
type lazyWriter struct {
	w           http.ResponseWriter
	contentType string
	encoding    string // Content-Encoding, when the body is compressed
	started     bool
	log         *slog.Logger
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", l.contentType)
		if l.encoding != "" {
			l.w.Header().Set("Content-Encoding", l.encoding)
		}
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}

// finish ends the response: a JSON error when nothing was sent yet, and an
// aborted connection (so the client sees a truncated body, not a short
// success) when the error came mid-stream.
func (l *lazyWriter) finish(err error) error {
	switch {
	case err == nil && !l.started:
		l.Write(nil)
		return nil
	case err == nil:
		return nil
	case !l.started:
		return err
	}
	l.log.Warn("download failed mid-stream; aborting the response", "id", l.w.Header().Get("X-Request-Id"), "err", err)
	panic(http.ErrAbortHandler)
}

func (s *Server) statPath(w http.ResponseWriter, r *http.Request) error {
	id, p, err := pathQuery(r)
	if err != nil {
		return err
	}
	fi, err := s.files.Stat(ctxOf(r), id, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fi)
	return nil
}

func (s *Server) listDir(w http.ResponseWriter, r *http.Request) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	q, err := query(r.URL.Query(), "path", "recursive", "cursor", "limit")
	if err != nil {
		return err
	}
	dir, err := workspacePath("query parameter path", q["path"], true)
	if err != nil {
		return err
	}
	recursive, err := boolParam(q, "recursive")
	if err != nil {
		return err
	}
	limit, err := intParam(q, "limit", wire.DefaultListLimit, 1, wire.MaxListLimit)
	if err != nil {
		return err
	}
	cursor := q["cursor"]
	if cursor != "" {
		if cursor, err = workspacePath("query parameter cursor", cursor, false); err != nil {
			return err
		}
	}
	page, err := s.files.List(ctxOf(r), id, dir, recursive, cursor, limit)
	if err != nil {
		return err
	}
	if page.Entries == nil {
		page.Entries = []wire.FileInfo{}
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}
