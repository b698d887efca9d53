package criu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"layerfs.dev/layerfs/wire/errclass"
)

// CRIU's images are a header of magic numbers, then entries, each a
// little-endian uint32 length and a protobuf message (proto2; the field
// numbers below are those of CRIU's images/*.proto).

// image is one image file: its header and its entries' messages.
type image struct {
	head    []byte
	entries [][]byte
}

// headLen is the header of every image but the inventory's and the raw
// ones': CRIU's common magic, then the image's own.
const headLen = 8

func readImage(path string) (*image, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < headLen {
		return nil, fmt.Errorf("image %s: %d bytes, shorter than its header", filepath.Base(path), len(b))
	}
	im := &image{head: b[:headLen]}
	for i := headLen; i < len(b); {
		if i+4 > len(b) {
			return nil, fmt.Errorf("image %s: a torn entry at %d", filepath.Base(path), i)
		}
		n := int(binary.LittleEndian.Uint32(b[i:]))
		i += 4
		if i+n > len(b) {
			return nil, fmt.Errorf("image %s: an entry of %d bytes past its end", filepath.Base(path), n)
		}
		im.entries = append(im.entries, b[i:i+n])
		i += n
	}
	return im, nil
}

func (im *image) write(path string) error {
	out := append([]byte(nil), im.head...)
	for _, e := range im.entries {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e)))
		out = append(out, e...)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// field is one field of a protobuf message: varint (wire type 0) or
// bytes (2); criu's images use no others where this package looks.
type field struct {
	num   uint64
	wire  uint64
	value uint64 // varint
	bytes []byte // length-delimited
	raw   []byte // fixed32/fixed64, kept as they are
}

func decode(msg []byte) ([]field, error) {
	var out []field
	for i := 0; i < len(msg); {
		key, n := binary.Uvarint(msg[i:])
		if n <= 0 {
			return nil, errors.New("bad protobuf key")
		}
		i += n
		f := field{num: key >> 3, wire: key & 7}
		switch f.wire {
		case 0:
			v, n := binary.Uvarint(msg[i:])
			if n <= 0 {
				return nil, errors.New("bad protobuf varint")
			}
			f.value, i = v, i+n
		case 2:
			l, n := binary.Uvarint(msg[i:])
			if n <= 0 || i+n+int(l) > len(msg) {
				return nil, errors.New("bad protobuf length")
			}
			f.bytes, i = msg[i+n:i+n+int(l)], i+n+int(l)
		case 1, 5:
			w := 8
			if f.wire == 5 {
				w = 4
			}
			if i+w > len(msg) {
				return nil, errors.New("bad protobuf fixed field")
			}
			f.raw, i = msg[i:i+w], i+w
		default:
			return nil, fmt.Errorf("protobuf wire type %d", f.wire)
		}
		out = append(out, f)
	}
	return out, nil
}

func encode(fields []field) []byte {
	var out []byte
	for _, f := range fields {
		out = binary.AppendUvarint(out, f.num<<3|f.wire)
		switch f.wire {
		case 0:
			out = binary.AppendUvarint(out, f.value)
		case 2:
			out = binary.AppendUvarint(out, uint64(len(f.bytes)))
			out = append(out, f.bytes...)
		default:
			out = append(out, f.raw...)
		}
	}
	return out
}

func varint(num, v uint64) field         { return field{num: num, wire: 0, value: v} }
func message(num uint64, b []byte) field { return field{num: num, wire: 2, bytes: b} }

// get returns the first field num, if any.
func get(fields []field, num uint64) (field, bool) {
	for _, f := range fields {
		if f.num == num {
			return f, true
		}
	}
	return field{}, false
}

// Field numbers of CRIU's images.
const (
	fileEntryType  = 1  // file_entry.type (fd_types)
	fileEntryID    = 2  // file_entry.id
	fileEntryReg   = 3  // file_entry.reg
	fdTypeReg      = 1  // fd_types.REG
	fdTypeMemfd    = 18 // fd_types.MEMFD
	mmExeFileID    = 12 // mm_entry.exe_file_id
	memfdInodeUID  = 2  // memfd_inode_entry.uid
	memfdInodeGID  = 3  // memfd_inode_entry.gid
	mntMountID     = 2  // mnt_entry.mnt_id
	mntMountpoint  = 7  // mnt_entry.mountpoint
	statsDump      = 1  // stats_entry.dump
	statsFrozen    = 2  // dump_stats_entry.frozen_time (µs)
	statsWritten   = 7  // dump_stats_entry.pages_written
	statsRestore   = 2  // stats_entry.restore
	statsRestoreT  = 4  // restore_stats_entry.restore_time (µs)
	statsForkingT  = 3  // restore_stats_entry.forking_time (µs)
	unmappedID     = 0xffffffff
	regFlagsRdonly = 0o100000 // O_RDONLY|O_LARGEFILE, as criu opens an executable
)

