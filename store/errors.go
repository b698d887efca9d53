package store

import (
	"errors"
	"fmt"
	"regexp"
)

// Sentinel errors, wrapped with context by every method; check them with
// errors.Is. ErrCorrupt is declared in object.go.
var (
	ErrNotFound    = errors.New("not found")
	ErrExists      = errors.New("already exists")
	ErrInvalidName = errors.New("invalid name")
	ErrAmbiguous   = errors.New("ambiguous reference")
	ErrNoStore     = errors.New("no store")
	ErrNewerSchema = errors.New("store schema is newer than this program")
	ErrBusy        = errors.New("store busy")
	ErrClosed      = errors.New("store closed")
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
