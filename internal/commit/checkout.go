package commit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	fdpath "layerfs.dev/layerfs/internal/dirfd"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/writeruns"
	"layerfs.dev/layerfs/wire/errclass"
)

// ErrNotEmpty is returned by Checkout for a non-empty target directory
// unless CheckoutOptions.Overwrite is set.
var ErrNotEmpty = errclass.New(errclass.Invalid, "target directory is not empty")

// CheckoutOptions tune Checkout.
type CheckoutOptions struct {
	// Overwrite lets Checkout write into a non-empty directory: entries in
	// the way are replaced, directories merged, other entries left alone.
	Overwrite bool
	Progress  *Progress
}

// CheckoutStats tell what Checkout wrote.
type CheckoutStats struct {
	Entries int64 `json:"entries"`
	Files   int64 `json:"files"`
	Bytes   int64 `json:"bytes"` // logical file bytes (holes included)
	Links   int64 `json:"links"` // hard links made to an earlier path
}

// Checkout materializes the tree root into dir, creating dir if needed:
// contents (sparse where the manifest has holes), modes, owners (when run
// as root), xattrs, symlinks, hard links, devices, fifos, sockets and
// mtimes (directories after their children). All writes go through file
// descriptors of directories it created or opened without following
// symlinks, so nothing in the tree can make it write outside dir.
func Checkout(ctx context.Context, r Reader, root store.ID, dir string, opts *CheckoutOptions) (CheckoutStats, error) {
	if opts == nil {
		opts = &CheckoutOptions{}
	}
	var st CheckoutStats
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return st, fmt.Errorf("checkout: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return st, fmt.Errorf("checkout: open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if !opts.Overwrite {
		empty, err := emptyDir(fd)
		if err != nil {
			return st, fmt.Errorf("checkout: read %s: %w", dir, err)
		}
		if !empty {
			return st, fmt.Errorf("checkout into %s: %w", dir, ErrNotEmpty)
		}
	}
	c := &checkout{r: r, opts: opts, rootfd: fd, root: dir, links: map[uint64]string{}, stats: &st, asRoot: os.Geteuid() == 0}
	if err := c.tree(ctx, fd, root, ""); err != nil {
		return st, err
	}
	return st, nil
}

func emptyDir(fd int) (bool, error) {
	// Read through a duplicate so that closing the *os.File leaves fd open.
	nfd, err := unix.Dup(fd)
	if err != nil {
		return false, err
	}
	f := os.NewFile(uintptr(nfd), "dir")
	defer f.Close()
	names, err := f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

// futimens sets fd's access and modification times to ns.
func futimens(fd int, ns int64) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(ns), unix.NsecToTimespec(ns)}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

type checkout struct {
	r      Reader
	opts   *CheckoutOptions
	rootfd int
	root   string
	links  map[uint64]string // Link -> first path written
	stats  *CheckoutStats
	asRoot bool
	// idOffset is added to the owners written: a directory seen through
	// an id-mapped mount shows on-disk id N as N+offset (see Apply).
	idOffset uint32
}

func (c *checkout) tree(ctx context.Context, dirfd int, id store.ID, rel string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if id.IsZero() {
		return nil
	}
	t, err := c.r.Tree(ctx, id)
	if err != nil {
		return fmt.Errorf("checkout %s: %w", c.show(rel), err)
	}
	for i := range t.Entries {
		if err := c.entry(ctx, dirfd, &t.Entries[i], join(rel, t.Entries[i].Name)); err != nil {
			return err
		}
	}
	return nil
}

func (c *checkout) show(rel string) string {
	if rel == "" {
		return c.root
	}
	return c.root + "/" + rel
}

func (c *checkout) entry(ctx context.Context, dirfd int, e *store.Entry, rel string) error {
	c.stats.Entries++
	if c.opts.Progress != nil {
		c.opts.Progress.Entries.Add(1)
	}
	if c.opts.Overwrite {
		if err := c.clear(dirfd, e); err != nil {
			return fmt.Errorf("checkout %s: %w", c.show(rel), err)
		}
	}
	var err error
	switch e.Type {
	case store.TypeDir:
		err = c.dir(ctx, dirfd, e, rel)
	case store.TypeFile:
		err = c.file(ctx, dirfd, e, rel)
	case store.TypeSymlink:
		err = c.symlink(dirfd, e)
	case store.TypeFIFO, store.TypeChar, store.TypeBlock, store.TypeSocket:
		err = c.node(dirfd, e)
	default:
		err = fmt.Errorf("unknown entry type %s", e.Type)
	}
	if err != nil {
		return fmt.Errorf("checkout %s: %w", c.show(rel), err)
	}
	return nil
}

// clear removes what is in the way of e, keeping a directory that e
// merges into.
func (c *checkout) clear(dirfd int, e *store.Entry) error {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, e.Name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if e.Type == store.TypeDir {
			return nil
		}
		return removeAllAt(dirfd, e.Name)
	}
	return unix.Unlinkat(dirfd, e.Name, 0)
}

