package overlay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"layerfs.dev/layerfs/internal/store"
)

// The upper layer's on-disk format. Whiteouts, opaque directories and
// redirects are the kernel overlayfs ones, so an upper directory can be read
// (and debugged) with the same tools; everything LayerFS adds is in the
// trusted.layerfs namespace.
const (
	// xattrOpaque = "y" on an upper directory hides the lower directory of
	// the same name.
	xattrOpaque = "trusted.overlay.opaque"
	// xattrRedirect on an upper directory names the lower directory it
	// merges with: a renamed lower directory. It is an absolute path in the
	// lower tree, or (as kernel overlayfs writes for a rename within one
	// directory) a name relative to the parent's lower directory. Kernel
	// overlayfs also sets it on a metacopy file that was renamed.
	xattrRedirect = "trusted.overlay.redirect"
	// xattrOrigin on an upper regular file says that (some of) its data is
	// still the lower content it records: a metacopy (metadata changed,
	// data untouched) or a partial copy-up (see originPartial).
	xattrOrigin = "trusted.layerfs.origin"
	// xattrMetacopy on an upper regular file written by kernel overlayfs
	// (metacopy=on) says its data is still the lower file's: the one named
	// by its trusted.overlay.redirect, else the one of the same path.
	xattrMetacopy = "trusted.overlay.metacopy"

	reservedOverlay = "trusted.overlay."
	reservedLayerFS = "trusted.layerfs."
)

// reservedXattrs are the prefixes of reservedXattr, for a capture of the
// upper (commit.Change.HideXattrs). Read only.
var reservedXattrs = []string{reservedOverlay, reservedLayerFS}

// reservedXattr reports whether name belongs to the upper layer's own
// bookkeeping; such names are hidden from the merged view and cannot be set
// through it.
func reservedXattr(name string) bool {
	return strings.HasPrefix(name, reservedOverlay) || strings.HasPrefix(name, reservedLayerFS)
}

// origin is the decoded trusted.layerfs.origin xattr.
type origin struct {
	Kind   store.Kind
	Object store.ID
	Size   int64
}

const originVersion = 1

func (g origin) encode() []byte {
	b := make([]byte, 0, 3+32+binary.MaxVarintLen64)
	b = append(b, originVersion)
	b = append(b, 0, byte(g.Kind))
	b = append(b, g.Object[:]...)
	return binary.AppendVarint(b, g.Size)
}

var errBadOrigin = errors.New("invalid " + xattrOrigin)

func decodeOrigin(b []byte) (origin, error) {
	var g origin
	if len(b) < 3+32+1 || b[0] != originVersion {
		return g, errBadOrigin
	}
	g.Kind = store.Kind(b[2])
	copy(g.Object[:], b[3:35])
	v, n := binary.Varint(b[35:])
	if n <= 0 || 35+n != len(b) || v < 0 {
		return g, errBadOrigin
	}
	g.Size = v
	return g, nil
}

// entry returns a lower entry naming the origin's content, enough for
// Lower.Materialize.
func (g origin) entry() *store.Entry {
	return &store.Entry{Type: store.TypeFile, Object: g.Object, ObjectKind: g.Kind, Size: g.Size}
}

func originOf(e *store.Entry) origin {
	return origin{Kind: e.ObjectKind, Object: e.Object, Size: e.Size}
}

// NameMax is the longest name of one path component (NAME_MAX).
const NameMax = 255

// validName rejects names that are not a single path component, and names
// longer than NameMax (ENAMETOOLONG); the kernel never sends the former,
// the direct API must not accept them either.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("name %q: %w", name, errInvalidName)
	}
	if len(name) > NameMax {
		return syscall.ENAMETOOLONG
	}
	return nil
}
