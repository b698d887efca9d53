package dirfd

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// At is a file named by a directory descriptor and one path component
// ("." for the directory itself). Dir may be unix.AT_FDCWD, Name then
// being any host path.
type At struct {
	Dir  int
	Name string
}

// Proc names the entry for the calls that have no *at form (the l*xattr
// calls, truncate): a short path whatever the depth, whose last component
// the l* calls do not follow.
func (a At) Proc() string {
	if a.Dir == unix.AT_FDCWD {
		return a.Name
	}
	return "/proc/self/fd/" + strconv.Itoa(a.Dir) + "/" + a.Name
}

// Lstat stats the entry, not following a final symlink.
func (a At) Lstat(st *unix.Stat_t) error {
	return unix.Fstatat(a.Dir, a.Name, st, unix.AT_SYMLINK_NOFOLLOW)
}

// Readlink reads the entry's symlink target, of any length.
func (a At) Readlink() (string, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(a.Dir, a.Name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// OpenDir opens the entry, a directory and not a symlink, with flags
// (unix.O_RDONLY to read it, unix.O_PATH to name what is below it).
func (a At) OpenDir(flags int) (int, error) {
	return unix.Openat(a.Dir, a.Name, flags|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// OpenRoot opens the trusted directory dir (a host path) as an O_PATH
// descriptor to open what is below it from.
func OpenRoot(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	return fd, nil
}

// beneathHow opens a directory below a root: no symlinks, no magic links,
// never above the starting directory, never onto another mount.
var beneathHow = unix.OpenHow{
	Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
}

// maxWalk is the longest path handed to one openat2: below PATH_MAX, so
// a deeper directory is reached in several steps.
const maxWalk = 3072

// OpenBeneath opens the directory rel (relative, slash-separated, "" for
// root itself) below root as a new O_PATH descriptor.
func OpenBeneath(root int, rel string) (int, error) {
	fd, own := root, false
	for rel != "" {
		step := rel
		if len(step) > maxWalk {
			i := strings.LastIndexByte(step[:maxWalk], '/')
			if i <= 0 {
				i = strings.IndexByte(step, '/') // a name is at most 255 bytes
			}
			step = step[:i]
		}
		rel = strings.TrimPrefix(rel[len(step):], "/")
		nfd, err := openat2(fd, step)
		if own {
			unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd, own = nfd, true
	}
	if !own {
		return unix.Dup(root)
	}
	return fd, nil
}

func openat2(dir int, p string) (int, error) {
	for {
		fd, err := unix.Openat2(dir, p, &beneathHow)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue // EAGAIN: a rename raced the RESOLVE_BENEATH walk
		}
		return fd, err
	}
}

// Split cuts a relative slash-separated path into its directory ("" at
// the top) and its last name.
func Split(rel string) (dir, name string) {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i], rel[i+1:]
	}
	return "", rel
}

// Beneath names rel (relative, slash-separated, not "") below root: its
// directory, opened beneath root, and its last name, which must not be
// "..". The caller closes the returned At's Dir.
func Beneath(root int, rel string) (At, error) {
	dir, name := Split(rel)
	if name == "" || name == "." || name == ".." {
		return At{}, fmt.Errorf("path %q below a root: %w", rel, unix.EINVAL)
	}
	fd, err := OpenBeneath(root, dir)
	if err != nil {
		return At{}, err
	}
	return At{fd, name}, nil
}

// LstatBeneath stats rel below the directory root without following any
// symlink on the way (root "": rel is a host path, stated as lstat does).
func LstatBeneath(root, rel string, st *unix.Stat_t) error {
	if root == "" {
		return unix.Lstat(rel, st)
	}
	rfd, err := OpenRoot(root)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	a, err := Beneath(rfd, rel)
	if err != nil {
		return err
	}
	defer unix.Close(a.Dir)
	return a.Lstat(st)
}
