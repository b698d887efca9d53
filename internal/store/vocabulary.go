package store

import "layerfs.dev/layerfs/internal/store/object"

// The Store's vocabulary: the object model of package object under the
// names the rest of LayerFS uses (store.ID, store.Tree, ...). They are
// aliases, so a store.ID is an object.ID; package object documents them.
type (
	ID          = object.ID
	Kind        = object.Kind
	EntryType   = object.EntryType
	Xattr       = object.Xattr
	Entry       = object.Entry
	Tree        = object.Tree
	Extent      = object.Extent
	Manifest    = object.Manifest
	CommitStats = object.CommitStats
	Commit      = object.Commit
)

// The object kinds.
const (
	KindChunk    = object.KindChunk
	KindManifest = object.KindManifest
	KindTree     = object.KindTree
	KindCommit   = object.KindCommit
)

// The entry types.
const (
	TypeFile    = object.TypeFile
	TypeDir     = object.TypeDir
	TypeSymlink = object.TypeSymlink
	TypeFIFO    = object.TypeFIFO
	TypeChar    = object.TypeChar
	TypeBlock   = object.TypeBlock
	TypeSocket  = object.TypeSocket
)

// ZeroID is the absent id: no parent, empty file content.
var ZeroID = object.ZeroID

// ErrCorrupt and ErrInvalidCommit are package object's: bytes that do not
// match their id or do not decode, and a commit that breaks the rules of
// its fields.
var (
	ErrCorrupt       = object.ErrCorrupt
	ErrInvalidCommit = object.ErrInvalidCommit
)

// Hash returns the id of an object of kind k whose canonical bytes are data.
func Hash(k Kind, data []byte) ID { return object.Hash(k, data) }

// ParseID parses a full 64-digit hex id.
func ParseID(s string) (ID, error) { return object.ParseID(s) }
