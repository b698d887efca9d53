package fusefs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/overlay/overlaytest"
)

// The differential POSIX suite: a table of scenarios, each a list of calls
// made in lockstep on a plain directory and in a workspace (on both data
// paths), over a lower tree that holds every scenario's fixture. After each
// call the two sides must agree on the errno, and on the mode, link count,
// size (not of directories) and ownership of the paths the call names; the
// times POSIX requires a call to change must change on both. A difference
// fails the test with the scenario's and the call's names.

// nobody is the unprivileged user calls run as for EACCES and EPERM.
const nobody = 65534

var (
	name255 = strings.Repeat("n", 255)
	name256 = strings.Repeat("n", 256)
)

// side is one target: the scenario's directory, open.
type side struct {
	name string // "plain" or "workspace"
	dir  string
	fd   int
	held map[string]int // descriptors a scenario keeps between calls
	// mtime, when set, reads a path's mtime from the daemon itself (the
	// kernel may still hold a cached one).
	mtime func(p string) (int64, error)
}

// proc names p below s's directory through /proc, for the calls that have no
// *at form: the path stays short however deep the directory is.
func (s *side) proc(p string) string { return fmt.Sprintf("/proc/self/fd/%d/%s", s.fd, p) }

func (s *side) close() {
	for _, fd := range s.held {
		unix.Close(fd)
	}
	unix.Close(s.fd)
}

// pcall is one call of a scenario.
type pcall struct {
	desc string
	uid  uint32 // run with this file system uid and gid (0: as root)
	do   func(s *side) error
	// stat: paths (relative to the scenario's directory, "." for it)
	// whose errno, mode, link count, size and owner are compared.
	stat []string
	// mtime: paths whose mtime and ctime the call must change; ctime:
	// paths whose ctime it must change; keep: paths whose mtime it must
	// not change.
	mtime, ctime, keep []string
}

// pcase is a scenario: a fixture in the lower tree, then calls.
type pcase struct {
	name  string
	lower string // shell run in the scenario's directory of the lower, after the common fixture
	calls []pcall
}

// fixture is in every scenario's directory of the lower tree: a lower
// directory d (with a subdirectory and a file), an empty one, files,
// symlinks (to a file, to nowhere, to themselves), a private directory, a
// sticky world-writable one and a world-writable one, all owned by root.
const fixture = `
mkdir -p d/s e ne/x
echo data > f
echo data > d/f
ln -s f l
ln -s loop loop
ln -s nowhere dangling
mkdir priv && echo x > priv/f && chmod 700 priv
mkdir sticky && chmod 1777 sticky && echo x > sticky/f
mkdir open && chmod 777 open && echo x > open/f
`

// call builders

func c(desc string, do func(s *side) error, stat ...string) pcall {
	return pcall{desc: desc, do: do, stat: stat}
}

func (p pcall) as(uid uint32) pcall          { p.uid = uid; return p }
func (p pcall) mtimes(paths ...string) pcall { p.mtime = paths; return p }
func (p pcall) ctimes(paths ...string) pcall { p.ctime = paths; return p }
func (p pcall) keeps(paths ...string) pcall  { p.keep = paths; return p }

