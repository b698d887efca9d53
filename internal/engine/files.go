package engine

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/wire/errclass"
)

// Paths in requests are relative to a workspace's root and never trusted:
// cleanRel rejects what is malformed, and every open resolves below the root
// with openat2(RESOLVE_BENEATH), so neither ".." nor a symlink (absolute or
// relative) can lead outside, whatever the workspace holds.

// cleanRel validates a request path and returns it cleaned; "" and "." mean
// the root itself.
func cleanRel(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: path contains NUL", errclass.Invalid)
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: path %q is absolute; paths are relative to the workspace", errclass.Invalid, p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", fmt.Errorf("%w: path %q has a \"..\" component", errclass.Invalid, p)
		}
	}
	c := path.Clean(p)
	if c == "." {
		return "", nil
	}
	return c, nil
}

// beneath opens rel below the directory root (an fd) without following any
// symlink out of it.
func beneath(root int, rel string, flags int, mode uint32) (*os.File, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(root, rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err == unix.EXDEV {
			return nil, fmt.Errorf("%w: %q leads outside the workspace (through a symlink or ..)", errclass.Invalid, rel)
		}
		if err != nil {
			return nil, pathError(rel, err)
		}
		return os.NewFile(uintptr(fd), rel), nil
	}
}

// pathError turns an errno from a request path into a sentinel-wrapping error.
func pathError(rel string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%q: %w", rel, errclass.NotFound)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ELOOP),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EEXIST), errors.Is(err, syscall.ENOTEMPTY):
		return fmt.Errorf("%w: %q: %w", errclass.Invalid, rel, err)
	}
	return fmt.Errorf("%q: %w", rel, err)
}

// rootDir opens a workspace root for beneath lookups.
func rootDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open workspace root: %w", err)
	}
	return fd, nil
}

// mkdirAll creates rel and its missing parents below root, one component at
// a time, each resolved beneath root.
func mkdirAll(root int, rel string, mode uint32) error {
	if rel == "" {
		return nil
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		dir, base := path.Split(p)
		d, err := beneath(root, strings.TrimSuffix(dir, "/"), unix.O_DIRECTORY|unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(int(d.Fd()), base, mode)
		d.Close()
		if err != nil && err != unix.EEXIST {
			return pathError(p, err)
		}
		if err == unix.EEXIST {
			// It must be a directory (or a symlink to one that stays beneath).
			f, err := beneath(root, p, unix.O_DIRECTORY|unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			f.Close()
		}
	}
	return nil
}

// writeFile creates or replaces the regular file rel below root with r's
// bytes, creating parent directories. The bytes go to a temporary file in
// the same directory that is renamed over rel only once they are all
// written, so a failed or interrupted upload leaves rel as it was.
func writeFile(root int, rel string, mode fs.FileMode, r io.Reader) error {
	if rel == "" {
		return fmt.Errorf("%w: a file path is required", errclass.Invalid)
	}
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if err := mkdirAll(root, dir, 0o755); err != nil {
		return err
	}
	d, err := beneath(root, dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: %q exists and is not a regular file", errclass.Invalid, rel)
	}
	tmp := fmt.Sprintf(".%s.upload-%d", base, time.Now().UnixNano())
	if len(tmp) > 255 {
		tmp = fmt.Sprintf(".upload-%d", time.Now().UnixNano())
	}
	fd, err := unix.Openat(int(d.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return pathError(rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The umask applied at create; the requested mode is what counts.
		err = unix.Fchmodat(int(d.Fd()), tmp, uint32(mode.Perm()), 0)
	}
	if err == nil {
		err = unix.Renameat(int(d.Fd()), tmp, int(d.Fd()), base)
	}
	if err != nil {
		unix.Unlinkat(int(d.Fd()), tmp, 0)
		return fmt.Errorf("write %q: %w", rel, err)
	}
	return nil
}

// openRegular opens the regular file rel below root for reading.
func openRegular(root int, rel string) (*os.File, int64, error) {
	f, err := beneath(root, rel, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%w: %q is a %s, not a regular file", errclass.Invalid, rel, fileKind(st.Mode()))
	}
	return f, st.Size(), nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "file"
	}
	return "special file"
}

// tarName validates one tar entry name and returns it relative to the
// extraction directory.
func tarName(name string) (string, error) {
	n := strings.TrimSuffix(name, "/")
	n = strings.TrimPrefix(n, "./")
	if n == "" || n == "." {
		return "", nil
	}
	c, err := cleanRel(n)
	if err != nil {
		return "", fmt.Errorf("tar entry %q: %w", name, err)
	}
	return c, nil
}

// checkTar reads a whole tar stream and rejects it, before anything is
// written, when an entry would escape: absolute or ".." names, links whose
// target leaves the tree, entries placed under a symlink the same archive
// creates, or kinds LayerFS does not accept from requests (devices, fifos).
func checkTar(r io.Reader) error {
	tr := tar.NewReader(r)
	links := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: malformed tar: %w", errclass.Invalid, err)
		}
		name, err := tarName(h.Name)
		if err != nil {
			return err
		}
		for p := name; p != "."; p = path.Dir(p) {
			if p != name && links[p] {
				return fmt.Errorf("%w: tar entry %q is below the symlink %q", errclass.Invalid, h.Name, p)
			}
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir:
		case tar.TypeSymlink:
			t := h.Linkname
			if strings.HasPrefix(t, "/") {
				return fmt.Errorf("%w: tar symlink %q points to the absolute path %q", errclass.Invalid, h.Name, t)
			}
			if j := path.Join(path.Dir(name), t); j == ".." || strings.HasPrefix(j, "../") {
				return fmt.Errorf("%w: tar symlink %q points outside (%q)", errclass.Invalid, h.Name, t)
			}
			links[name] = true
		case tar.TypeLink:
			if _, err := tarName(h.Linkname); err != nil || h.Linkname == "" {
				return fmt.Errorf("%w: tar hard link %q to %q", errclass.Invalid, h.Name, h.Linkname)
			}
		default:
			return fmt.Errorf("%w: tar entry %q has type %q; only files, directories and links are accepted", errclass.Invalid, h.Name, h.Typeflag)
		}
	}
}

// extractTar writes a checked tar stream into dir below root. Every entry is
// resolved beneath root again, so a symlink already in the workspace cannot
// redirect a write either.
func extractTar(root int, dir string, r io.Reader) error {
	tr := tar.NewReader(r)
	type dirTime struct {
		rel   string
		mtime time.Time
	}
	var dirs []dirTime
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: malformed tar: %w", errclass.Invalid, err)
		}
		name, err := tarName(h.Name)
		if err != nil {
			return err
		}
		rel := path.Join(dir, name)
		if rel == "." {
			rel = ""
		}
		mode := uint32(h.Mode) & 0o7777
		switch h.Typeflag {
		case tar.TypeDir:
			if err := mkdirAll(root, rel, mode); err != nil {
				return err
			}
			dirs = append(dirs, dirTime{rel, h.ModTime})
			continue
		case tar.TypeReg:
			if err := writeFile(root, rel, fs.FileMode(mode), tr); err != nil {
				return err
			}
		case tar.TypeSymlink, tar.TypeLink:
			pd, base := path.Split(rel)
			pd = strings.TrimSuffix(pd, "/")
			if err := mkdirAll(root, pd, 0o755); err != nil {
				return err
			}
			d, err := beneath(root, pd, unix.O_DIRECTORY|unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			_ = unix.Unlinkat(int(d.Fd()), base, 0)
			if h.Typeflag == tar.TypeSymlink {
				err = unix.Symlinkat(h.Linkname, int(d.Fd()), base)
			} else {
				var src *os.File
				ln, _ := tarName(h.Linkname)
				src, err = beneath(root, path.Join(dir, ln), unix.O_PATH|unix.O_NOFOLLOW, 0)
				if err == nil {
					err = unix.Linkat(int(src.Fd()), "", int(d.Fd()), base, unix.AT_EMPTY_PATH)
					src.Close()
				}
			}
			d.Close()
			if err != nil {
				return pathError(rel, err)
			}
			continue
		}
		if err := setTimes(root, rel, h.ModTime); err != nil {
			return err
		}
	}
	// Directory times last, deepest first, since creating entries changes them.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := setTimes(root, dirs[i].rel, dirs[i].mtime); err != nil {
			return err
		}
	}
	return nil
}

