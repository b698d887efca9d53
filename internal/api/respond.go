package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"syscall"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// invalid, tooLarge and unavailable are fmt.Errorf with the class wrapped
// first, as errclass's rule has it; a %w in format wraps the cause too.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %w", errclass.Invalid, fmt.Errorf(format, args...))
}

func tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: %w", errclass.TooLarge, fmt.Errorf(format, args...))
}

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %w", errclass.Unavailable, fmt.Errorf(format, args...))
}

// classify maps err to its class's status and a typed error (package
// errclass holds the one table). internal is true when the message must not
// reach the client.
func classify(err error) (status int, e wire.Error, internal bool) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, wire.Error{Code: wire.CodeTooLarge,
			Message: fmt.Sprintf("request body exceeds the limit of %d bytes", mbe.Limit)}, false
	}
	c := errclass.Of(err)
	switch c {
	case errclass.Internal:
		return c.Status(), wire.Error{Code: c.Code()}, true
	case errclass.NoSpace:
		// The details name host paths; the daemon's log has them.
		return c.Status(), wire.Error{Code: c.Code(),
			Message: "a file system of the Store or of a workspace is full (" + noSpaceErrno(err).Error() + "): nothing was published; free space (remove files, end workspaces, run gc) and retry"}, false
	}
	msg := err.Error()
	if we := (*wire.Error)(nil); errors.As(err, &we) && we.Code == c.Code() {
		// A typed error's text leads with its code, which the answer
		// carries apart: the message names the class once.
		msg = strings.Replace(msg, we.Error(), we.Message, 1)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		msg = "request canceled: " + msg
	}
	e = wire.Error{Code: c.Code(), Message: msg}
	if we := (*wire.Error)(nil); c == errclass.Misdirected && errors.As(err, &we) {
		// Where the workspace is served, for the client to go there.
		e.Node = we.Node
	}
	if we := (*wire.Error)(nil); c == errclass.Conflict && errors.As(err, &we) {
		// What the merge could not decide.
		e.Conflicts = we.Conflicts
	}
	return c.Status(), e, false
}

// noSpaceErrno is the errno that says which limit was hit.
func noSpaceErrno(err error) error {
	if errors.Is(err, syscall.EDQUOT) {
		return syscall.EDQUOT
	}
	return syscall.ENOSPC
}

// fail answers err as a typed JSON error, logging internal errors.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, e, internal := classify(err)
	if e.Code == wire.CodeNoSpace {
		s.log.Warn("out of space", "id", w.Header().Get("X-Request-Id"), "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if internal {
		id := w.Header().Get("X-Request-Id")
		s.log.Error("internal error", "id", id, "method", r.Method, "path", r.URL.Path, "err", err)
		e.Message = "internal error; the daemon's log has the details under request id " + id
	}
	writeJSON(w, status, wire.ErrorBody{Error: e})
}

// writeError answers an error of class c with msg.
func writeError(w http.ResponseWriter, c *errclass.Class, msg string) {
	writeJSON(w, c.Status(), wire.ErrorBody{Error: wire.Error{Code: c.Code(), Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only unsupported values fail to marshal: a programming error.
		status = http.StatusInternalServerError
		b, _ = json.Marshal(wire.ErrorBody{Error: wire.Error{Code: wire.CodeInternal, Message: "encode response: " + err.Error()}})
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	// Known, so that the answer is whole once written (see instrument).
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client is gone when this fails; nothing to do
}

// decode reads exactly one JSON value into v, strictly.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeBody(w, r, v, false)
}

// decodeOptional is decode, but an empty body leaves v as it is.
func decodeOptional(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeBody(w, r, v, true)
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return invalid("content type %q: want application/json", ct)
	}
	if r.ContentLength > MaxJSON {
		return tooLarge("request body of %d bytes exceeds the JSON limit of %d bytes", r.ContentLength, MaxJSON)
	}
	body := http.MaxBytesReader(w, r.Body, MaxJSON)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if optional && err == io.EOF {
			return nil
		}
		return jsonError(err)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
		return nil
	case errors.As(err, new(*http.MaxBytesError)):
		return jsonError(err)
	default:
		return invalid("request body must hold exactly one JSON value")
	}
}

// jsonError turns a decoding error into a message a client can act on.
func jsonError(err error) error {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &mbe):
		return tooLarge("request body exceeds the JSON limit of %d bytes", mbe.Limit)
	case err == io.EOF:
		return invalid("request body is empty: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syn):
		return invalid("malformed JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return invalid("request body: want a JSON object, got %s", typ.Value)
		}
		return invalid("field %q: want %s, got %s", typ.Field, jsonKind(typ.Type), typ.Value)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return invalid("unknown field %s", f)
	}
	return invalid("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(t reflect.Type) string {
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
		return "a base64 string"
	}
	k := t.Kind().String()
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"), strings.HasPrefix(k, "float"):
		return "a number"
	case k == "string":
		return "a string"
	case k == "bool":
		return "a boolean"
	case k == "slice", k == "array":
		return "an array"
	case k == "struct", k == "map":
		return "an object"
	}
	return k
}
