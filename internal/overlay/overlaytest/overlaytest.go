package overlaytest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/dirfd"
)

// Target is a directory tree the operations act on; paths are relative,
// slash-separated.
type Target interface {
	WriteFile(path string, data []byte, mode uint32) error // create or truncate
	WriteAt(path string, off int64, data []byte) error     // an existing file
	Truncate(path string, size int64) error
	Rename(from, to string) error
	Link(from, to string) error
	Unlink(path string) error
	Mkdir(path string, mode uint32) error
	Rmdir(path string) error
	Chmod(path string, mode uint32) error
	Symlink(target, path string) error
	Mkfifo(path string, mode uint32) error
	Setxattr(path, name string, value []byte) error // a regular file's, not following symlinks
}

// Dir is a Target on a real directory (a plain one, or a mount).
type Dir string

func (d Dir) p(path string) string { return filepath.Join(string(d), path) }

func (d Dir) WriteFile(path string, data []byte, mode uint32) error {
	f, err := os.OpenFile(d.p(path), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, fs.FileMode(mode))
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (d Dir) WriteAt(path string, off int64, data []byte) error {
	f, err := os.OpenFile(d.p(path), os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (d Dir) Truncate(path string, size int64) error { return unix.Truncate(d.p(path), size) }
func (d Dir) Rename(from, to string) error           { return unix.Rename(d.p(from), d.p(to)) }
func (d Dir) Link(from, to string) error             { return unix.Link(d.p(from), d.p(to)) }
func (d Dir) Unlink(path string) error               { return unix.Unlink(d.p(path)) }
func (d Dir) Mkdir(path string, mode uint32) error   { return unix.Mkdir(d.p(path), mode) }
func (d Dir) Rmdir(path string) error                { return unix.Rmdir(d.p(path)) }
func (d Dir) Chmod(path string, mode uint32) error {
	return unix.Fchmodat(unix.AT_FDCWD, d.p(path), mode, 0)
}
func (d Dir) Symlink(target, path string) error     { return unix.Symlink(target, d.p(path)) }
func (d Dir) Mkfifo(path string, mode uint32) error { return unix.Mkfifo(d.p(path), mode) }
func (d Dir) Setxattr(path, name string, value []byte) error {
	return unix.Lsetxattr(d.p(path), name, value, 0)
}

// Errno reduces an error to its errno (0 for nil), so two targets can be
// compared by outcome.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// Op is one generated operation.
type Op struct {
	Kind  string
	A, B  string
	Off   int64
	Size  int64
	Mode  uint32
	Data  []byte
	Off2  int64  // write2: where B's data goes
	Data2 []byte // write2: B's data
}

func (op Op) String() string {
	s := fmt.Sprintf("%s %q %q off=%d size=%d mode=%o len=%d", op.Kind, op.A, op.B, op.Off, op.Size, op.Mode, len(op.Data))
	if op.Kind == "write2" {
		s += fmt.Sprintf(" off2=%d len2=%d", op.Off2, len(op.Data2))
	}
	return s
}

// Apply runs op on t.
func (op Op) Apply(t Target) error {
	switch op.Kind {
	case "create":
		return t.WriteFile(op.A, op.Data, op.Mode)
	case "write":
		return t.WriteAt(op.A, op.Off, op.Data)
	case "truncate":
		return t.Truncate(op.A, op.Size)
	case "rename":
		return t.Rename(op.A, op.B)
	case "link":
		return t.Link(op.A, op.B)
	case "unlink":
		return t.Unlink(op.A)
	case "mkdir":
		return t.Mkdir(op.A, op.Mode)
	case "rmdir":
		return t.Rmdir(op.A)
	case "chmod":
		return t.Chmod(op.A, op.Mode)
	case "symlink":
		return t.Symlink(op.B, op.A)
	case "mkfifo":
		return t.Mkfifo(op.A, op.Mode)
	case "setxattr":
		return t.Setxattr(op.A, op.B, op.Data)
	case "write2":
		return writeBoth(t, op)
	}
	return fmt.Errorf("unknown op %q", op.Kind)
}

// writeBoth writes to two files at once, each from a goroutine of its own
// in pieces (each its own open, write and close: copy-ups, opens and
// writes of the two files interleave). The two ranges never overlap, even
// when the two names are links of one file, so the outcome does not depend
// on the interleaving; A's error, if any, else B's, is the op's.
func writeBoth(t Target, op Op) error {
	const piece = 1024
	write := func(p string, off int64, data []byte, start <-chan struct{}) error {
		<-start
		for len(data) > 0 {
			n := min(piece, len(data))
			if err := t.WriteAt(p, off, data[:n]); err != nil {
				return err
			}
			off, data = off+int64(n), data[n:]
		}
		return nil
	}
	start := make(chan struct{})
	errB := make(chan error, 1)
	go func() { errB <- write(op.B, op.Off2, op.Data2, start) }()
	errA := make(chan error, 1)
	go func() { errA <- write(op.A, op.Off, op.Data, start) }()
	close(start)
	a, b := <-errA, <-errB
	if a != nil {
		return a
	}
	return b
}

// Gen generates operations from a seed. It keeps a model of the tree built
// from the outcomes reported to Done, so most operations are valid and some
// deliberately fail the same way on both targets. Operations cover creates,
// writes (also by two concurrent writers on two files), truncates, renames of files and of directories between parents
// (over existing files too), hard links, unlinks, mkdir, rmdir, chmod and
// symlinks, with short names, names of up to NAME_MAX bytes (which nest
// into long paths) and over-long ones.
type Gen struct {
	r     *rand.Rand
	files []string
	dirs  []string
	n     int
}

// NewGen starts a generator over a tree whose existing files and
// directories (relative paths, "" is the root) are given.
func NewGen(seed uint64, files, dirs []string) *Gen {
	g := &Gen{r: rand.New(rand.NewPCG(seed, seed^0x5eed)), files: slices.Clone(files), dirs: slices.Clone(dirs)}
	if !slices.Contains(g.dirs, "") {
		g.dirs = append(g.dirs, "")
	}
	sort.Strings(g.files)
	sort.Strings(g.dirs)
	return g
}

func (g *Gen) pick(l []string) string {
	if len(l) == 0 {
		return ""
	}
	return l[g.r.IntN(len(l))]
}

func (g *Gen) newName(dir string) string {
	g.n++
	name := fmt.Sprintf("n%d", g.r.IntN(40))
	switch k := g.r.IntN(100); {
	case k < 25:
		name = fmt.Sprintf("u%d", g.n)
	case k < 28:
		// Long names (up to NAME_MAX) nest into long paths.
		name = fmt.Sprintf("%s%d", strings.Repeat("l", 250), g.r.IntN(8))
	case k < 29:
		name = strings.Repeat("o", 256) // over-long: ENAMETOOLONG everywhere
	}
	return join(dir, name)
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func (g *Gen) data(max int) []byte {
	b := make([]byte, g.r.IntN(max+1))
	for i := range b {
		b[i] = byte(g.r.Uint32())
	}
	return b
}

// Next returns the next operation.
func (g *Gen) Next() Op {
	// Now and then a fifo (named apart from every other name, so that no
	// later open of a regular file meets one and waits for a writer) or a
	// user xattr on a file.
	switch k := g.r.IntN(100); {
	case k < 2:
		g.n++
		return Op{Kind: "mkfifo", A: join(g.pick(g.dirs), fmt.Sprintf("fifo%d", g.n)), Mode: 0o644}
	case k < 5 && len(g.files) > 0:
		return Op{Kind: "setxattr", A: g.pick(g.files), B: fmt.Sprintf("user.k%d", g.r.IntN(3)), Data: g.data(40)}
	case k < 8 && len(g.files) > 1:
		// Two writers at once on two files (B's range after A's).
		op := Op{Kind: "write2", A: g.pick(g.files), B: g.pick(g.files), Off: int64(g.r.IntN(9000)), Data: g.data(5000)}
		for op.B == op.A {
			op.B = g.pick(g.files)
		}
		op.Off2 = op.Off + int64(len(op.Data)) + int64(g.r.IntN(3000))
		op.Data2 = g.data(5000)
		return op
	}
	for {
		switch k := g.r.IntN(100); {
		case k < 18:
			return Op{Kind: "create", A: g.newName(g.pick(g.dirs)), Data: g.data(3000), Mode: 0o644}
		case k < 38 && len(g.files) > 0:
			return Op{Kind: "write", A: g.pick(g.files), Off: int64(g.r.IntN(9000)), Data: g.data(5000)}
		case k < 46 && len(g.files) > 0:
			return Op{Kind: "truncate", A: g.pick(g.files), Size: int64(g.r.IntN(12000))}
		case k < 58:
			from := g.pick(g.files)
			if g.r.IntN(3) == 0 || from == "" {
				from = g.pick(g.dirs)
			}
			if from == "" {
				continue
			}
			to := g.newName(g.pick(g.dirs))
			if g.r.IntN(3) == 0 && len(g.files) > 0 {
				to = g.pick(g.files) // over an existing file
			}
			return Op{Kind: "rename", A: from, B: to}
		case k < 64 && len(g.files) > 0:
			return Op{Kind: "link", A: g.pick(g.files), B: g.newName(g.pick(g.dirs))}
		case k < 74 && len(g.files) > 0:
			return Op{Kind: "unlink", A: g.pick(g.files)}
		case k < 82:
			return Op{Kind: "mkdir", A: g.newName(g.pick(g.dirs)), Mode: 0o755}
		case k < 88 && len(g.dirs) > 1:
			d := g.pick(g.dirs)
			if d == "" {
				continue
			}
			return Op{Kind: "rmdir", A: d}
		case k < 96 && len(g.files) > 0:
			return Op{Kind: "chmod", A: g.pick(g.files), Mode: []uint32{0o600, 0o644, 0o755, 0o700}[g.r.IntN(4)]}
		case k >= 96:
			return Op{Kind: "symlink", A: g.newName(g.pick(g.dirs)), B: "target-" + fmt.Sprint(g.r.IntN(5))}
		}
	}
}

// Step applies g's next operation to the reference directory ref and to
// target and, when it succeeded, records it in g's model. It returns the
// operation and an error when the two outcomes differ.
func (g *Gen) Step(ref string, target Target) (Op, error) {
	op := g.Next()
	werr := op.Apply(Dir(ref))
	gerr := op.Apply(target)
	if w, e := Errno(werr), Errno(gerr); w != e {
		return op, fmt.Errorf("%v: workspace says %v (%v), plain directory %v", op, e, gerr, werr)
	}
	if werr == nil {
		g.Done(op, ref)
	}
	return op, nil
}

// Done updates the model after op succeeded on the reference target,
// whose tree is at root.
func (g *Gen) Done(op Op, root string) {
	switch op.Kind {
	case "create", "link":
		p := op.A
		if op.Kind == "link" {
			p = op.B
		}
		g.addFile(p)
	case "unlink":
		g.files = remove(g.files, op.A)
	case "mkdir":
		g.dirs = insert(g.dirs, op.A)
	case "rmdir":
		g.dirs = remove(g.dirs, op.A)
	case "rename":
		if _, err := os.Lstat(filepath.Join(root, op.A)); err == nil {
			return // two names of one file: nothing happened
		}
		from, to := op.A, op.B
		if i, found := slices.BinarySearch(g.dirs, from); found {
			g.dirs = slices.Delete(g.dirs, i, i+1)
			g.dirs = remove(g.dirs, to) // an empty directory replaced
			g.dirs = insert(g.dirs, to)
			g.files = movePrefix(g.files, from+"/", to+"/")
			g.dirs = movePrefix(g.dirs, from+"/", to+"/")
			return
		}
		g.files = remove(g.files, from)
		g.addFile(to)
	}
}

func movePrefix(l []string, from, to string) []string {
	changed := false
	for i, s := range l {
		if strings.HasPrefix(s, from) {
			l[i] = to + s[len(from):]
			changed = true
		}
	}
	if changed {
		sort.Strings(l)
	}
	return l
}

func (g *Gen) addFile(p string) {
	if !slices.Contains(g.files, p) {
		g.files = insert(g.files, p)
	}
}

func insert(l []string, s string) []string {
	i, found := slices.BinarySearch(l, s)
	if found {
		return l
	}
	return slices.Insert(l, i, s)
}

func remove(l []string, s string) []string {
	i, found := slices.BinarySearch(l, s)
	if !found {
		return l
	}
	return slices.Delete(l, i, i+1)
}

// Scan lists the regular files and directories under root (relative).
func Scan(root string) (files, dirs []string) {
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			rel = ""
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, rel)
		case d.Type().IsRegular():
			files = append(files, rel)
		}
		return nil
	})
	sort.Strings(files)
	sort.Strings(dirs)
	return files, dirs
}