func setTimes(root int, rel string, mtime time.Time) error {
	if mtime.IsZero() {
		return nil
	}
	f, err := beneath(root, rel, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(int(f.Fd()), "", ts, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}

// writeTar writes rel below root (a file, a symlink or a whole tree) to w as
// a tar stream, never following symlinks. Owners are the ids on disk: the
// ids root shows less offset (withRoot).
func writeTar(root int, rel string, offset uint32, w io.Writer) error {
	tw := tar.NewWriter(w)
	f, err := beneath(root, rel, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	name := path.Base(rel)
	if rel == "" {
		name = "."
	}
	err = addTar(tw, f, name, offset)
	f.Close()
	if err != nil {
		return err
	}
	return tw.Close()
}

// diskID is the id on disk of a file that a mount shows as id, its ids
// offset by offset. Ids below it are the overflow id (65534) that a mount
// shows for an id on disk that its mapping lacks.
func diskID(id, offset uint32) int {
	if id >= offset {
		return int(id - offset)
	}
	return int(id)
}

// addTar adds the object f (an O_PATH fd) as name, recursing into directories.
func addTar(tw *tar.Writer, f *os.File, name string, offset uint32) error {
	var st unix.Stat_t
	if err := unix.Fstatat(int(f.Fd()), "", &st, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	h := &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     diskID(st.Uid, offset),
		Gid:     diskID(st.Gid, offset),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Format:  tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		h.Typeflag = tar.TypeReg
		h.Size = st.Size
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		r, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		_, err = io.CopyN(tw, r, st.Size)
		r.Close()
		return err
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(int(f.Fd()), "", buf)
		if err != nil {
			return err
		}
		h.Typeflag = tar.TypeSymlink
		h.Linkname = string(buf[:n])
		return tw.WriteHeader(h)
	case unix.S_IFDIR:
		h.Typeflag = tar.TypeDir
		if name != "." {
			h.Name = name + "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		d, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer d.Close()
		names, err := d.Readdirnames(-1)
		if err != nil {
			return err
		}
		slices.Sort(names)
		for _, n := range names {
			cfd, err := unix.Openat(int(d.Fd()), n, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			c := os.NewFile(uintptr(cfd), n)
			err = addTar(tw, c, path.Join(name, n), offset)
			c.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	// Devices, fifos and sockets are not transferred.
	return nil
}