// removeAllAt removes name under dirfd and everything below it without
// following symlinks.
func removeAllAt(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	nfd, err := unix.Dup(fd)
	if err != nil {
		unix.Close(fd)
		return err
	}
	f := os.NewFile(uintptr(nfd), name)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		unix.Close(fd)
		return err
	}
	for _, n := range names {
		err := unix.Unlinkat(fd, n, 0)
		if errors.Is(err, unix.EISDIR) {
			err = removeAllAt(fd, n)
		}
		if err != nil {
			unix.Close(fd)
			return err
		}
	}
	unix.Close(fd)
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

func (c *checkout) dir(ctx context.Context, dirfd int, e *store.Entry, rel string) error {
	if err := unix.Mkdirat(dirfd, e.Name, 0o700); err != nil && !(c.opts.Overwrite && errors.Is(err, unix.EEXIST)) {
		return err
	}
	fd, err := unix.Openat(dirfd, e.Name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := c.tree(ctx, fd, e.Object, rel); err != nil {
		return err
	}
	// A directory's metadata goes on after its children: their creation
	// would change its mtime, and its mode may forbid writing into it.
	return c.meta(fd, e)
}

// meta sets owner, mode, xattrs and mtime through an open descriptor.
func (c *checkout) meta(fd int, e *store.Entry) error {
	if c.asRoot {
		if err := unix.Fchown(fd, int(e.UID+c.idOffset), int(e.GID+c.idOffset)); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	// After chown, which clears setuid and setgid bits.
	if err := unix.Fchmod(fd, e.Mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	for _, x := range e.Xattrs {
		if err := unix.Fsetxattr(fd, x.Name, x.Value, 0); err != nil {
			return fmt.Errorf("set xattr %s: %w", x.Name, err)
		}
	}
	if err := futimens(fd, e.MtimeNs); err != nil {
		return fmt.Errorf("set mtime: %w", err)
	}
	return nil
}

func (c *checkout) file(ctx context.Context, dirfd int, e *store.Entry, rel string) error {
	if e.Link != 0 {
		if first, ok := c.links[e.Link]; ok {
			c.stats.Links++
			return c.link(dirfd, e.Name, first)
		}
		c.links[e.Link] = rel
	}
	fd, err := unix.Openat(dirfd, e.Name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	werr := c.content(ctx, fd, e)
	if werr == nil {
		werr = c.meta(fd, e)
	}
	if err := unix.Close(fd); werr == nil && err != nil {
		werr = fmt.Errorf("close: %w", err)
	}
	if werr == nil {
		c.stats.Files++
		c.stats.Bytes += e.Size
		if c.opts.Progress != nil {
			c.opts.Progress.Bytes.Add(e.Size)
		}
	}
	return werr
}

// link makes name under dirfd a hard link to the earlier path first,
// resolved strictly beneath the target with no symlinks, at any depth.
func (c *checkout) link(dirfd int, name, first string) error {
	src, err := fdpath.Beneath(c.rootfd, first)
	if err != nil {
		return fmt.Errorf("open link target %s: %w", first, err)
	}
	defer unix.Close(src.Dir)
	// Flags 0: the entry itself is linked, never what a symlink names.
	if err := unix.Linkat(src.Dir, src.Name, dirfd, name, 0); err != nil {
		return fmt.Errorf("link to %s: %w", first, err)
	}
	return nil
}

// content writes a file's bytes; holes are left unwritten and the size set
// by truncation, so sparse files stay sparse.
func (c *checkout) content(ctx context.Context, fd int, e *store.Entry) error {
	switch e.ObjectKind {
	case 0:
		return nil
	case store.KindChunk:
		b, err := c.r.Chunk(ctx, e.Object)
		if err != nil {
			return err
		}
		if int64(len(b)) != e.Size {
			return fmt.Errorf("chunk %s has %d bytes, entry says %d: %w", e.Object.Short(), len(b), e.Size, store.ErrCorrupt)
		}
		return pwriteFull(fd, b, 0)
	case store.KindManifest:
		m, err := c.r.Manifest(ctx, e.Object)
		if err != nil {
			return err
		}
		if m.Size != e.Size {
			return fmt.Errorf("manifest %s has size %d, entry says %d: %w", e.Object.Short(), m.Size, e.Size, store.ErrCorrupt)
		}
		// In runs, not chunk by chunk: see package writeruns.
		w := writeruns.New(writeruns.Size, func(b []byte, off int64) error { return pwriteSparse(fd, b, off) })
		for _, x := range m.Extents {
			if x.Chunk.IsZero() {
				if err := w.Skip(x.Length); err != nil {
					return err
				}
				continue
			}
			b, err := c.r.Chunk(ctx, x.Chunk)
			if err != nil {
				return err
			}
			if int64(len(b)) != x.Length {
				return fmt.Errorf("chunk %s has %d bytes, manifest says %d: %w", x.Chunk.Short(), len(b), x.Length, store.ErrCorrupt)
			}
			if err := w.Write(b); err != nil {
				return err
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		return unix.Ftruncate(fd, m.Size)
	}
	return fmt.Errorf("file names a %s: %w", e.ObjectKind, store.ErrCorrupt)
}

// sparsePage is the unit pwriteSparse leaves unwritten when it is zeros.
const sparsePage = 4096

// pwriteSparse writes b at off into a new file that the caller extends to
// its size, leaving out the file-aligned pages of b that are all zeros:
// they read back as zeros from the hole, and take no space. (Capture stores
// runs of zeros as holes, so chunks next to them may hold a few zero pages.)
func pwriteSparse(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		// The run up to the next page boundary of the file.
		n := min(len(b), int(sparsePage-off%sparsePage))
		if allZero(b[:n]) {
			b, off = b[n:], off+int64(n)
			continue
		}
		// Extend over the following pages that are not all zeros.
		for n < len(b) {
			k := min(len(b)-n, sparsePage)
			if allZero(b[n : n+k]) {
				break
			}
			n += k
		}
		if err := pwriteFull(fd, b[:n], off); err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

func (c *checkout) symlink(dirfd int, e *store.Entry) error {
	if err := unix.Symlinkat(e.Target, dirfd, e.Name); err != nil {
		return err
	}
	return c.metaAt(dirfd, e, false)
}

func (c *checkout) node(dirfd int, e *store.Entry) error {
	mode := e.Mode | e.Type.FileType()
	if err := unix.Mknodat(dirfd, e.Name, mode, int(e.Rdev)); err != nil {
		return fmt.Errorf("mknod: %w", err)
	}
	return c.metaAt(dirfd, e, true)
}

// metaAt sets metadata on a name that cannot be opened for writing (a
// symlink, a device, a fifo), never following a final symlink.
func (c *checkout) metaAt(dirfd int, e *store.Entry, chmod bool) error {
	if c.asRoot {
		if err := unix.Fchownat(dirfd, e.Name, int(e.UID+c.idOffset), int(e.GID+c.idOffset), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if chmod {
		// Through an O_PATH descriptor: fchmodat would follow a symlink
		// swapped in by someone else.
		pfd, err := unix.Openat(dirfd, e.Name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(pfd), e.Mode, 0)
		unix.Close(pfd)
		if err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	if len(e.Xattrs) > 0 {
		p := "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + e.Name
		for _, x := range e.Xattrs {
			if err := unix.Lsetxattr(p, x.Name, x.Value, 0); err != nil {
				return fmt.Errorf("set xattr %s: %w", x.Name, err)
			}
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(e.MtimeNs), unix.NsecToTimespec(e.MtimeNs)}
	if err := unix.UtimesNanoAt(dirfd, e.Name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set mtime: %w", err)
	}
	return nil
}
