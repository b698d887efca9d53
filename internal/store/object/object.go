package object

import (
	"fmt"
	"sort"
	"strings"
	"syscall"

	"layerfs.dev/layerfs/wire/errclass"
)

// EntryType is the type of a directory entry.
type EntryType uint8

// Entry types; the values are stored and must not change.
const (
	TypeFile    EntryType = 1
	TypeDir     EntryType = 2
	TypeSymlink EntryType = 3
	TypeFIFO    EntryType = 4
	TypeChar    EntryType = 5
	TypeBlock   EntryType = 6
	TypeSocket  EntryType = 7
)

// FileType returns the file type bits of a stat's st_mode for t
// (syscall.S_IFREG for a file, ...), or 0 for an unknown type.
func (t EntryType) FileType() uint32 {
	switch t {
	case TypeFile:
		return syscall.S_IFREG
	case TypeDir:
		return syscall.S_IFDIR
	case TypeSymlink:
		return syscall.S_IFLNK
	case TypeFIFO:
		return syscall.S_IFIFO
	case TypeChar:
		return syscall.S_IFCHR
	case TypeBlock:
		return syscall.S_IFBLK
	case TypeSocket:
		return syscall.S_IFSOCK
	}
	return 0
}

func (t EntryType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	case TypeFIFO:
		return "fifo"
	case TypeChar:
		return "char"
	case TypeBlock:
		return "block"
	case TypeSocket:
		return "socket"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Xattr is one extended attribute.
type Xattr struct {
	Name  string
	Value []byte
}

// Entry is one name in a directory. Names and targets are byte strings
// (a Go string may hold non-UTF-8 bytes), never cleaned or normalised.
type Entry struct {
	Name    string
	Type    EntryType
	Mode    uint32 // permission bits with setuid, setgid and sticky: mode & 07777
	UID     uint32
	GID     uint32
	Size    int64 // file: content length; symlink: len(Target); others 0
	MtimeNs int64 // modification time, nanoseconds since the Unix epoch
	// Object is a file's content (a chunk for content stored whole, a
	// manifest for chunked content, ZeroID for an empty file) or a
	// directory's tree. ObjectKind says which.
	Object     ID
	ObjectKind Kind
	Target     string  // symlink target
	Rdev       uint64  // device number of char and block devices
	Xattrs     []Xattr // sorted by Name, unique
	// Link groups hard links: entries of one commit with the same non-zero
	// Link are one inode. It is derived from the inode's content and first
	// path, so re-capturing an unchanged tree yields the same value.
	Link uint64
}

// Tree is one directory: its entries sorted by Name (bytewise), unique.
type Tree struct {
	Entries []Entry
}

// Find returns the entry called name, using binary search.
func (t *Tree) Find(name string) (*Entry, bool) {
	i := sort.Search(len(t.Entries), func(i int) bool { return t.Entries[i].Name >= name })
	if i < len(t.Entries) && t.Entries[i].Name == name {
		return &t.Entries[i], true
	}
	return nil, false
}

// Extent is one run of a chunked file: a chunk's bytes, or a hole of zeros
// when Chunk is ZeroID (sparse files keep their holes).
type Extent struct {
	Chunk  ID
	Length int64
}

// Manifest is a chunked file's content: extents in file order.
type Manifest struct {
	Size    int64
	Extents []Extent
}

// CommitStats summarise a commit's tree and its change from the parent.
type CommitStats struct {
	Files   int64 `json:"files"`
	Dirs    int64 `json:"dirs"`
	Bytes   int64 `json:"bytes"`   // logical bytes of all files
	Changed int64 `json:"changed"` // paths added, removed or modified against the first parent
}

// Commit is an immutable snapshot.
type Commit struct {
	Root ID
	// Parents are the commits this one follows, the first parent first:
	// none for a project's first commit, one for a commit, two or more for
	// a merge (the branch's head, then what was merged into it). They are
	// distinct and never ZeroID.
	Parents []ID
	// Generation is one more than the highest generation of the parents
	// (1 for a commit without parents), so an ancestor's is always lower:
	// it orders history walks and bounds the merge base search. Commits
	// written before generations were recorded (encoding version 1, one
	// parent at most) have 0.
	Generation uint64
	Message    string
	Author     string
	TimeNs     int64
	Stats      CommitStats
}

// Parent is the first parent, or ZeroID for a commit without parents.
func (c *Commit) Parent() ID {
	if len(c.Parents) == 0 {
		return ZeroID
	}
	return c.Parents[0]
}

// ErrInvalidCommit is wrapped when a commit to be stored breaks the rules
// of its fields (duplicate or zero parents).
var ErrInvalidCommit = errclass.New(errclass.Invalid, "invalid commit")

// Validate checks what the canonical form requires of a commit: parents
// that are distinct and not ZeroID.
func (c *Commit) Validate() error {
	for i, p := range c.Parents {
		if p.IsZero() {
			return fmt.Errorf("%w: parent %d is the zero id", ErrInvalidCommit, i)
		}
		for _, q := range c.Parents[:i] {
			if p == q {
				return fmt.Errorf("%w: parent %s appears twice", ErrInvalidCommit, p.Short())
			}
		}
	}
	return nil
}

// Validate checks what the canonical form requires of a tree: names that are
// valid path components, sorted and unique; sorted unique xattrs; object
// kinds that fit the entry types.
func (t *Tree) Validate() error {
	for i := range t.Entries {
		e := &t.Entries[i]
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") {
			return fmt.Errorf("%w: invalid entry name %q", ErrCorrupt, e.Name)
		}
		if i > 0 && t.Entries[i-1].Name >= e.Name {
			return fmt.Errorf("%w: entries not sorted or not unique at %q", ErrCorrupt, e.Name)
		}
		for j := 1; j < len(e.Xattrs); j++ {
			if e.Xattrs[j-1].Name >= e.Xattrs[j].Name {
				return fmt.Errorf("%w: xattrs of %q not sorted or not unique", ErrCorrupt, e.Name)
			}
		}
		switch e.Type {
		case TypeDir:
			if e.ObjectKind != KindTree {
				return fmt.Errorf("%w: directory %q does not name a tree", ErrCorrupt, e.Name)
			}
		case TypeFile:
			if !(e.ObjectKind == KindChunk || e.ObjectKind == KindManifest || (e.ObjectKind == 0 && e.Object.IsZero())) {
				return fmt.Errorf("%w: file %q names a %s", ErrCorrupt, e.Name, e.ObjectKind)
			}
		default:
			if e.ObjectKind != 0 || !e.Object.IsZero() {
				return fmt.Errorf("%w: %s %q names an object", ErrCorrupt, e.Type, e.Name)
			}
		}
	}
	return nil
}
