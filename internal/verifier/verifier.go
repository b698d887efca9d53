package verifier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"layerfs.dev/layerfs/internal/cells"
)

// ErrMismatch is wrapped by every Problem: the end state differs from the
// expectation. Errors that do not wrap it are failures to look (an I/O
// error, a runner that could not start a sandbox).
var ErrMismatch = errors.New("end state mismatch")

// Runner runs a shell body inside the sandbox with the workspace root as the
// working directory, and returns its stdout and exit code. err is for a
// failure to run at all, not for a non-zero exit.
type Runner interface {
	Run(ctx context.Context, body string) (stdout string, exitCode int, err error)
}

// Problem is one difference between a workspace and its expectation.
type Problem struct {
	Path   string // slash-separated, relative to the workspace root
	Detail string
}

func (p *Problem) Error() string { return p.Path + ": " + p.Detail }

// Is makes every Problem match ErrMismatch.
func (p *Problem) Is(target error) bool { return target == ErrMismatch }

// Verify checks the workspace fsys against c's expectation; see Check.
func Verify(ctx context.Context, fsys fs.FS, c cells.Cell, r Runner) error {
	if c.Expect == nil {
		return fmt.Errorf("cell %s has no expectation", c.ID)
	}
	return Check(ctx, fsys, c.Expect(), r)
}

// Check compares the tree of fsys (the workspace root) with e and runs e's
// commands through r (which may be nil only when e has none). It returns nil
// or an errors.Join of every problem found, sorted by path, the in-sandbox
// commands last.
func Check(ctx context.Context, fsys fs.FS, e cells.Expectation, r Runner) error {
	v := newIndex(e)
	var problems []error
	add := func(err error) { problems = append(problems, err) }

	seen := map[string]fs.DirEntry{}
	walkErr := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if err != nil {
			add(fmt.Errorf("%s: %w", p, err))
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if p == "." {
			return nil
		}
		got := kindOf(d.Type())
		switch {
		case v.opaque[p]:
			seen[p] = d
			if got != cells.Dir {
				add(mismatch(p, "is a %s, want a directory", kindName(d.Type())))
				return nil
			}
			return fs.SkipDir
		case v.entries[p] != nil:
			seen[p] = d
			if want := v.entries[p].Kind; got != want {
				add(mismatch(p, "is a %s, want a %s", kindName(d.Type()), want))
				if d.IsDir() {
					return fs.SkipDir
				}
			}
			return nil
		case v.dirs[p]:
			seen[p] = d
			if got != cells.Dir {
				add(mismatch(p, "is a %s, want a directory", kindName(d.Type())))
			}
			return nil
		case v.absent[p]:
			add(mismatch(p, "still present (a %s), want it removed", kindName(d.Type())))
		default:
			add(mismatch(p, "unexpected %s", kindName(d.Type())))
		}
		if d.IsDir() {
			return fs.SkipDir // its contents are reported with it
		}
		return nil
	})
	if walkErr != nil {
		add(fmt.Errorf("walk workspace: %w", walkErr))
	}

	// Entries inside opaque directories are not walked; look them up.
	for _, en := range e.Entries {
		if _, ok := seen[en.Path]; ok || !v.underOpaque(en.Path) {
			continue
		}
		info, err := fs.Lstat(fsys, en.Path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // reported as missing below
		}
		if err != nil {
			add(fmt.Errorf("%s: %w", en.Path, err))
			seen[en.Path] = nil // looked at; not missing
			continue
		}
		got := kindOf(info.Mode().Type())
		if got != en.Kind {
			add(mismatch(en.Path, "is a %s, want a %s", kindName(info.Mode().Type()), en.Kind))
		}
		seen[en.Path] = fs.FileInfoToDirEntry(info)
	}

	add(missing(v, seen))

	for _, en := range e.Entries {
		d, ok := seen[en.Path]
		if !ok || d == nil || kindOf(d.Type()) != en.Kind {
			continue
		}
		if err := ctx.Err(); err != nil {
			add(err)
			break
		}
		switch en.Kind {
		case cells.File:
			add(checkFile(ctx, fsys, en, d))
		case cells.Symlink:
			add(checkLink(fsys, en))
		}
	}
	problems = sortByPath(problems)

	for _, c := range e.Commands {
		add(runCommand(ctx, r, c))
	}
	return errors.Join(problems...)
}

