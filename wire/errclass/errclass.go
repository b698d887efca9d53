package errclass

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// Class is a kind of failure a caller can act on. Classes are compared by
// identity (errors.Is); Error is the class's short description.
type Class struct {
	desc   string
	code   string // wire code
	status int    // HTTP status
	exit   int    // CLI exit code
}

func (c *Class) Error() string { return c.desc }

// Code is the class's API error code.
func (c *Class) Code() string { return c.code }

// Status is the HTTP status the API answers the class with (0: never sent).
func (c *Class) Status() int { return c.status }

// ExitCode is the CLI's exit code for a failure of the class.
func (c *Class) ExitCode() int { return c.exit }

// Wire codes of the classes (the API's error codes).
const (
	CodeInvalid          = "invalid_argument"
	CodeUnauthorized     = "unauthorized"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeBusy             = "busy"
	CodeExists           = "already_exists"
	CodeHeadMoved        = "head_moved"
	CodeUncommitted      = "uncommitted_changes"
	CodeTooLarge         = "too_large"
	CodeInternal         = "internal"
	CodeCorrupt          = "corrupt"
	CodeUnavailable      = "unavailable"
	CodeNoSpace          = "no_space"
	CodeDaemonLost       = "daemon_lost"
	CodeMisdirected      = "misdirected"
	CodeConflict         = "conflict"
	CodeUnreachable      = "port_unreachable"
)

// The classes. Exit codes: 0 success, 1 internal (or unclassified), 2
// invalid (usage), 3 not found, 4 exists, 5 conflict (busy, head moved,
// uncommitted), 6 unavailable (daemon lost too), 7 unauthorized, 8 no
// space, 9 corrupt, 10 misdirected, 11 merge conflict, 12 unreachable.
var (
	// Invalid: the request is malformed or names something badly (400).
	Invalid = &Class{"invalid argument", CodeInvalid, 400, 2}
	// Unauthorized: a TCP request without the right bearer token (401).
	Unauthorized = &Class{"unauthorized", CodeUnauthorized, 401, 7}
	// NotFound: no such project, branch, ref, workspace, file or route (404).
	NotFound = &Class{"not found", CodeNotFound, 404, 3}
	// MethodNotAllowed: a known path with another method (405).
	MethodNotAllowed = &Class{"method not allowed", CodeMethodNotAllowed, 405, 2}
	// Busy: the resource is in use (a workspace stands on the branch, the
	// Store is held by another process); nothing changed (409).
	Busy = &Class{"busy", CodeBusy, 409, 5}
	// Exists: the name is taken (409).
	Exists = &Class{"already exists", CodeExists, 409, 4}
	// HeadMoved: a publish lost the compare-and-swap on a branch head; the
	// commit is stored and the workspace keeps its changes (409).
	HeadMoved = &Class{"branch head moved", CodeHeadMoved, 409, 5}
	// Uncommitted: a plain end of a workspace with changes (409).
	Uncommitted = &Class{"workspace has uncommitted changes", CodeUncommitted, 409, 5}
	// TooLarge: a body or upload over its limit (413).
	TooLarge = &Class{"too large", CodeTooLarge, 413, 2}
	// Internal: anything else; the API hides the message (500).
	Internal = &Class{"internal error", CodeInternal, 500, 1}
	// Corrupt: stored data fails its check; run fsck (500, message kept).
	Corrupt = &Class{"corrupt", CodeCorrupt, 500, 9}
	// Unavailable: shutting down, a platform that cannot run, a canceled
	// request (503).
	Unavailable = &Class{"unavailable", CodeUnavailable, 503, 6}
	// NoSpace: a file system of the Store or of a workspace is full (507).
	NoSpace = &Class{"no space", CodeNoSpace, 507, 8}
	// Misdirected: the workspace lives on another host of the fleet that
	// shares the Store; the error names that host and its address, and
	// nothing was done, so the request may be sent there as it is (421
	// Misdirected Request).
	Misdirected = &Class{"misdirected", CodeMisdirected, 421, 10}
	// Conflict: a merge found paths it cannot decide (the error lists
	// them); nothing was published (409).
	Conflict = &Class{"merge conflict", CodeConflict, 409, 11}
	// Unreachable: what the daemon was to pass the request on to did not
	// answer: nothing listens on a workspace's port (502 Bad Gateway).
	Unreachable = &Class{"unreachable", CodeUnreachable, 502, 12}
	// DaemonLost is never sent: the SDK reports it when the connection to
	// the daemon broke before an answer was whole; the outcome is unknown.
	DaemonLost = &Class{"daemon lost", CodeDaemonLost, 0, 6}
)

// all lists the classes; for a status several share, the first is the one
// FromStatus answers.
var all = []*Class{Invalid, Unauthorized, NotFound, MethodNotAllowed, Busy, Exists, HeadMoved,
	Uncommitted, TooLarge, Internal, Corrupt, Unavailable, NoSpace, Misdirected, DaemonLost, Conflict, Unreachable}

// FromCode is the class of a wire code, nil for a code it does not know.
func FromCode(code string) *Class {
	for _, c := range all {
		if c.code == code {
			return c
		}
	}
	return nil
}

// FromStatus is the class of an HTTP error status (a response without a
// typed error body): Busy for 409, Internal for a status of no class.
func FromStatus(status int) *Class {
	for _, c := range all {
		if c.status == status {
			return c
		}
	}
	return Internal
}

// classError is an error of a class with its own message.
type classError struct {
	class *Class
	msg   string
}

func (e *classError) Error() string { return e.msg }

// Unwrap returns the class, so errors.Is(err, class) holds.
func (e *classError) Unwrap() error { return e.class }

// New makes a sentinel of class c: errors.Is(err, sentinel) and
// errors.Is(err, c) both hold for an error wrapping it.
func New(c *Class, msg string) error { return &classError{c, msg} }

// Errorf formats an error of class c; %w in format wraps as fmt.Errorf
// does, and c comes first when err wraps errors of other classes too.
//
// Deprecated: use fmt.Errorf("%w: ...: %w", c, ..., cause), the one idiom
// of the package doc, which also names the class in the message.
func Errorf(c *Class, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &wrapError{c, err}
}

// wrapError is an error of a class that also wraps what its format did.
type wrapError struct {
	class *Class
	err   error
}

func (e *wrapError) Error() string   { return e.err.Error() }
func (e *wrapError) Unwrap() []error { return []error{e.class, e.err} }

// Of is the class of err: the class it wraps; NoSpace for ENOSPC and
// EDQUOT; Unavailable for a canceled or expired context; Internal for
// anything else (nil for nil).
func Of(err error) *Class {
	if err == nil {
		return nil
	}
	var c *Class
	switch {
	case errors.As(err, &c):
		return c
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return NoSpace
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Unavailable
	}
	return Internal
}

// ExitCode is the CLI's exit code for err: 0 for nil, else its class's.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	return Of(err).ExitCode()
}
