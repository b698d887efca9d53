package engine

import (
	"errors"

	"layerfs.dev/layerfs/store"
)

// Sentinels the engine's errors wrap; the API maps each to one error code.
var (
	ErrNotFound    = store.ErrNotFound
	ErrExists      = store.ErrExists
	ErrBusy        = store.ErrBusy
	ErrCorrupt     = store.ErrCorrupt
	ErrInvalid     = errors.New("invalid argument")
	ErrHeadMoved   = errors.New("branch head moved")
	ErrUncommitted = errors.New("workspace has uncommitted changes")
	ErrUnavailable = errors.New("unavailable")
)