// index is an Expectation keyed by path.
type index struct {
	entries map[string]*cells.Entry
	dirs    map[string]bool // parents implied by entries and opaque paths
	opaque  map[string]bool
	absent  map[string]bool
}

func newIndex(e cells.Expectation) *index {
	v := &index{entries: map[string]*cells.Entry{}, dirs: map[string]bool{}, opaque: map[string]bool{}, absent: map[string]bool{}}
	parents := func(p string) {
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			v.dirs[d] = true
		}
	}
	for i := range e.Entries {
		en := &e.Entries[i]
		v.entries[en.Path] = en
		parents(en.Path)
	}
	for _, p := range e.Opaque {
		v.opaque[p] = true
		parents(p)
	}
	for _, p := range e.Absent {
		v.absent[p] = true
	}
	return v
}

func (v *index) underOpaque(p string) bool {
	for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
		if v.opaque[d] {
			return true
		}
	}
	return false
}

// missing reports expected paths that were not seen. A missing directory is
// reported once, with the number of expected entries under it.
func missing(v *index, seen map[string]fs.DirEntry) error {
	var paths []string
	for p := range v.entries {
		if _, ok := seen[p]; !ok {
			paths = append(paths, p)
		}
	}
	for p := range v.dirs {
		// Directories inside opaque ones are not walked; the entries below
		// them are looked up one by one and reported if missing.
		if _, ok := seen[p]; !ok && !v.underOpaque(p) {
			paths = append(paths, p)
		}
	}
	for p := range v.opaque {
		if _, ok := seen[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var errs []error
	var top string // the last reported missing directory
	under := 0
	flush := func() {
		if top == "" {
			return
		}
		if under > 0 {
			errs = append(errs, mismatch(top, "missing (and the %d expected entries under it)", under))
		} else {
			errs = append(errs, mismatch(top, "missing"))
		}
		top, under = "", 0
	}
	for _, p := range paths {
		if top != "" && strings.HasPrefix(p, top+"/") {
			under++
			continue
		}
		flush()
		if v.dirs[p] || v.opaque[p] {
			top = p
			continue
		}
		errs = append(errs, mismatch(p, "missing"))
	}
	flush()
	return errors.Join(errs...)
}

func checkFile(ctx context.Context, fsys fs.FS, en cells.Entry, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return fmt.Errorf("%s: stat: %w", en.Path, err)
	}
	var errs []error
	if en.Exec != cells.ExecAny {
		isExec := info.Mode().Perm()&0o100 != 0
		if want := en.Exec == cells.ExecSet; isExec != want {
			errs = append(errs, mismatch(en.Path, "mode %v, want the owner execute bit %s", info.Mode().Perm(), map[bool]string{true: "set", false: "clear"}[want]))
		}
	}
	errs = append(errs, checkContent(ctx, fsys, en.Path, en.Content, info.Size()))
	return errors.Join(errs...)
}

const shortContent = 64 // contents up to this long are quoted in messages

func checkContent(ctx context.Context, fsys fs.FS, p string, c cells.Content, size int64) error {
	switch c.Match {
	case cells.MatchAny:
		if c.Size >= 0 && size != c.Size {
			return mismatch(p, "size %d, want %d", size, c.Size)
		}
		return nil
	case cells.MatchBytes:
		got, err := readAll(fsys, p, int64(len(c.Data))+1)
		if err != nil {
			return err
		}
		if bytes.Equal(got, c.Data) {
			if int64(len(got)) != size {
				return mismatch(p, "stat says size %d, read %d bytes", size, len(got))
			}
			return nil
		}
		if len(got) <= shortContent && len(c.Data) <= shortContent {
			return mismatch(p, "content %q, want %q", got, c.Data)
		}
		if size != c.Size {
			return mismatch(p, "size %d, want %d", size, c.Size)
		}
		i := firstDiff(got, c.Data)
		return mismatch(p, "content differs at byte %d: %q, want %q", i, window(got, i), window(c.Data, i))
	case cells.MatchZeros, cells.MatchHash:
		if size != c.Size {
			return mismatch(p, "size %d, want %d", size, c.Size)
		}
		return checkStream(ctx, fsys, p, c, size)
	}
	return fmt.Errorf("%s: unknown content match %d", p, c.Match)
}

// checkStream reads p once, in 1 MiB pieces, checking zeros and hashing.
func checkStream(ctx context.Context, fsys fs.FS, p string, c cells.Content, size int64) error {
	f, err := fsys.Open(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close() // read-only
	zs := &zeroScan{ctx: ctx, at: -1}
	var r io.Reader = f
	if c.Match == cells.MatchZeros {
		r = io.TeeReader(f, zs)
	}
	var errs []error
	needHash := c.Match == cells.MatchHash || !c.Not.IsZero()
	var got cells.Hash
	var n int64
	if needHash {
		got, n, err = cells.HashOf(r)
	} else {
		n, err = io.CopyBuffer(io.Discard, r, make([]byte, 1<<20))
	}
	if err != nil {
		return fmt.Errorf("%s: read: %w", p, err)
	}
	if n != size {
		errs = append(errs, mismatch(p, "stat says size %d, read %d bytes", size, n))
	}
	if c.Match == cells.MatchZeros && zs.at >= 0 {
		errs = append(errs, mismatch(p, "byte %d is 0x%02x, want %s of zeros", zs.at, zs.b, human(c.Size)))
	}
	if c.Match == cells.MatchHash && got != c.Hash {
		label := c.Label
		if label == "" {
			label = "the expected content"
		}
		errs = append(errs, mismatch(p, "content blake3 %s, want %s (%s)", got.String()[:16], c.Hash.String()[:16], label))
	}
	if !c.Not.IsZero() && got == c.Not {
		errs = append(errs, mismatch(p, "still holds the content it must no longer have (blake3 %s)", got.String()[:16]))
	}
	return errors.Join(errs...)
}

// zeroScan records the first non-zero byte written to it.
type zeroScan struct {
	ctx context.Context
	off int64
	at  int64 // offset of the first non-zero byte; -1 while none
	b   byte
}

func (z *zeroScan) Write(p []byte) (int, error) {
	if err := z.ctx.Err(); err != nil {
		return 0, err
	}
	if z.at < 0 {
		for i, b := range p {
			if b != 0 {
				z.at, z.b = z.off+int64(i), b
				break
			}
		}
	}
	z.off += int64(len(p))
	return len(p), nil
}

func checkLink(fsys fs.FS, en cells.Entry) error {
	got, err := fs.ReadLink(fsys, en.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", en.Path, err)
	}
	if got != en.Target {
		return mismatch(en.Path, "link to %q, want %q", got, en.Target)
	}
	return nil
}

func runCommand(ctx context.Context, r Runner, c cells.Command) error {
	name := c.Name
	if name == "" {
		name = c.Body
	}
	if r == nil {
		return fmt.Errorf("%s: cannot run `%s`: no sandbox runner", c.Path, name)
	}
	out, code, err := r.Run(ctx, c.Body)
	if err != nil {
		return fmt.Errorf("%s: run `%s`: %w", c.Path, name, err)
	}
	if code != c.Exit {
		return mismatch(c.Path, "`%s` exited %d, want %d (stdout %q)", name, code, c.Exit, excerpt(out))
	}
	if got, want := strings.TrimSpace(out), strings.TrimSpace(c.Stdout); got != want {
		return mismatch(c.Path, "`%s` printed %q, want %q", name, excerpt(got), excerpt(want))
	}
	return nil
}

func readAll(fsys fs.FS, p string, limit int64) ([]byte, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close() // read-only
	b, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", p, err)
	}
	return b, nil
}

func mismatch(p, format string, args ...any) error {
	return &Problem{Path: p, Detail: fmt.Sprintf(format, args...)}
}

// sortByPath orders problems by the path their message starts with.
func sortByPath(errs []error) []error {
	var flat []error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			flat = append(flat, sortByPath(j.Unwrap())...)
			continue
		}
		flat = append(flat, err)
	}
	sort.SliceStable(flat, func(i, j int) bool { return flat[i].Error() < flat[j].Error() })
	return flat
}

func kindOf(m fs.FileMode) cells.Kind {
	switch m & fs.ModeType {
	case 0:
		return cells.File
	case fs.ModeDir:
		return cells.Dir
	case fs.ModeSymlink:
		return cells.Symlink
	}
	return 0
}

func kindName(m fs.FileMode) string {
	switch t := m & fs.ModeType; {
	case t == 0:
		return "file"
	case t&fs.ModeDir != 0:
		return "directory"
	case t&fs.ModeSymlink != 0:
		return "symlink"
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// window is up to 16 bytes of b from i, for messages.
func window(b []byte, i int) []byte {
	if i >= len(b) {
		return nil
	}
	return b[i:min(len(b), i+16)]
}

func excerpt(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

func human(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
