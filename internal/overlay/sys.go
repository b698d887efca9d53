package overlay

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
)

var errInvalidName error = syscall.EINVAL

// Attr is a merged node's attributes, as stat(2) reports them.
type Attr struct {
	Ino    uint64
	Mode   uint32 // file type bits (syscall.S_IF*) and permission bits
	Nlink  uint32
	UID    uint32
	GID    uint32
	Size   int64
	Blocks int64
	Rdev   uint64
	Atime  int64 // nanoseconds since the epoch
	Mtime  int64
	Ctime  int64
}

func attrFromStat(st *unix.Stat_t) Attr {
	return Attr{
		Mode:   st.Mode,
		Nlink:  uint32(st.Nlink),
		UID:    st.Uid,
		GID:    st.Gid,
		Size:   st.Size,
		Blocks: st.Blocks,
		Rdev:   st.Rdev,
		Atime:  st.Atim.Nano(),
		Mtime:  st.Mtim.Nano(),
		Ctime:  st.Ctim.Nano(),
	}
}

func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&syscall.S_IFMT == syscall.S_IFCHR && st.Rdev == 0
}

// mkWhiteout makes a kernel-overlayfs whiteout (a 0:0 character device).
func mkWhiteout(e at) error {
	return unix.Mknodat(e.dir, e.name, syscall.S_IFCHR, 0)
}

func lgetxattr(path, name string) ([]byte, error) {
	return readSized(256, 64, func(buf []byte) (int, error) { return unix.Lgetxattr(path, name, buf) })
}

// listxattrAt returns the xattr names of the entry a (not following
// symlinks).
func listxattrAt(a dirfd.At) ([]string, error) {
	b, err := readSized(1024, 256, a.Listxattr)
	if err != nil {
		return nil, err
	}
	return splitNames(b), nil
}

// readSized reads a value of unknown size with read, which fails with
// ERANGE when buf is too small and returns the size needed when buf is nil
// (as the xattr calls do): first into size bytes, then, while the value
// does not fit (it may grow between calls), into what read(nil) asks for
// plus slack.
func readSized(size, slack int, read func(buf []byte) (int, error)) ([]byte, error) {
	buf := make([]byte, size)
	for {
		n, err := read(buf)
		if err == unix.ERANGE {
			sz, err := read(nil)
			if err != nil {
				return nil, err
			}
			buf = make([]byte, sz+slack)
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

func splitNames(b []byte) []string {
	var names []string
	for _, s := range strings.Split(string(b), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	return names
}

// notSupported reports xattr errors that mean "this file system or file kind
// has no such xattrs", which copy-up treats as nothing to copy.
func notSupported(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ENODATA) || errors.Is(err, unix.EPERM)
}

// readUmask returns the process umask from /proc, without changing it.
func readUmask() uint32 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o022
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(m)
			}
		}
	}
	return 0o022
}

// cloneOrCopy copies n bytes from src to dst (both at offset 0 onwards),
// cloning extents where the file system can (FICLONE), else with
// copy_file_range (in-kernel, no user-space buffer), keeping holes.
func cloneOrCopy(dst, src *os.File, n int64) (cloned bool, err error) {
	if n == 0 {
		return false, nil
	}
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err == nil {
		return true, nil
	}
	return false, copyRange(dst, src, 0, n)
}

// copyRange copies [off, off+n) from src to dst with copy_file_range,
// skipping holes of src so sparse files stay sparse.
func copyRange(dst, src *os.File, off, n int64) error {
	end := off + n
	sfd, dfd := int(src.Fd()), int(dst.Fd())
	for off < end {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if err == unix.ENXIO || (err == nil && data >= end) {
			return nil // the rest is a hole
		}
		if err != nil {
			data = off // no SEEK_DATA: copy everything
		}
		hole, err := unix.Seek(sfd, data, unix.SEEK_HOLE)
		if err != nil || hole > end {
			hole = end
		}
		for data < hole {
			in, out := data, data
			w, err := unix.CopyFileRange(sfd, &in, dfd, &out, int(hole-data), 0)
			if err == unix.EXDEV || err == unix.ENOSYS || err == unix.EOPNOTSUPP || err == unix.EINVAL {
				return copyPlain(dst, src, data, hole-data)
			}
			if err != nil {
				return fmt.Errorf("copy_file_range: %w", err)
			}
			if w == 0 {
				return fmt.Errorf("copy_file_range: %w", io.ErrUnexpectedEOF)
			}
			data += int64(w)
		}
		off = hole
	}
	return nil
}

func copyPlain(dst, src *os.File, off, n int64) error {
	_, err := io.Copy(io.NewOffsetWriter(dst, off), io.NewSectionReader(src, off, n))
	return err
}