func creat(p string) func(s *side) error {
	return func(s *side) error {
		fd, err := unix.Openat(s.fd, p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
}

func openFlags(p string, flags int) func(s *side) error {
	return func(s *side) error {
		fd, err := unix.Openat(s.fd, p, flags|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
}

func mkdir(p string) func(s *side) error {
	return func(s *side) error { return unix.Mkdirat(s.fd, p, 0o755) }
}

func rmdir(p string) func(s *side) error {
	return func(s *side) error { return unix.Unlinkat(s.fd, p, unix.AT_REMOVEDIR) }
}

func unlink(p string) func(s *side) error {
	return func(s *side) error { return unix.Unlinkat(s.fd, p, 0) }
}

func rename(a, b string, flags uint) func(s *side) error {
	return func(s *side) error { return unix.Renameat2(s.fd, a, s.fd, b, flags) }
}

func link(a, b string) func(s *side) error {
	return func(s *side) error { return unix.Linkat(s.fd, a, s.fd, b, 0) }
}

func symlink(target, p string) func(s *side) error {
	return func(s *side) error { return unix.Symlinkat(target, s.fd, p) }
}

func mkfifo(p string) func(s *side) error {
	return func(s *side) error { return unix.Mknodat(s.fd, p, unix.S_IFIFO|0o644, 0) }
}

func stat(p string) func(s *side) error {
	return func(s *side) error {
		var st unix.Stat_t
		return unix.Fstatat(s.fd, p, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
}

func statFollow(p string) func(s *side) error {
	return func(s *side) error {
		var st unix.Stat_t
		return unix.Fstatat(s.fd, p, &st, 0)
	}
}

func chmod(p string, mode uint32) func(s *side) error {
	return func(s *side) error { return unix.Fchmodat(s.fd, p, mode, 0) }
}

func chown(p string, uid, gid int) func(s *side) error {
	return func(s *side) error { return unix.Fchownat(s.fd, p, uid, gid, unix.AT_SYMLINK_NOFOLLOW) }
}

func truncate(p string, size int64) func(s *side) error {
	return func(s *side) error { return unix.Truncate(s.proc(p), size) }
}

func utimes(p string, sec int64) func(s *side) error {
	return func(s *side) error {
		ts := []unix.Timespec{{Sec: sec}, {Sec: sec}}
		return unix.UtimesNanoAt(s.fd, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
}

func touchNow(p string) func(s *side) error {
	return func(s *side) error {
		return unix.UtimesNanoAt(s.fd, p, nil, unix.AT_SYMLINK_NOFOLLOW)
	}
}

func readlink(p string) func(s *side) error {
	return func(s *side) error {
		_, err := unix.Readlinkat(s.fd, p, make([]byte, 256))
		return err
	}
}

func access(p string, mode uint32) func(s *side) error {
	return func(s *side) error { return unix.Faccessat(s.fd, p, mode, 0) }
}

func setxattr(p string) func(s *side) error {
	return func(s *side) error { return unix.Lsetxattr(s.proc(p), "user.k", []byte("v"), 0) }
}

func getxattr(p string) func(s *side) error {
	return func(s *side) error {
		_, err := unix.Lgetxattr(s.proc(p), "user.k", make([]byte, 64))
		return err
	}
}

func listxattr(p string) func(s *side) error {
	return func(s *side) error {
		_, err := unix.Llistxattr(s.proc(p), make([]byte, 256))
		return err
	}
}

func removexattr(p string) func(s *side) error {
	return func(s *side) error { return unix.Lremovexattr(s.proc(p), "user.k") }
}

func writeAt(p string, data string, off int64) func(s *side) error {
	return func(s *side) error {
		fd, err := unix.Openat(s.fd, p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		_, err = unix.Pwrite(fd, []byte(data), off)
		return errors.Join(err, unix.Close(fd))
	}
}

// nameCalls are the calls that take a name, each with name as the name.
func nameCalls(dir, name string) []pcall {
	p := dir + "/" + name
	return []pcall{
		c("open O_CREAT "+p, creat(p), dir),
		c("open "+p, openFlags(p, unix.O_RDONLY), dir),
		c("stat "+p, stat(p)),
		c("chmod "+p, chmod(p, 0o600)),
		c("chown "+p, chown(p, 1, 1)),
		c("truncate "+p, truncate(p, 1)),
		c("utimensat "+p, utimes(p, 2000000000)),
		c("access "+p, access(p, unix.R_OK)),
		c("readlink "+p, readlink(p)),
		c("mkdir "+p, mkdir(p), dir),
		c("mkfifo "+p, mkfifo(p), dir),
		c("symlink "+p, symlink("f", p), dir),
		c("link f "+p, link("f", p), dir, "f"),
		c("link "+p+" x", link(p, dir+"/x"), dir),
		c("rename f "+p, rename("f", p, 0), dir, "f"),
		c("rename "+p+" x", rename(p, dir+"/x", 0), dir),
		c("unlink "+p, unlink(p), dir),
		c("rmdir "+p, rmdir(p), dir),
		c("setxattr "+p, setxattr(p)),
		c("getxattr "+p, getxattr(p)),
		c("listxattr "+p, listxattr(p)),
		c("removexattr "+p, removexattr(p)),
	}
}

func posixCases() []pcase {
	var cs []pcase
	// Over-long names: in a lower directory, an upper one, a merged one,
	// and through a symlink's parent.
	for _, where := range []struct{ name, setup, dir string }{
		{"lower", "", "d"},
		{"upper", "", "u"},
		{"merged", "echo x > d/new", "d"},
	} {
		calls := nameCalls(where.dir, name256)
		if where.name == "upper" {
			calls = append([]pcall{c("mkdir u", mkdir("u"), ".", "u")}, calls...)
		}
		if where.name == "merged" {
			calls = append([]pcall{c("create d/new", creat("d/new"), "d")}, calls...)
		}
		cs = append(cs, pcase{name: "enametoolong-" + where.name, calls: calls})
	}
	// The longest name works for every call.
	long := name255
	cs = append(cs, pcase{name: "name255", calls: []pcall{
		c("create", creat("d/"+long), "d", "d/"+long).mtimes("d"),
		c("stat", stat("d/"+long)),
		c("chmod", chmod("d/"+long, 0o600), "d/"+long).ctimes("d/" + long),
		c("setxattr", setxattr("d/"+long)),
		c("getxattr", getxattr("d/"+long)),
		c("link", link("d/"+long, "e/"+long), "d/"+long, "e").mtimes("e").ctimes("d/" + long),
		c("rename", rename("d/"+long, "e/"+long+"x"[:0], 0), "d", "e", "e/"+long),
		c("unlink", unlink("e/"+long), "e").mtimes("e"),
		c("mkdir", mkdir("d/"+long), "d", "d/"+long).mtimes("d"),
		c("symlink", symlink(long, "d/"+long+"/"+long), "d/"+long+"/"+long),
		c("readlink", readlink("d/"+long+"/"+long)),
		c("rename dir", rename("d/"+long, "e/"+long, 0), "d", "e", "e/"+long).mtimes("d", "e"),
		c("unlink symlink", unlink("e/"+long+"/"+long), "e/"+long),
		c("rmdir", rmdir("e/"+long), "e").mtimes("e"),
	}})
	// ENOENT
	cs = append(cs, pcase{name: "enoent", calls: []pcall{
		c("open missing", openFlags("missing", unix.O_RDONLY)),
		c("stat missing", stat("missing")),
		c("mkdir in missing", mkdir("missing/x")),
		c("create in missing", creat("missing/x")),
		c("unlink missing", unlink("missing")),
		c("rmdir missing", rmdir("d/missing")),
		c("rename missing", rename("missing", "x", 0)),
		c("rename into missing", rename("f", "missing/x", 0), "f"),
		c("link missing", link("missing", "x")),
		c("link into missing", link("f", "missing/x"), "f"),
		c("chmod missing", chmod("missing", 0o600)),
		c("open dangling", openFlags("dangling", unix.O_RDONLY)),
		c("stat through dangling", statFollow("dangling")),
		c("truncate missing", truncate("missing", 0)),
		c("getxattr missing", getxattr("missing")),
		c("readlink missing", readlink("missing")),
		c("symlink in missing", symlink("f", "missing/x")),
		c("exchange with missing", rename("f", "missing", unix.RENAME_EXCHANGE), "f"),
	}})
	// ENOTDIR
	cs = append(cs, pcase{name: "enotdir", calls: []pcall{
		c("stat f/x", stat("f/x")),
		c("mkdir f/x", mkdir("f/x")),
		c("create f/x", creat("f/x")),
		c("open f/", openFlags("f/", unix.O_RDONLY)),
		c("open O_DIRECTORY f", openFlags("f", unix.O_RDONLY|unix.O_DIRECTORY)),
		c("rmdir f", rmdir("f"), "f"),
		c("rename dir onto file", rename("e", "f", 0), "e", "f"),
		c("rename into a file", rename("e", "f/x", 0), "e"),
		c("unlink f/x", unlink("f/x")),
		c("rename upper dir onto lower file", func(s *side) error {
			if err := unix.Mkdirat(s.fd, "u", 0o755); err != nil {
				return err
			}
			return unix.Renameat2(s.fd, "u", s.fd, "d/f", 0)
		}, "u", "d/f"),
	}})
	// EISDIR
	cs = append(cs, pcase{name: "eisdir", calls: []pcall{
		c("open dir O_WRONLY", openFlags("d", unix.O_WRONLY)),
		c("open dir O_RDWR", openFlags("e", unix.O_RDWR)),
		c("unlink dir", unlink("e"), "e"),
		c("rename file onto dir", rename("f", "e", 0), "f", "e"),
		c("truncate dir", truncate("d", 0), "d"),
		c("create over dir", openFlags("e", unix.O_CREAT|unix.O_WRONLY)),
	}})
	// EEXIST
	cs = append(cs, pcase{name: "eexist", calls: []pcall{
		c("mkdir existing dir", mkdir("d"), "d"),
		c("mkdir over file", mkdir("f"), "f"),
		c("mkdir over symlink", mkdir("dangling"), "dangling"),
		c("create O_EXCL existing", openFlags("f", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY), "f"),
		c("create O_EXCL dangling symlink", openFlags("dangling", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY), "dangling"),
		c("link to existing", link("f", "d/f"), "f", "d/f"),
		c("symlink over existing", symlink("x", "f"), "f"),
		c("mkfifo over existing", mkfifo("e"), "e"),
		c("rename noreplace", rename("f", "d/f", unix.RENAME_NOREPLACE), "f", "d/f"),
		c("mkdir over upper file", func(s *side) error {
			if err := creat("u")(s); err != nil {
				return err
			}
			return unix.Mkdirat(s.fd, "u", 0o755)
		}, "u"),
	}})
	// ENOTEMPTY
	cs = append(cs, pcase{name: "enotempty", calls: []pcall{
		c("rmdir lower non-empty", rmdir("ne"), "ne"),
		c("rmdir lower dir with file", rmdir("d"), "d"),
		c("rename onto non-empty", rename("e", "ne", 0), "e", "ne"),
		c("rmdir merged", func(s *side) error {
			if err := mkdir("e/u")(s); err != nil {
				return err
			}
			return unix.Unlinkat(s.fd, "e", unix.AT_REMOVEDIR)
		}, "e"),
		c("rmdir emptied lower dir", func(s *side) error {
			if err := unix.Unlinkat(s.fd, "ne/x", unix.AT_REMOVEDIR); err != nil {
				return err
			}
			return unix.Unlinkat(s.fd, "ne", unix.AT_REMOVEDIR)
		}, "ne", ".").mtimes("."),
	}})
	// ELOOP
	cs = append(cs, pcase{name: "eloop", calls: []pcall{
		c("open loop", openFlags("loop", unix.O_RDONLY)),
		c("stat through loop", stat("loop/x")),
		c("open O_NOFOLLOW symlink", openFlags("l", unix.O_RDONLY|unix.O_NOFOLLOW)),
		c("create through loop", creat("loop")),
		c("mkdir in loop", mkdir("loop/x")),
	}})
	// EINVAL
	cs = append(cs, pcase{name: "einval", calls: []pcall{
		c("rename dir into its child", rename("d", "d/s/x", 0), "d", "d/s"),
		c("rename dir into itself", rename("d", "d/x", 0), "d"),
		c("rmdir .", rmdir("d/."), "d"),
		c("rename upper dir into its child", func(s *side) error {
			if err := unix.Mkdirat(s.fd, "u", 0o755); err != nil {
				return err
			}
			if err := unix.Mkdirat(s.fd, "u/v", 0o755); err != nil {
				return err
			}
			return unix.Renameat2(s.fd, "u", s.fd, "u/v/w", 0)
		}, "u", "u/v"),
		c("exchange dir with its child", rename("d", "d/s", unix.RENAME_EXCHANGE), "d", "d/s"),
		c("readlink of a file", readlink("f")),
		c("rename both flags", rename("f", "d/f", unix.RENAME_EXCHANGE|unix.RENAME_NOREPLACE), "f"),
	}})
	// EACCES and EPERM as an unprivileged user
	cs = append(cs, pcase{name: "eacces", calls: []pcall{
		c("create in a root dir", creat("d/x")).as(nobody),
		c("mkdir in a root dir", mkdir("d/x")).as(nobody),
		c("open private", openFlags("priv/f", unix.O_RDONLY)).as(nobody),
		c("stat private", stat("priv/f")).as(nobody),
		c("write root file", openFlags("f", unix.O_WRONLY)).as(nobody),
		c("unlink in root dir", unlink("d/f"), "d/f").as(nobody),
		c("rename in root dir", rename("d/f", "d/g", 0), "d/f").as(nobody),
		c("chmod root file", chmod("f", 0o777), "f").as(nobody),
		c("chown root file", chown("f", nobody, nobody), "f").as(nobody),
		c("utimensat explicit on root file", utimes("f", 1), "f").as(nobody),
		c("utimensat now on root file", touchNow("f"), "f").as(nobody),
		c("setxattr root file", setxattr("f"), "f").as(nobody),
		c("sticky unlink", unlink("sticky/f"), "sticky/f").as(nobody),
		c("sticky rename", rename("sticky/f", "sticky/g", 0), "sticky/f").as(nobody),
		c("create in open dir", creat("open/mine"), "open/mine", "open").as(nobody).mtimes("open"),
		c("chmod own file", chmod("open/mine", 0o4755), "open/mine").as(nobody).ctimes("open/mine"),
		c("chown own file to root", chown("open/mine", 0, 0), "open/mine").as(nobody),
		c("unlink root file in open dir", unlink("open/f"), "open/f", "open").as(nobody).mtimes("open"),
		c("link root file", link("f", "open/l"), "f", "open").as(nobody),
		c("mknod device", func(s *side) error { return unix.Mknodat(s.fd, "open/dev", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))) }, "open").as(nobody),
		c("truncate root file", truncate("f", 0), "f").as(nobody),
	}})
	// Link counts: directories are 2 + subdirectories after mkdir, rmdir
	// and renames between parents, for lower, upper and merged ones.
	cs = append(cs, pcase{name: "nlink", calls: []pcall{
		c("stat lower dirs", stat("."), ".", "d", "d/s", "e", "ne"),
		c("mkdir in lower", mkdir("d/t"), "d", "d/t").mtimes("d"),
		c("mkdir upper", mkdir("u"), ".", "u").mtimes("."),
		c("mkdir in upper", mkdir("u/v"), "u", "u/v"),
		c("rename lower dir to upper parent", rename("d/s", "u/s", 0), "d", "u", "u/s").mtimes("d", "u"),
		c("rename upper dir to lower parent", rename("u/v", "ne/v", 0), "u", "ne", "ne/v").mtimes("u", "ne"),
		c("rename merged dir to root", rename("ne", "ne2", 0), ".", "ne2", "ne2/v").mtimes("."),
		c("rename dir over empty dir", rename("e", "u/s", 0), ".", "u", "u/s").mtimes(".", "u"),
		c("rmdir moved", rmdir("ne2/v"), "ne2").mtimes("ne2"),
		c("rmdir lower", rmdir("ne2/x"), "ne2").mtimes("ne2"),
		c("exchange dirs", rename("d", "u", unix.RENAME_EXCHANGE), ".", "d", "u"),
		c("hard link count", link("f", "d/f2"), "f", "d/f2").ctimes("f"),
		c("unlink a link", unlink("f"), "d/f2").ctimes("d/f2"),
	}})
	// Times and metadata POSIX requires to change.
	cs = append(cs, pcase{name: "times", calls: []pcall{
		c("write lower file", writeAt("f", "x", 0), "f").mtimes("f").keeps("."),
		c("truncate lower file", truncate("d/f", 2), "d/f").mtimes("d/f").keeps("d", "."),
		c("chmod lower file", chmod("l", 0o600), "f").ctimes("f").keeps("."),
		c("chmod file in a lower subdirectory", chmod("d/s", 0o700), "d/s").ctimes("d/s").keeps("d", "."),
		c("mkdir deep in lower dirs", mkdir("ne/x/new"), "ne/x").mtimes("ne/x").keeps("ne", "."),
		c("chown lower dir", chown("e", 7, 8), "e").ctimes("e"),
		c("rename lower file", rename("d/f", "e/f", 0), "d", "e", "e/f").mtimes("d", "e").ctimes("e/f"),
		c("link", link("e/f", "ne/f"), "e/f", "ne").mtimes("ne").ctimes("e/f"),
		c("unlink", unlink("ne/f"), "e/f", "ne").mtimes("ne").ctimes("e/f"),
		c("setxattr", setxattr("e/f"), "e/f").ctimes("e/f"),
		c("removexattr", removexattr("e/f"), "e/f").ctimes("e/f"),
		c("utimensat", utimes("e/f", 1500000000), "e/f").ctimes("e/f"),
		c("symlink", symlink("target", "ne/sym"), "ne", "ne/sym").mtimes("ne"),
		c("mkfifo", mkfifo("ne/fifo"), "ne", "ne/fifo").mtimes("ne"),
		c("rmdir", rmdir("ne/x"), "ne").mtimes("ne"),
	}})
	// Deep paths: nested 255-byte names far beyond PATH_MAX below the
	// workspace root, reached relative to a directory descriptor, with up
	// to PATH_MAX-1 bytes of path per call.
	cs = append(cs, pcase{name: "deep", calls: deepCalls()})
	return cs
}

// deepLevels 255-byte directories nest 4096 bytes deep, below a scenario
// directory that is itself below the upper directory's host path.
const deepLevels = 16

func deepCalls() []pcall {
	var calls []pcall
	// Make the chain one level at a time from the previous level's fd.
	calls = append(calls, c("mkdir chain", func(s *side) error {
		fd, err := unix.Openat(s.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		for i := range deepLevels {
			if err := unix.Mkdirat(fd, name255, 0o755); err != nil {
				unix.Close(fd)
				return fmt.Errorf("level %d: %w", i, err)
			}
			nfd, err := unix.Openat(fd, name255, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("level %d: %w", i, err)
			}
			fd = nfd
			s.held[fmt.Sprint("level", i)], _ = unix.Dup(fd)
		}
		s.held["bottom"] = fd
		return nil
	}, "."))
	// From level 0, a relative path of the 15 levels below it (15*256-1 =
	// 3839 bytes) and a name of 255 bytes: 4095 bytes, PATH_MAX-1.
	rel := strings.TrimSuffix(strings.Repeat(name255+"/", deepLevels-1), "/")
	fill := 4095 - len(rel) - 1
	max := rel + "/" + strings.Repeat("m", fill)
	over := max + "m"
	bottom := func(f func(fd int) error) func(s *side) error {
		return func(s *side) error { return f(s.held["bottom"]) }
	}
	top := func(f func(fd int) error) func(s *side) error {
		return func(s *side) error { return f(s.held["level0"]) }
	}
	fstat := func(fd int, p string) error {
		var st unix.Stat_t
		return unix.Fstatat(fd, p, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	calls = append(calls,
		c("create at the bottom", bottom(func(fd int) error {
			f, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return err
			}
			_, err = unix.Write(f, []byte("deep"))
			return errors.Join(err, unix.Close(f))
		})),
		c("stat at the bottom", bottom(func(fd int) error { return fstat(fd, "f") })),
		c("chmod at the bottom", bottom(func(fd int) error { return unix.Fchmodat(fd, "f", 0o600, 0) })),
		c("chown at the bottom", bottom(func(fd int) error { return unix.Fchownat(fd, "f", 5, 6, 0) })),
		c("utimens at the bottom", bottom(func(fd int) error {
			return unix.UtimesNanoAt(fd, "f", []unix.Timespec{{Sec: 5}, {Sec: 5}}, 0)
		})),
		c("truncate at the bottom", bottom(func(fd int) error {
			return unix.Truncate(fmt.Sprintf("/proc/self/fd/%d/f", fd), 2)
		})),
		c("xattr at the bottom", bottom(func(fd int) error {
			p := fmt.Sprintf("/proc/self/fd/%d/f", fd)
			if err := unix.Lsetxattr(p, "user.k", []byte("v"), 0); err != nil {
				return err
			}
			_, err := unix.Lgetxattr(p, "user.k", make([]byte, 8))
			return err
		})),
		c("link at the bottom", bottom(func(fd int) error { return unix.Linkat(fd, "f", fd, "g", 0) })),
		c("symlink at the bottom", bottom(func(fd int) error { return unix.Symlinkat("f", fd, "s") })),
		c("mkfifo at the bottom", bottom(func(fd int) error { return unix.Mknodat(fd, "p", unix.S_IFIFO|0o644, 0) })),
		c("mkdir at the bottom", bottom(func(fd int) error { return unix.Mkdirat(fd, "dir", 0o755) })),
		c("rename at the bottom", bottom(func(fd int) error { return unix.Renameat(fd, "g", fd, "dir/g") })),
		c("read back at the bottom", bottom(func(fd int) error {
			f, err := unix.Openat(fd, "dir/g", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(f)
			b := make([]byte, 8)
			n, err := unix.Read(f, b)
			if err == nil && string(b[:n]) != "de" {
				return fmt.Errorf("read %q", b[:n])
			}
			return err
		})),
		c("PATH_MAX-1 create", top(func(fd int) error {
			f, err := unix.Openat(fd, max, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(f)
			}
			return err
		})),
		c("PATH_MAX-1 stat", top(func(fd int) error { return fstat(fd, max) })),
		c("PATH_MAX-1 chmod", top(func(fd int) error { return unix.Fchmodat(fd, max, 0o640, 0) })),
		c("PATH_MAX-1 unlink", top(func(fd int) error { return unix.Unlinkat(fd, max, 0) })),
		c("PATH_MAX-1 mkdir", top(func(fd int) error { return unix.Mkdirat(fd, max, 0o755) })),
		c("PATH_MAX-1 rmdir", top(func(fd int) error { return unix.Unlinkat(fd, max, unix.AT_REMOVEDIR) })),
		c("PATH_MAX create", top(func(fd int) error {
			f, err := unix.Openat(fd, over, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(f)
			}
			return err
		})),
		c("PATH_MAX stat", top(func(fd int) error { return fstat(fd, over) })),
		c("unlink at the bottom", bottom(func(fd int) error {
			return errors.Join(unix.Unlinkat(fd, "f", 0), unix.Unlinkat(fd, "s", 0), unix.Unlinkat(fd, "p", 0),
				unix.Unlinkat(fd, "dir/g", 0), unix.Unlinkat(fd, "dir", unix.AT_REMOVEDIR))
		})),
		c("rmdir chain", func(s *side) error {
			for i := deepLevels - 1; i > 0; i-- {
				if err := unix.Unlinkat(s.held[fmt.Sprint("level", i-1)], name255, unix.AT_REMOVEDIR); err != nil {
					return fmt.Errorf("level %d: %w", i, err)
				}
			}
			return unix.Unlinkat(s.fd, name255, unix.AT_REMOVEDIR)
		}, "."),
	)
	return calls
}

// attrs is what the suite compares of one path.
type attrs struct {
	errno        syscall.Errno
	mode, nlink  uint32
	uid, gid     uint32
	size         int64
	mtime, ctime unix.Timespec
	isDir        bool
}

func (s *side) attrs(p string) attrs {
	var st unix.Stat_t
	if err := unix.Fstatat(s.fd, p, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return attrs{errno: overlaytest.Errno(err)}
	}
	return attrs{mode: st.Mode, nlink: uint32(st.Nlink), uid: st.Uid, gid: st.Gid, size: st.Size,
		mtime: st.Mtim, ctime: st.Ctim, isDir: st.Mode&unix.S_IFMT == unix.S_IFDIR}
}

// runAs runs f with the file system credentials of uid (and gid uid, no
// supplementary groups) on a thread of its own, which dies with them.
func runAs(uid uint32, f func() error) error {
	if uid == 0 {
		return f()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Setgroups(nil); err != nil {
			done <- fmt.Errorf("setgroups: %w", err)
			return
		}
		unix.Setfsgid(int(uid))
		unix.Setfsuid(int(uid))
		done <- f()
	}()
	return <-done
}

// TestPosixDifferential runs the suite on both data paths.
func TestPosixDifferential(t *testing.T) { onBothPaths(t, testPosixDifferential) }

func testPosixDifferential(t *testing.T, path string) {
	cases := posixCases()
	fill := func(t testing.TB, dir string) {
		var b strings.Builder
		for _, pc := range cases {
			fmt.Fprintf(&b, "mkdir %s && (cd %s && %s\n%s\n)\n", pc.name, pc.name, fixture, pc.lower)
		}
		// Old times everywhere, so that every change shows.
		b.WriteString("find . -exec touch -h -d @1000000000 {} +\n")
		sh(t, dir, b.String())
	}
	e, m, mnt, ref := differential(t, fill, path)
	total := 0
	for _, pc := range cases {
		t.Run(pc.name, func(t *testing.T) {
			sides := [2]*side{openSide(t, "plain", filepath.Join(ref, pc.name)), openSide(t, "workspace", filepath.Join(mnt, pc.name))}
			if srv, ok := m.(*fusefs.Server); ok {
				sides[1].mtime = func(p string) (int64, error) { return daemonMtime(e.ctx, srv.Overlay(), pc.name+"/"+p) }
			}
			defer sides[0].close()
			defer sides[1].close()
			for _, call := range pc.calls {
				total++
				compareCall(t, path, pc.name, call, sides)
			}
		})
	}
	t.Logf("%d scenarios, %d calls; data path %s", len(cases), total, m.DataPath())
	// What the workspace holds commits: a fresh workspace on the commit
	// matches the plain directory.
	root := e.Commit(m)
	_, mnt2 := e.mount(root)
	overlaytest.RequireSame(t, ref, mnt2, "fresh workspace on the commit")
}

func compareCall(t *testing.T, path, scenario string, call pcall, sides [2]*side) {
	t.Helper()
	watched := append(append(append(append([]string{}, call.stat...), call.mtime...), call.ctime...), call.keep...)
	var before [2]map[string]attrs
	for i, s := range sides {
		before[i] = map[string]attrs{}
		for _, p := range watched {
			before[i][p] = s.attrs(p)
		}
	}
	var errs [2]syscall.Errno
	for i, s := range sides {
		errs[i] = overlaytest.Errno(runAs(call.uid, func() error { return call.do(s) }))
	}
	if errs[0] != errs[1] {
		t.Errorf("%s: %s: workspace says %v, plain directory %v", scenario, call.desc, errs[1], errs[0])
	}
	for _, p := range call.stat {
		a, b := sides[0].attrs(p), sides[1].attrs(p)
		if d := diffAttrs(a, b, path); d != "" {
			t.Errorf("%s: %s: %s: %s", scenario, call.desc, p, d)
		}
	}
	if errs[0] != 0 {
		return
	}
	for i, s := range sides {
		for _, p := range call.mtime {
			now := s.attrs(p)
			if now.mtime == before[i][p].mtime || now.ctime == before[i][p].ctime {
				t.Errorf("%s: %s: %s on the %s side: mtime/ctime not changed (%v/%v)", scenario, call.desc, p, s.name, now.mtime, now.ctime)
			}
		}
		for _, p := range call.ctime {
			if now := s.attrs(p); now.ctime == before[i][p].ctime {
				t.Errorf("%s: %s: %s on the %s side: ctime not changed (%v)", scenario, call.desc, p, s.name, now.ctime)
			}
		}
		for _, p := range call.keep {
			if now := s.attrs(p); now.mtime != before[i][p].mtime {
				t.Errorf("%s: %s: %s on the %s side: mtime changed (%v, was %v)", scenario, call.desc, p, s.name, now.mtime, before[i][p].mtime)
			}
			if s.mtime == nil {
				continue
			}
			if ns, err := s.mtime(p); err != nil || ns != unix.TimespecToNsec(before[i][p].mtime) {
				t.Errorf("%s: %s: %s in the daemon: mtime %d, %v; was %d", scenario, call.desc, p, ns, err, unix.TimespecToNsec(before[i][p].mtime))
			}
		}
	}
}

// diffAttrs describes how b (the workspace) differs from a (the plain
// directory). Directory sizes are not compared (POSIX leaves them to the
// file system). On the overlay data path a merged directory has link count
// 1, as kernel overlayfs reports it (it does not count subdirectories).
func diffAttrs(a, b attrs, path string) string {
	var d []string
	if a.errno != b.errno {
		return fmt.Sprintf("stat: workspace %v, plain %v", b.errno, a.errno)
	}
	if a.mode != b.mode {
		d = append(d, fmt.Sprintf("mode %o, want %o", b.mode, a.mode))
	}
	if a.nlink != b.nlink && !(onOverlay(path) && b.isDir && b.nlink == 1) {
		d = append(d, fmt.Sprintf("nlink %d, want %d", b.nlink, a.nlink))
	}
	if a.uid != b.uid || a.gid != b.gid {
		d = append(d, fmt.Sprintf("owner %d:%d, want %d:%d", b.uid, b.gid, a.uid, a.gid))
	}
	if !a.isDir && a.size != b.size {
		d = append(d, fmt.Sprintf("size %d, want %d", b.size, a.size))
	}
	return strings.Join(d, ", ")
}

func openSide(t *testing.T, name, dir string) *side {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	return &side{name: name, dir: dir, fd: fd, held: map[string]int{}}
}

// differential makes the two sides of a differential test: a workspace on
// data path path over the lower tree fill writes, mounted at mnt, and a
// plain copy of that tree at ref, both reachable by an unprivileged user.
func differential(t *testing.T, fill func(testing.TB, string), path string) (e *env, m served, mnt, ref string) {
	e = newEnvWith(t, fill, path)
	m, mnt = e.mount(e.Root)
	ref = filepath.Join(t.TempDir(), "ref")
	sh(t, "/", "cp -a "+e.Base+" "+ref)
	openAccess(t, ref)
	openAccess(t, mnt)
	return e, m, mnt, ref
}

// openAccess lets the unprivileged user reach dir: test directories are
// 0700.
func openAccess(t *testing.T, dir string) {
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	require.NoError(t, os.Chmod(dir, 0o755))
}

// daemonMtime reads the mtime of the workspace path p from the overlay.
func daemonMtime(ctx context.Context, ov *overlay.Overlay, p string) (int64, error) {
	n := ov.Root()
	for _, name := range strings.Split(p, "/") {
		if name == "." || name == "" {
			continue
		}
		c, err := ov.Lookup(ctx, n, name)
		if err != nil {
			return 0, err
		}
		n = c
	}
	a, err := ov.Getattr(ctx, n, nil)
	return a.Mtime, err
}
