package store

import (
	"fmt"
	"regexp"

	"layerfs.dev/layerfs/wire/errclass"
)

// Sentinel errors, wrapped with context by every method; check them with
// errors.Is. Each belongs to a class of package errclass (the API's and
// the CLI's vocabulary): ErrNotFound, ErrExists and ErrBusy are the classes
// themselves. ErrCorrupt and ErrInvalidCommit are package object's
// (vocabulary.go).
var (
	ErrNotFound    = errclass.NotFound
	ErrExists      = errclass.Exists
	ErrBusy        = errclass.Busy
	ErrInvalidName = errclass.New(errclass.Invalid, "invalid name")
	ErrAmbiguous   = errclass.New(errclass.Invalid, "ambiguous reference")
	// ErrInvalidCheckpoint is a checkpoint record whose commits do not
	// fit together (CreateCheckpoint).
	ErrInvalidCheckpoint = errclass.New(errclass.Invalid, "invalid checkpoint")
	ErrNoStore           = errclass.New(errclass.NotFound, "no store")
	ErrNewerSchema       = errclass.New(errclass.Unavailable, "store schema is newer than this program")
	ErrClosed            = errclass.New(errclass.Unavailable, "store closed")
	// ErrUnsupported is an operation a shared Store does not have yet.
	ErrUnsupported = errclass.New(errclass.Unavailable, "not supported on a shared store yet (docs/fleet.md)")
)

// MaxNameLen is the longest valid name in bytes.
const MaxNameLen = 63

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// ValidName checks a project, branch or workspace name: it must match
// ^[a-z0-9][a-z0-9._-]*$ and be at most MaxNameLen bytes. The error wraps
// ErrInvalidName.
func ValidName(name string) error {
	if len(name) > MaxNameLen || !nameRE.MatchString(name) {
		return fmt.Errorf("name %q: must match [a-z0-9][a-z0-9._-]* and be at most %d bytes: %w", name, MaxNameLen, ErrInvalidName)
	}
	return nil
}
