package api

import "errors"

// Engine sentinels. These stand in for engine/errors.go until the engine
// lands; the engine's errors must be these same variables (or the handlers'
// errors.Is checks must be switched to the engine's), so that a wrapped
// engine error maps to the right status.
var (
	ErrNotFound    = errors.New("not found")
	ErrExists      = errors.New("already exists")
	ErrInvalid     = errors.New("invalid argument")
	ErrHeadMoved   = errors.New("head moved")
	ErrUncommitted = errors.New("uncommitted changes")
	ErrBusy        = errors.New("busy")
	ErrUnavailable = errors.New("unavailable")
)