// RelinkMemfdExe makes a dump whose processes run from a memfd
// restorable (see the package comment): every process whose executable
// is a memfd gets as its executable the regular file exe (a path from the
// root of the restored mount namespace, which must hold a copy of the
// memfd's bytes, size bytes of mode mode, when criu restores), and every
// memfd owned by an id its user namespace does not map is given that
// namespace's root. It returns how many processes it relinked.
func RelinkMemfdExe(dir, exe string, size int64, mode uint32) (int, error) {
	files, err := readImage(filepath.Join(dir, "files.img"))
	if err != nil {
		return 0, imageErr(err)
	}
	memfds := map[uint64]bool{}
	var maxID uint64
	for _, e := range files.entries {
		fs, err := decode(e)
		if err != nil {
			return 0, imageErr(fmt.Errorf("files.img: %w", err))
		}
		t, _ := get(fs, fileEntryType)
		id, _ := get(fs, fileEntryID)
		maxID = max(maxID, id.value)
		if t.value == fdTypeMemfd {
			memfds[id.value] = true
		}
	}
	root, err := rootMountID(dir)
	if err != nil {
		return 0, err
	}
	mms, _ := filepath.Glob(filepath.Join(dir, "mm-*.img"))
	newID, relinked := maxID+1, 0
	for _, p := range mms {
		im, err := readImage(p)
		if err != nil || len(im.entries) == 0 {
			return 0, imageErr(fmt.Errorf("%s: %w", filepath.Base(p), err))
		}
		fs, err := decode(im.entries[0])
		if err != nil {
			return 0, imageErr(fmt.Errorf("%s: %w", filepath.Base(p), err))
		}
		changed := false
		for i := range fs {
			if fs[i].num == mmExeFileID && memfds[fs[i].value] {
				fs[i].value, changed = newID, true
			}
		}
		if !changed {
			continue
		}
		im.entries[0] = encode(fs)
		if err := im.write(p); err != nil {
			return 0, imageErr(err)
		}
		relinked++
	}
	if relinked > 0 {
		files.entries = append(files.entries, regFileEntry(newID, exe, root, size, mode))
		if err := files.write(filepath.Join(dir, "files.img")); err != nil {
			return 0, imageErr(err)
		}
	}
	return relinked, ownMemfds(dir)
}

// regFileEntry is a file_entry of a regular file opened read-only: path
// on mount mnt (criu's mount id), with the size and mode a restore checks.
func regFileEntry(id uint64, path string, mnt uint64, size int64, mode uint32) []byte {
	fown := encode([]field{varint(1, 0), varint(2, 0), varint(3, 0), varint(4, 0), varint(5, 0)})
	reg := encode([]field{
		varint(1, id), varint(2, regFlagsRdonly), varint(3, 0), message(5, fown),
		message(6, []byte(path)), varint(7, mnt<<1), // mnt_id is sint32: zigzag
		varint(8, uint64(size)), varint(10, uint64(mode)),
	})
	return encode([]field{varint(fileEntryType, fdTypeReg), varint(fileEntryID, id), message(fileEntryReg, reg)})
}

// rootMountID is criu's id of the dumped mount namespace's root mount.
func rootMountID(dir string) (uint64, error) {
	ps, _ := filepath.Glob(filepath.Join(dir, "mountpoints-*.img"))
	for _, p := range ps {
		im, err := readImage(p)
		if err != nil {
			return 0, imageErr(err)
		}
		for _, e := range im.entries {
			fs, err := decode(e)
			if err != nil {
				return 0, imageErr(fmt.Errorf("%s: %w", filepath.Base(p), err))
			}
			if mp, ok := get(fs, mntMountpoint); ok && string(mp.bytes) == "/" {
				id, _ := get(fs, mntMountID)
				return id.value, nil
			}
		}
	}
	return 0, imageErr(errors.New("no root mount in the images (was a mount namespace dumped?)"))
}

// ownMemfds gives every memfd owned by an unmapped id the user
// namespace's root (uid and gid 0 inside).
func ownMemfds(dir string) error {
	p := filepath.Join(dir, "memfd.img")
	im, err := readImage(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return imageErr(err)
	}
	changed := false
	for i, e := range im.entries {
		fs, err := decode(e)
		if err != nil {
			return imageErr(fmt.Errorf("memfd.img: %w", err))
		}
		for j := range fs {
			if (fs[j].num == memfdInodeUID || fs[j].num == memfdInodeGID) && fs[j].wire == 0 && fs[j].value == unmappedID {
				fs[j].value, changed = 0, true
			}
		}
		im.entries[i] = encode(fs)
	}
	if !changed {
		return nil
	}
	return imageErr(im.write(p))
}

func imageErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: checkpoint images: %w", errclass.Corrupt, err)
}

// dumpStats reads criu's statistics of a dump from its stats image: how
// long the tree was frozen and the pages written.
func dumpStats(dirs ...string) (frozen time.Duration, pages int64) {
	var st []field
	for _, d := range dirs {
		if st == nil {
			st = statsEntry(filepath.Join(d, "stats-dump"), statsDump)
		}
	}
	if f, ok := get(st, statsFrozen); ok {
		frozen = time.Duration(f.value) * time.Microsecond
	}
	if f, ok := get(st, statsWritten); ok {
		pages = int64(f.value)
	}
	return frozen, pages
}

// restoreStats reads how long criu's restore took from its stats image:
// forking the tree and restoring it.
func restoreStats(workDir string) time.Duration {
	st := statsEntry(filepath.Join(workDir, "stats-restore"), statsRestore)
	var d time.Duration
	for _, n := range []uint64{statsForkingT, statsRestoreT} {
		if f, ok := get(st, n); ok {
			d += time.Duration(f.value) * time.Microsecond
		}
	}
	return d
}

// statsEntry is the sub-message num of the stats image at path, or nil.
func statsEntry(path string, num uint64) []field {
	im, err := readImage(path)
	if err != nil || len(im.entries) == 0 {
		return nil
	}
	fs, err := decode(im.entries[0])
	if err != nil {
		return nil
	}
	sub, ok := get(fs, num)
	if !ok {
		return nil
	}
	out, _ := decode(sub.bytes)
	return out
}
