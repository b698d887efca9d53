package fsverity

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The parameters every file is sealed with.
const (
	// BlockSize is the Merkle tree's block size (and the data's).
	BlockSize = 4096
	// HashAlgorithm is FS_VERITY_HASH_ALG_SHA256.
	HashAlgorithm = unix.FS_VERITY_HASH_ALG_SHA256
	// DigestSize is a SHA-256 digest's bytes.
	DigestSize = sha256.Size
)

// ErrUnsupported is a file system or kernel without fs-verity.
var ErrUnsupported = errors.New("fs-verity is not supported here")

// Enable seals the file open as fd (read-only, with no writer left: the
// kernel refuses ETXTBSY otherwise) with fs-verity. The kernel reads the
// whole file to build its Merkle tree. A file system or kernel without
// fs-verity fails with an error wrapping ErrUnsupported.
func Enable(fd int) error {
	arg := unix.FsverityEnableArg{Version: 1, Hash_algorithm: HashAlgorithm, Block_size: BlockSize}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_ENABLE_VERITY, uintptr(unsafe.Pointer(&arg)))
	switch errno {
	case 0, unix.EEXIST: // sealed already
		return nil
	case unix.ENOTTY, unix.EOPNOTSUPP:
		return fmt.Errorf("%w: FS_IOC_ENABLE_VERITY: %w", ErrUnsupported, errno)
	}
	return fmt.Errorf("FS_IOC_ENABLE_VERITY: %w", errno)
}

// measureArg is struct fsverity_digest with room for a SHA-512 digest,
// the largest the kernel has.
type measureArg struct {
	unix.FsverityDigest
	Digest [64]byte
}

// Measure returns the fs-verity digest of the sealed file open as fd. A
// file not sealed fails with ENODATA; a kernel without fs-verity with an
// error wrapping ErrUnsupported.
func Measure(fd int) ([DigestSize]byte, error) {
	var out [DigestSize]byte
	arg := measureArg{FsverityDigest: unix.FsverityDigest{Size: uint16(len(measureArg{}.Digest))}}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.FS_IOC_MEASURE_VERITY, uintptr(unsafe.Pointer(&arg)))
	switch errno {
	case 0:
	case unix.ENOTTY, unix.EOPNOTSUPP:
		return out, fmt.Errorf("%w: FS_IOC_MEASURE_VERITY: %w", ErrUnsupported, errno)
	default:
		return out, fmt.Errorf("FS_IOC_MEASURE_VERITY: %w", errno)
	}
	if arg.Algorithm != HashAlgorithm || arg.Size != DigestSize {
		return out, fmt.Errorf("FS_IOC_MEASURE_VERITY: algorithm %d, %d bytes: not sealed by this package", arg.Algorithm, arg.Size)
	}
	copy(out[:], arg.Digest[:DigestSize])
	return out, nil
}

// Supported reports why files in dir cannot be sealed, or nil: it seals
// a small file there (then removes it). The error says whether the
// kernel or the file system lacks fs-verity, and wraps ErrUnsupported.
func Supported(dir string) error {
	f, err := os.CreateTemp(dir, ".verity-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString("verity probe")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	r, err := os.Open(f.Name())
	if err != nil {
		return err
	}
	defer r.Close()
	if err := Enable(int(r.Fd())); err != nil {
		if errors.Is(err, ErrUnsupported) {
			if kernelLacksVerity() {
				return fmt.Errorf("%w: the kernel is built without it (CONFIG_FS_VERITY is not set)", ErrUnsupported)
			}
			return fmt.Errorf("%w: the file system of %s does not have it (ext4: tune2fs -O verity on the unmounted device; XFS and btrfs: recent kernels)", ErrUnsupported, dir)
		}
		return fmt.Errorf("seal a file in %s: %w", dir, err)
	}
	return nil
}

// kernelLacksVerity reports whether the kernel's configuration, where it
// shows it (/proc/config.gz), says it has no fs-verity.
func kernelLacksVerity() bool {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return false
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		if sc.Text() == "# CONFIG_FS_VERITY is not set" {
			return true
		}
	}
	return false
}

// Digest is the fs-verity digest of the size bytes r yields, as the kernel
// measures the file once sealed (SHA-256, BlockSize blocks, no salt): the
// SHA-256 of the fs-verity descriptor, which holds the size and the root
// hash of the Merkle tree over the data's blocks (the last zero-padded;
// an empty file's root hash is zeros, a one-block file's its block's
// hash).
func Digest(r io.Reader, size int64) ([DigestSize]byte, error) {
	var root [DigestSize]byte
	if size > 0 {
		level, err := dataHashes(r, size)
		if err != nil {
			return root, err
		}
		// Each level hashes the blocks of the one below, until one
		// hash is left: the root (a file of one block: its hash).
		for len(level) > DigestSize {
			blocks := hashBlocks(level)
			level = level[:0]
			for _, b := range blocks {
				h := sha256.Sum256(b)
				level = append(level, h[:]...)
			}
		}
		copy(root[:], level)
	}
	return sha256.Sum256(descriptor(size, root)), nil
}

// dataHashes hashes r's blocks, the last zero-padded.
func dataHashes(r io.Reader, size int64) ([]byte, error) {
	n := (size + BlockSize - 1) / BlockSize
	out := make([]byte, 0, n*DigestSize)
	buf := make([]byte, BlockSize)
	for left := size; left > 0; left -= BlockSize {
		m := min(left, BlockSize)
		if _, err := io.ReadFull(r, buf[:m]); err != nil {
			return nil, fmt.Errorf("fs-verity digest: %w", err)
		}
		clear(buf[m:])
		h := sha256.Sum256(buf)
		out = append(out, h[:]...)
	}
	return out, nil
}

// hashBlocks packs a level's hashes into blocks, the last zero-padded.
func hashBlocks(level []byte) [][]byte {
	var out [][]byte
	for i := 0; i < len(level); i += BlockSize {
		b := make([]byte, BlockSize)
		copy(b, level[i:min(i+BlockSize, len(level))])
		out = append(out, b)
	}
	return out
}

// descriptor is struct fsverity_descriptor (fs/verity/fsverity_private.h)
// for a file of size bytes with the Merkle tree root hash root.
func descriptor(size int64, root [DigestSize]byte) []byte {
	d := make([]byte, 256)
	d[0] = 1 // version
	d[1] = HashAlgorithm
	d[2] = 12 // log2(BlockSize)
	d[3] = 0  // salt size
	// d[4:8] reserved
	binary.LittleEndian.PutUint64(d[8:16], uint64(size))
	copy(d[16:16+64], root[:]) // root hash, 64 bytes of room
	// salt (32 bytes) and 144 reserved bytes stay zero.
	return d
}

// Metacopy is the value of overlayfs's "trusted.overlay.metacopy" xattr
// that records digest as the data file's expected fs-verity digest
// (struct ovl_metacopy, fs/overlayfs/overlayfs.h: version 0, its length
// with the digest, no flags, the digest's algorithm, the digest). An
// empty value is a metacopy with no digest.
func Metacopy(digest [DigestSize]byte) []byte {
	v := make([]byte, 0, 4+DigestSize)
	v = append(v, 0, 4+DigestSize, 0, HashAlgorithm)
	return append(v, digest[:]...)
}
