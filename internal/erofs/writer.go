package erofs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Inode is one file of the image. A hard link is the same *Inode under two
// names.
type Inode struct {
	Mode     uint32 // type and permission bits, as in stat's st_mode
	UID, GID uint32
	Size     int64  // a regular file's size (a hole in the image)
	MtimeNs  int64  // nanoseconds since the Unix epoch
	Rdev     uint64 // a device's number (unix.Mkdev)
	Target   string // a symlink's target
	Xattrs   []Xattr
	// Entries of a directory, any order ("." and ".." are added).
	Entries []Entry
}

// Entry is one name in a directory.
type Entry struct {
	Name  string
	Inode *Inode
}

// Xattr is one extended attribute; the name has its namespace prefix
// (user., trusted., security., system.posix_acl_access or _default).
type Xattr struct {
	Name  string
	Value []byte
}

// Options tune Write.
type Options struct {
	UUID       [16]byte // the file system's UUID (overlayfs keys file handles by it)
	VolumeName string   // at most 16 bytes
}

const (
	blockBits   = 12
	blockSize   = 1 << blockBits
	superOffset = 1024
	superMagic  = 0xE0F5E1E2
	inodeSize   = 64 // extended inode
	slotSize    = 32 // nid unit

	featureIncompatChunkedFile = 0x4

	layoutFlatPlain  = 0
	layoutChunkBased = 4

	nullAddr = 0xFFFFFFFF

	direntSize = 12
	maxNameLen = 255
)

// Dirent file types.
const (
	ftUnknown = iota
	ftRegular
	ftDir
	ftChar
	ftBlock
	ftFIFO
	ftSocket
	ftSymlink
)

// xattrPrefixes are the name indexes of erofs_xattr_entry, longest first
// where one prefix contains another.
var xattrPrefixes = []struct {
	prefix string
	index  uint8
}{
	{"system.posix_acl_access", 2},
	{"system.posix_acl_default", 3},
	{"user.", 1},
	{"trusted.", 4},
	{"security.", 6},
}

// ErrUnsupported is wrapped when a tree holds something the image cannot
// carry (an xattr of another namespace, a name too long).
var ErrUnsupported = errors.New("erofs: unsupported")

// node is an inode being laid out.
type node struct {
	in     *Inode
	nid    uint64
	nlink  uint32
	parent *node
	kids   []kid  // sorted, with "." and ".."
	xattrs []byte // the inline xattr body (header and entries), or nil
	data   []byte // directory blocks or symlink target
	blkadr uint32 // first data block
	nblks  uint32 // data blocks
}

type kid struct {
	name string
	n    *node
}

// Write writes an image of the tree under root (a directory) to w.
func Write(w io.Writer, root *Inode, opts Options) error {
	if root.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return fmt.Errorf("%w: the root is not a directory", ErrUnsupported)
	}
	// Collect the inodes, depth first, the root first (its nid is 0: the
	// superblock's root_nid is 16 bits wide).
	var order []*node
	seen := map[*Inode]*node{}
	var visit func(in *Inode, parent *node) (*node, error)
	visit = func(in *Inode, parent *node) (*node, error) {
		if n, ok := seen[in]; ok {
			if in.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				return nil, fmt.Errorf("%w: a directory under two names", ErrUnsupported)
			}
			n.nlink++
			return n, nil
		}
		n := &node{in: in, nlink: 1, parent: parent}
		seen[in] = n
		order = append(order, n)
		if in.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return n, nil
		}
		if parent == nil {
			n.parent = n
		}
		n.nlink = 2
		n.kids = make([]kid, 0, len(in.Entries)+2)
		for _, e := range in.Entries {
			if e.Name == "" || e.Name == "." || e.Name == ".." || len(e.Name) > maxNameLen || strings.ContainsAny(e.Name, "/\x00") {
				return nil, fmt.Errorf("%w: name %q", ErrUnsupported, e.Name)
			}
			k, err := visit(e.Inode, n)
			if err != nil {
				return nil, err
			}
			if k.in.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				n.nlink++
			}
			n.kids = append(n.kids, kid{e.Name, k})
		}
		return n, nil
	}
	if _, err := visit(root, nil); err != nil {
		return err
	}
	// Inode area: nids.
	var off uint64
	for _, n := range order {
		x, err := xattrBody(n.in.Xattrs)
		if err != nil {
			return err
		}
		n.xattrs = x
		size := uint64(inodeSize + len(x))
		if n.chunked() {
			if uint64(n.in.Size) > blockSize<<31 {
				return fmt.Errorf("%w: a file of %d bytes", ErrUnsupported, n.in.Size)
			}
			size += 4 // one block map entry, 4-byte aligned (inode and body are)
		}
		size = alignUp(size, slotSize)
		// An inode crosses no block boundary, unless it is longer than a
		// block (long xattrs): it then starts one.
		if rest := blockSize - off%blockSize; size > rest && rest < blockSize {
			off += rest
		}
		n.nid = off / slotSize
		off += size
	}
	metaBlocks := uint32(alignUp(off, blockSize) / blockSize)
	// Data blocks: directories and symlinks.
	next := 1 + metaBlocks
	for _, n := range order {
		switch n.in.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			n.kids = append(n.kids, kid{".", n}, kid{"..", n.parent})
			slices.SortFunc(n.kids, func(a, b kid) int { return strings.Compare(a.name, b.name) })
			n.data = dirBlocks(n.kids)
		case syscall.S_IFLNK:
			if len(n.in.Target) == 0 || len(n.in.Target) > blockSize {
				return fmt.Errorf("%w: symlink target of %d bytes", ErrUnsupported, len(n.in.Target))
			}
			n.data = []byte(n.in.Target)
		default:
			continue
		}
		n.blkadr = next
		n.nblks = uint32(alignUp(uint64(len(n.data)), blockSize) / blockSize)
		next += n.nblks
	}
	img := make([]byte, uint64(next)*blockSize)
	writeSuper(img[superOffset:], opts, uint64(len(order)), next)
	meta := img[blockSize:]
	for _, n := range order {
		n.writeInode(meta[n.nid*slotSize:])
		if n.data != nil {
			copy(img[uint64(n.blkadr)*blockSize:], n.data)
		}
	}
	_, err := w.Write(img)
	return err
}

