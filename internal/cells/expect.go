package cells

import (
	"encoding/hex"
	"io"
	"path"
	"sort"

	"github.com/zeebo/blake3"
)

// Hash is the plain BLAKE3-256 of a file's bytes (no domain prefix: it is
// not a store object id).
type Hash [32]byte

// IsZero reports whether h is unset.
func (h Hash) IsZero() bool { return h == Hash{} }

// String is the lower-case hex form.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// HashOf streams r into BLAKE3-256 and returns the hash and the number of
// bytes read.
func HashOf(r io.Reader) (Hash, int64, error) {
	h := blake3.New()
	n, err := io.CopyBuffer(h, r, make([]byte, 1<<20))
	var out Hash
	copy(out[:], h.Sum(nil))
	return out, n, err
}

// Kind is the type of a workspace entry.
type Kind uint8

// Entry kinds.
const (
	File Kind = iota + 1 // a regular file
	Dir
	Symlink
)

func (k Kind) String() string {
	switch k {
	case File:
		return "regular file"
	case Dir:
		return "directory"
	case Symlink:
		return "symlink"
	}
	return "unknown kind"
}

// Match says how a file's bytes are checked.
type Match uint8

// The ways content is matched.
const (
	MatchAny   Match = iota // any bytes (Size, when not -1, still checked)
	MatchBytes              // exactly Data
	MatchZeros              // Size zero bytes
	MatchHash               // Size bytes whose BLAKE3-256 is Hash
)

// Content is a file's expected bytes. Build it with Text, Bytes, Zeros,
// Hashed or AnyContent.
type Content struct {
	Match Match
	Size  int64  // -1 for any size (MatchAny only)
	Data  []byte // MatchBytes
	Hash  Hash   // MatchHash
	// Not, when set, is a hash the content must not have: C11 checks that
	// big no longer holds the base.
	Not Hash
	// Label names the expected content in messages ("the base big").
	Label string
}

// Text is content equal to s.
func Text(s string) Content { return Bytes([]byte(s)) }

// Bytes is content equal to b.
func Bytes(b []byte) Content { return Content{Match: MatchBytes, Size: int64(len(b)), Data: b} }

// Zeros is n zero bytes.
func Zeros(n int64) Content { return Content{Match: MatchZeros, Size: n} }

// Hashed is n bytes with BLAKE3-256 h; label names them in messages.
func Hashed(n int64, h Hash, label string) Content {
	return Content{Match: MatchHash, Size: n, Hash: h, Label: label}
}

// AnyContent is a regular file of any size and content.
func AnyContent() Content { return Content{Match: MatchAny, Size: -1} }

// ExecBit says whether a file's owner-execute bit is checked.
type ExecBit uint8

// Exec bit expectations.
const (
	ExecAny   ExecBit = iota // not checked
	ExecSet                  // must be executable
	ExecClear                // must not be
)

// Entry is one expected path. Parents of every entry are implicitly
// expected directories.
type Entry struct {
	Path    string // slash-separated, relative to the workspace root
	Kind    Kind
	Content Content // File
	Exec    ExecBit // File
	Target  string  // Symlink: the link's text
}

// Command is a check that must run inside the sandbox (C12's git fsck). Its
// stdout is compared with Stdout after trimming surrounding white space.
type Command struct {
	Path   string // what it checks, named in messages (".git")
	Name   string // a short label for messages ("git fsck"); Body if empty
	Body   string // run with the workspace root as the working directory
	Stdout string
	Exit   int
}

// Expectation is a cell's end state. It is exact: the workspace holds the
// entries listed (and their parent directories) and nothing else, except
// inside Opaque directories, whose existence is checked but whose contents
// are not enumerated (C12's .git varies with git's version and is checked by
// Commands instead). Entries listed inside an Opaque directory are still
// checked. Absent paths must not exist; listing them is redundant with
// exactness but gives a clearer message ("f17: still present").
type Expectation struct {
	Entries  []Entry
	Opaque   []string
	Absent   []string
	Commands []Command
}

// Builder assembles an Expectation.
type Builder struct{ e Expectation }

// File expects a regular file.
func (b *Builder) File(p string, c Content) *Builder {
	b.e.Entries = append(b.e.Entries, Entry{Path: clean(p), Kind: File, Content: c})
	return b
}

// Executable expects a regular file with the owner-execute bit set (or, for
// exec false, clear).
func (b *Builder) Executable(p string, c Content, exec bool) *Builder {
	bit := ExecClear
	if exec {
		bit = ExecSet
	}
	b.e.Entries = append(b.e.Entries, Entry{Path: clean(p), Kind: File, Content: c, Exec: bit})
	return b
}

// Dir expects a directory (needed only for empty ones: parents are implied).
func (b *Builder) Dir(p string) *Builder {
	b.e.Entries = append(b.e.Entries, Entry{Path: clean(p), Kind: Dir})
	return b
}

// Symlink expects a symbolic link whose text is target.
func (b *Builder) Symlink(p, target string) *Builder {
	b.e.Entries = append(b.e.Entries, Entry{Path: clean(p), Kind: Symlink, Target: target})
	return b
}

// Opaque expects a directory whose contents are not enumerated.
func (b *Builder) Opaque(p string) *Builder {
	b.e.Opaque = append(b.e.Opaque, clean(p))
	return b
}

// Absent expects p not to exist.
func (b *Builder) Absent(p string) *Builder {
	b.e.Absent = append(b.e.Absent, clean(p))
	return b
}

// Command adds an in-sandbox check.
func (b *Builder) Command(c Command) *Builder {
	b.e.Commands = append(b.e.Commands, c)
	return b
}

// Build returns the expectation with entries sorted by path.
func (b *Builder) Build() Expectation {
	e := b.e
	e.Entries = append([]Entry(nil), e.Entries...)
	sort.Slice(e.Entries, func(i, j int) bool { return e.Entries[i].Path < e.Entries[j].Path })
	return e
}

func clean(p string) string { return path.Clean(p) }
