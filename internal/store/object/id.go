package object

import (
	"encoding/hex"
	"fmt"

	"github.com/zeebo/blake3"

	"layerfs.dev/layerfs/wire/errclass"
)

// ID names an object: the BLAKE3-256 hash of a per-kind domain prefix and the
// object's canonical bytes. BLAKE3 rather than SHA-256 because it hashes the
// chunker's chunk sizes faster; BenchmarkHash and BenchmarkHashSideBySide
// measure the two.
type ID [32]byte

// ZeroID is the absent id: no parent, empty file content.
var ZeroID ID

// IsZero reports whether id is ZeroID.
func (id ID) IsZero() bool { return id == ZeroID }

// String is the lower-case hex form used everywhere ids are shown.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short is the 12-digit prefix used in tables.
func (id ID) Short() string { return id.String()[:12] }

// MarshalText makes ids hex strings in JSON.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses the hex form.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// ParseID parses a full 64-digit hex id.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 64 {
		return id, fmt.Errorf("parse id %q: want 64 hex digits", s)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("parse id %q: %w", s, err)
	}
	return id, nil
}

// Kind is an object's kind; it is part of the hashed bytes, so equal bytes
// of different kinds never share an id.
type Kind uint8

// The object kinds.
const (
	KindChunk    Kind = 1 // raw file bytes: a small file's whole content, or one CDC chunk
	KindManifest Kind = 2 // a chunked file's extent list
	KindTree     Kind = 3 // one directory's entries
	KindCommit   Kind = 4 // a snapshot: root tree, parent, message, stats
)

var kindPrefix = [...]string{
	KindChunk:    "layerfs chunk\x00",
	KindManifest: "layerfs manifest\x00",
	KindTree:     "layerfs tree\x00",
	KindCommit:   "layerfs commit\x00",
}

func (k Kind) String() string {
	switch k {
	case KindChunk:
		return "chunk"
	case KindManifest:
		return "manifest"
	case KindTree:
		return "tree"
	case KindCommit:
		return "commit"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Hash returns the id of an object of kind k whose canonical bytes are data.
func Hash(k Kind, data []byte) ID {
	h := blake3.New()
	h.WriteString(kindPrefix[k])
	h.Write(data)
	var id ID
	h.Sum(id[:0])
	return id
}

// ErrCorrupt is wrapped by every error about bytes that do not match their
// id or cannot be decoded.
var ErrCorrupt = errclass.New(errclass.Corrupt, "corrupt object")