func (n *node) chunked() bool {
	return n.in.Mode&syscall.S_IFMT == syscall.S_IFREG && n.in.Size > 0
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) / a * a }

func writeSuper(b []byte, opts Options, inos uint64, blocks uint32) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], superMagic)
	b[12] = blockBits
	le.PutUint16(b[14:], 0) // root nid
	le.PutUint64(b[16:], inos)
	le.PutUint32(b[36:], blocks)
	le.PutUint32(b[40:], 1) // meta_blkaddr
	copy(b[48:64], opts.UUID[:])
	copy(b[64:80], opts.VolumeName)
	le.PutUint32(b[80:], featureIncompatChunkedFile)
}

func (n *node) writeInode(b []byte) {
	le := binary.LittleEndian
	in := n.in
	layout := uint16(layoutFlatPlain)
	var u uint32
	size := uint64(len(n.data))
	switch in.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		size = uint64(in.Size)
		if n.chunked() {
			layout = layoutChunkBased
			// One chunk covers the file: chunk bits above the block's.
			bits := uint32(0)
			for uint64(blockSize)<<bits < size && bits < 31 {
				bits++
			}
			u = bits // format: block-map entries (no index flag)
		}
	case syscall.S_IFDIR, syscall.S_IFLNK:
		u = n.blkadr
	case syscall.S_IFCHR, syscall.S_IFBLK:
		u = encodeDev(in.Rdev)
	}
	le.PutUint16(b[0:], 1|layout<<1) // extended inode
	if len(n.xattrs) > 0 {
		le.PutUint16(b[2:], uint16(1+(len(n.xattrs)-12)/4))
	}
	le.PutUint16(b[4:], uint16(in.Mode))
	le.PutUint64(b[8:], size)
	le.PutUint32(b[16:], u)
	le.PutUint32(b[20:], uint32(n.nid))
	le.PutUint32(b[24:], in.UID)
	le.PutUint32(b[28:], in.GID)
	sec, nsec := in.MtimeNs/1e9, in.MtimeNs%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	le.PutUint64(b[32:], uint64(sec))
	le.PutUint32(b[40:], uint32(nsec))
	le.PutUint32(b[44:], n.nlink)
	copy(b[inodeSize:], n.xattrs)
	if n.chunked() {
		le.PutUint32(b[inodeSize+len(n.xattrs):], nullAddr) // a hole
	}
}

// encodeDev is the kernel's new_encode_dev.
func encodeDev(rdev uint64) uint32 {
	major, minor := unix.Major(rdev), unix.Minor(rdev)
	return minor&0xff | major<<8 | (minor&^0xff)<<12
}

// xattrBody is an inode's inline xattrs: the 12-byte ibody header, then
// each entry (name length, name index, value size, name without its
// prefix, value) padded to 4 bytes; nil without xattrs.
func xattrBody(xs []Xattr) ([]byte, error) {
	if len(xs) == 0 {
		return nil, nil
	}
	b := make([]byte, 12, 64)
	for _, x := range xs {
		var index uint8
		name := ""
		for _, p := range xattrPrefixes {
			if strings.HasPrefix(x.Name, p.prefix) {
				index, name = p.index, x.Name[len(p.prefix):]
				break
			}
		}
		if index == 0 || len(name) > 255 || len(x.Value) > 0xffff || ((index == 2 || index == 3) && name != "") {
			return nil, fmt.Errorf("%w: xattr %q", ErrUnsupported, x.Name)
		}
		e := []byte{uint8(len(name)), index, 0, 0}
		binary.LittleEndian.PutUint16(e[2:], uint16(len(x.Value)))
		e = append(append(e, name...), x.Value...)
		for len(e)%4 != 0 {
			e = append(e, 0)
		}
		b = append(b, e...)
	}
	return b, nil
}

// dirBlocks lays out sorted directory entries in blocks: per block, the
// dirents (nid, name offset, file type), then the names. The last block is
// as long as what it holds (the directory's size), the others full.
func dirBlocks(kids []kid) []byte {
	var out []byte
	for len(kids) > 0 {
		n, used := 0, 0
		for n < len(kids) && used+direntSize+len(kids[n].name) <= blockSize {
			used += direntSize + len(kids[n].name)
			n++
		}
		blk := make([]byte, used)
		nameOff := n * direntSize
		for i, k := range kids[:n] {
			d := blk[i*direntSize:]
			binary.LittleEndian.PutUint64(d[0:], k.n.nid)
			binary.LittleEndian.PutUint16(d[8:], uint16(nameOff))
			d[10] = fileType(k.n.in.Mode)
			nameOff += copy(blk[nameOff:], k.name)
		}
		kids = kids[n:]
		if len(kids) > 0 {
			blk = append(blk, make([]byte, blockSize-used)...)
		}
		out = append(out, blk...)
	}
	return out
}

func fileType(mode uint32) uint8 {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return ftRegular
	case syscall.S_IFDIR:
		return ftDir
	case syscall.S_IFCHR:
		return ftChar
	case syscall.S_IFBLK:
		return ftBlock
	case syscall.S_IFIFO:
		return ftFIFO
	case syscall.S_IFSOCK:
		return ftSocket
	case syscall.S_IFLNK:
		return ftSymlink
	}
	return ftUnknown
}
