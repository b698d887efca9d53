package object

import (
	"encoding/binary"
	"fmt"
	"math"
)

// encodingVersion is the version byte trees and manifests start with.
const encodingVersion = 1

// enc and dec are the canonical binary form: a version byte, then uvarints,
// varints, length-prefixed byte strings and raw 32-byte ids.
type enc struct{ b []byte }

func (e *enc) u(v uint64)     { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) i(v int64)      { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) s(v string)     { e.u(uint64(len(v))); e.b = append(e.b, v...) }
func (e *enc) bytes(v []byte) { e.u(uint64(len(v))); e.b = append(e.b, v...) }
func (e *enc) id(v ID)        { e.b = append(e.b, v[:]...) }

type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or invalid %s", ErrCorrupt, what)
	}
}

func (d *dec) u() uint64 {
	v, n := binary.Uvarint(d.b)
	// Only the minimal encoding is canonical: "\x80\x00" must not decode
	// to the same value as "\x00", or one object would have two ids.
	if n <= 0 || n != uvarintLen(v) {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// u32 and u8 read a uvarint that must fit the field it fills.
func (d *dec) u32() uint32 {
	v := d.u()
	if v > math.MaxUint32 {
		d.fail("32-bit field")
		return 0
	}
	return uint32(v)
}

func (d *dec) u8() uint8 {
	v := d.u()
	if v > math.MaxUint8 {
		d.fail("8-bit field")
		return 0
	}
	return uint8(v)
}

func (d *dec) i() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 || n != uvarintLen(zigzag(v)) {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

func (d *dec) raw(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail("string")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) s() string     { return string(d.raw(d.u())) }
func (d *dec) bytes() []byte { return append([]byte(nil), d.raw(d.u())...) }

func (d *dec) id() ID {
	var v ID
	copy(v[:], d.raw(32))
	return v
}

func (d *dec) version() {
	if len(d.b) == 0 || d.b[0] != encodingVersion {
		d.fail("encoding version")
		return
	}
	d.b = d.b[1:]
}

func (d *dec) end(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.fail(what + " (trailing bytes)")
	}
	return d.err
}

// Encode returns the tree's canonical bytes. The tree must be valid.
func (t *Tree) Encode() []byte {
	e := enc{b: make([]byte, 0, 16+len(t.Entries)*80)}
	e.b = append(e.b, encodingVersion)
	e.u(uint64(len(t.Entries)))
	for i := range t.Entries {
		x := &t.Entries[i]
		e.s(x.Name)
		e.u(uint64(x.Type))
		e.u(uint64(x.Mode))
		e.u(uint64(x.UID))
		e.u(uint64(x.GID))
		e.i(x.Size)
		e.i(x.MtimeNs)
		e.u(uint64(x.ObjectKind))
		if x.ObjectKind != 0 {
			e.id(x.Object)
		}
		e.s(x.Target)
		e.u(x.Rdev)
		e.u(x.Link)
		e.u(uint64(len(x.Xattrs)))
		for _, a := range x.Xattrs {
			e.s(a.Name)
			e.bytes(a.Value)
		}
	}
	return e.b
}

// DecodeTree parses canonical tree bytes and validates them.
func DecodeTree(b []byte) (*Tree, error) {
	d := dec{b: b}
	d.version()
	n := d.u()
	if n > uint64(len(b)) {
		d.fail("entry count")
	}
	t := &Tree{}
	if d.err == nil {
		t.Entries = make([]Entry, n)
	}
	for i := range t.Entries {
		x := &t.Entries[i]
		x.Name = d.s()
		x.Type = EntryType(d.u8())
		x.Mode = d.u32()
		x.UID = d.u32()
		x.GID = d.u32()
		x.Size = d.i()
		x.MtimeNs = d.i()
		x.ObjectKind = Kind(d.u8())
		if x.ObjectKind != 0 {
			x.Object = d.id()
		}
		x.Target = d.s()
		x.Rdev = d.u()
		x.Link = d.u()
		if na := d.u(); na > 0 && d.err == nil {
			if na > uint64(len(d.b)) {
				d.fail("xattr count")
				break
			}
			x.Xattrs = make([]Xattr, na)
			for j := range x.Xattrs {
				x.Xattrs[j] = Xattr{Name: d.s(), Value: d.bytes()}
			}
		}
		if d.err != nil {
			break
		}
	}
	if err := d.end("tree"); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// Encode returns the manifest's canonical bytes.
func (m *Manifest) Encode() []byte {
	e := enc{b: make([]byte, 0, 8+len(m.Extents)*40)}
	e.b = append(e.b, encodingVersion)
	e.i(m.Size)
	e.u(uint64(len(m.Extents)))
	for _, x := range m.Extents {
		if x.Chunk.IsZero() {
			e.u(0)
		} else {
			e.u(1)
			e.id(x.Chunk)
		}
		e.i(x.Length)
	}
	return e.b
}

// DecodeManifest parses canonical manifest bytes; the extents must add up
// to Size.
func DecodeManifest(b []byte) (*Manifest, error) {
	d := dec{b: b}
	d.version()
	m := &Manifest{Size: d.i()}
	n := d.u()
	if n > uint64(len(b)) {
		d.fail("extent count")
	}
	var sum int64
	for i := uint64(0); i < n && d.err == nil; i++ {
		var x Extent
		switch d.u() {
		case 0:
		case 1:
			// A zero id is written as a hole (flag 0), never as flag 1.
			if x.Chunk = d.id(); x.Chunk.IsZero() {
				d.fail("extent chunk")
			}
		default:
			d.fail("extent flag")
		}
		x.Length = d.i()
		if x.Length <= 0 {
			d.fail("extent length")
		}
		sum += x.Length
		m.Extents = append(m.Extents, x)
	}
	if err := d.end("manifest"); err != nil {
		return nil, err
	}
	if sum != m.Size {
		return nil, fmt.Errorf("%w: manifest extents add up to %d, size is %d", ErrCorrupt, sum, m.Size)
	}
	return m, nil
}

// Versions of the commit encoding. Version 1 (one optional parent, no
// generation) is still read; every commit is written as version 2.
const (
	commitV1 = 1
	commitV2 = 2 // parents (any number) and the generation
)

// Encode returns the commit's canonical bytes (version 2). The commit must
// be valid.
func (c *Commit) Encode() []byte {
	e := enc{b: make([]byte, 0, 96+32*len(c.Parents)+len(c.Message)+len(c.Author))}
	e.b = append(e.b, commitV2)
	e.id(c.Root)
	e.u(uint64(len(c.Parents)))
	for _, p := range c.Parents {
		e.id(p)
	}
	e.u(c.Generation)
	e.s(c.Message)
	e.s(c.Author)
	e.i(c.TimeNs)
	e.i(c.Stats.Files)
	e.i(c.Stats.Dirs)
	e.i(c.Stats.Bytes)
	e.i(c.Stats.Changed)
	return e.b
}

// DecodeCommit parses canonical commit bytes of either version.
func DecodeCommit(b []byte) (*Commit, error) {
	d := dec{b: b}
	c := &Commit{}
	switch {
	case len(b) > 0 && b[0] == commitV1:
		d.b = d.b[1:]
		c.Root = d.id()
		if p := d.id(); !p.IsZero() {
			c.Parents = []ID{p}
		}
	case len(b) > 0 && b[0] == commitV2:
		d.b = d.b[1:]
		c.Root = d.id()
		n := d.u()
		if n > uint64(len(d.b))/32 {
			d.fail("parent count")
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			c.Parents = append(c.Parents, d.id())
		}
		c.Generation = d.u()
	default:
		d.fail("encoding version")
	}
	c.Message, c.Author, c.TimeNs = d.s(), d.s(), d.i()
	c.Stats = CommitStats{Files: d.i(), Dirs: d.i(), Bytes: d.i(), Changed: d.i()}
	if err := d.end("commit"); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return c, nil
}