// Compare returns the differences between the trees at want and got: types,
// permission bits, sizes, contents, symlink targets, user xattrs and which
// paths are hard links of one another. Times and owners are not compared.
func Compare(want, got string) []string {
	a, errA := describe(want)
	b, errB := describe(got)
	var out []string
	if errA != nil || errB != nil {
		return []string{fmt.Sprintf("scan: %v %v", errA, errB)}
	}
	for p, x := range a {
		y, ok := b[p]
		if !ok {
			out = append(out, fmt.Sprintf("%q missing", p))
			continue
		}
		if x.desc != y.desc {
			out = append(out, fmt.Sprintf("%q: got %s, want %s", p, y.desc, x.desc))
		}
		if !bytes.Equal(x.content, y.content) {
			out = append(out, fmt.Sprintf("%q: content differs (%d vs %d bytes)", p, len(y.content), len(x.content)))
		}
		if x.group != y.group {
			out = append(out, fmt.Sprintf("%q: hard links %s, want %s", p, y.group, x.group))
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, fmt.Sprintf("%q unexpected", p))
		}
	}
	sort.Strings(out)
	return out
}

type info struct {
	desc    string
	content []byte
	group   string
}

// describe walks root relative to directory descriptors, so a tree of
// any depth is described (a host path past PATH_MAX is never formed).
func describe(root string) (map[string]*info, error) {
	out := map[string]*info{}
	byIno := map[uint64][]string{}
	var walk func(d dirfd.At, rel string) error
	walk = func(d dirfd.At, rel string) error {
		fd, err := d.OpenDir(unix.O_RDONLY)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		names, err := f.Readdirnames(-1)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		for _, name := range names {
			a, p := dirfd.At{Dir: fd, Name: name}, filepath.Join(rel, name)
			var st unix.Stat_t
			if err := a.Lstat(&st); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			x := &info{}
			typ := st.Mode & unix.S_IFMT
			x.desc = fmt.Sprintf("type=%o perm=%o", typ, st.Mode&07777)
			switch typ {
			case unix.S_IFREG:
				x.desc += fmt.Sprintf(" size=%d nlink=%d", st.Size, st.Nlink)
				if x.content, err = os.ReadFile(a.Proc()); err != nil {
					return err
				}
				if st.Nlink > 1 {
					byIno[st.Ino] = append(byIno[st.Ino], p)
				}
			case unix.S_IFLNK:
				t, err := a.Readlink()
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				x.desc += " target=" + t
			}
			if names, err := listUserXattrs(a.Proc()); err == nil && len(names) > 0 {
				x.desc += " xattrs=" + strings.Join(names, ",")
			}
			out[p] = x
			if typ == unix.S_IFDIR {
				if err := walk(a, p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := walk(dirfd.At{Dir: unix.AT_FDCWD, Name: root}, "")
	for _, paths := range byIno {
		sort.Strings(paths)
		g := strings.Join(paths, "+")
		for _, p := range paths {
			out[p].group = g
		}
	}
	return out, err
}

func listUserXattrs(p string) ([]string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if strings.HasPrefix(s, "user.") {
			v, _ := unix.Lgetxattr(p, s, buf[n:])
			names = append(names, fmt.Sprintf("%s=%q", s, buf[n:n+max(v, 0)]))
		}
	}
	sort.Strings(names)
	return names, nil
}
