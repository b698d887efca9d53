package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/dockerfile"
	"layerfs.dev/layerfs/internal/image"
	"layerfs.dev/layerfs/wire/errclass"
)

// archiveSuffixes name the local archives Docker's ADD would extract.
var archiveSuffixes = []string{".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst"}

// copy applies COPY or ADD of files of the build context: the sources
// are staged (owned by --chown, 0:0 by default; --chmod applied) in a
// directory of the daemon's, hashed for the step's cache key, and merged
// into the image at the destination as Docker merges them.
func (bd *build) copy(ctx context.Context, in dockerfile.Instruction) (bool, error) {
	if bd.context == "" {
		return false, fmt.Errorf("%w: %s needs a build context", errclass.Invalid, in.Cmd)
	}
	words := make([]string, len(in.Args))
	for i, a := range in.Args {
		w, err := bd.expand(a)
		if err != nil {
			return false, err
		}
		words[i] = w
	}
	srcs, dst := words[:len(words)-1], words[len(words)-1]
	toDir := strings.HasSuffix(dst, "/") || len(srcs) > 1
	if !path.IsAbs(dst) {
		dst = path.Join(bd.dir(), dst)
	}
	dst = strings.TrimPrefix(path.Clean(dst), "/")
	st := &stager{h: sha256.New(), mode: -1}
	if ch := in.Flags["chown"]; ch != "" {
		u, err := image.ResolveUser(ctx, bd.e.db, bd.b.Root(), ch)
		if err != nil {
			return false, fmt.Errorf("--chown: %w", err)
		}
		st.uid, st.gid = u.UID, u.GID
	}
	if cm := in.Flags["chmod"]; cm != "" {
		m, err := strconv.ParseUint(cm, 8, 32)
		if err != nil || m > 0o7777 {
			return false, fmt.Errorf("%w: --chmod %q: want octal permissions", errclass.Invalid, cm)
		}
		st.mode = int(m)
	}
	tmp, err := bd.e.imageTemp()
	if err != nil {
		return false, err
	}
	if st.dir, err = os.MkdirTemp(tmp, "copy-"); err != nil {
		return false, err
	}
	defer os.RemoveAll(st.dir)
	matches, err := bd.sources(in, srcs)
	if err != nil {
		return false, err
	}
	if len(matches) > 1 {
		toDir = true
	}
	for _, m := range matches {
		if err := st.stage(m, toDir); err != nil {
			return false, fmt.Errorf("%s %s: %w", in.Cmd, m.rel, err)
		}
	}
	changes, err := bd.copyChanges(ctx, st.dir, dst, toDir)
	if err != nil {
		return false, err
	}
	key := bd.key(in.Cmd, in.Flags["chown"], in.Flags["chmod"], dst, strconv.FormatBool(toDir), hex.EncodeToString(st.h.Sum(nil)))
	return bd.layer(ctx, key, in.Original, changes)
}

// source is one file or directory of the context a COPY names.
type source struct{ abs, rel string }

// sources expands the patterns of a COPY in the build context: every
// match must be beneath it, and so must what it resolves to (a symlink
// on the way out of the context is refused; a matched symlink itself is
// copied as a symlink).
func (bd *build) sources(in dockerfile.Instruction, patterns []string) ([]source, error) {
	ctxReal, err := filepath.EvalSymlinks(bd.context)
	if err != nil {
		return nil, err
	}
	var out []source
	for _, p := range patterns {
		if in.Cmd == "ADD" {
			for _, suf := range archiveSuffixes {
				if strings.HasSuffix(p, suf) {
					return nil, fmt.Errorf("%w: ADD %s: a local archive, which Docker would extract, is not supported: COPY it and RUN tar", dockerfile.ErrUnsupported, p)
				}
			}
		}
		matches, err := filepath.Glob(filepath.Join(ctxReal, filepath.FromSlash(p)))
		if err != nil {
			return nil, fmt.Errorf("%w: %s %q: %w", errclass.Invalid, in.Cmd, p, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("%w: %s %q: no such file in the build context %s", ErrBuildStep, in.Cmd, p, bd.context)
		}
		for _, m := range matches {
			parent, err := filepath.EvalSymlinks(filepath.Dir(m))
			if err != nil {
				return nil, err
			}
			rel, err := filepath.Rel(ctxReal, filepath.Join(parent, filepath.Base(m)))
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				return nil, fmt.Errorf("%w: %s %q leads out of the build context", errclass.Invalid, in.Cmd, p)
			}
			out = append(out, source{abs: filepath.Join(parent, filepath.Base(m)), rel: rel})
		}
	}
	return out, nil
}

// stager copies sources into dir, owned by uid:gid, with mode (or their
// own when < 0), and hashes what it copies: names, types, modes, owners,
// link targets and contents.
type stager struct {
	dir      string
	uid, gid int
	mode     int
	h        hash.Hash
}

// stage copies m: a directory's contents into the staging root, a file
// (or symlink) as its base name when toDir, else as the one entry "f".
func (st *stager) stage(m source, toDir bool) error {
	fi, err := os.Lstat(m.abs)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return filepath.WalkDir(m.abs, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(m.abs, p)
			if rel == "." {
				return nil
			}
			return st.entry(p, rel)
		})
	}
	name := "f"
	if toDir {
		name = filepath.Base(m.abs)
	}
	return st.entry(m.abs, name)
}

// entry copies the file, directory or symlink at p to rel in the staging
// root.
func (st *stager) entry(p, rel string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	dst := filepath.Join(st.dir, rel)
	mode := int(fi.Mode().Perm())
	if st.mode >= 0 {
		mode = st.mode
	}
	fmt.Fprintf(st.h, "%s\x00%v\x00%o\x00%d:%d\x00", rel, fi.Mode().Type(), mode, st.uid, st.gid)
	switch {
	case fi.IsDir():
		err = os.MkdirAll(dst, 0o755)
	case fi.Mode()&fs.ModeSymlink != 0:
		var target string
		if target, err = os.Readlink(p); err == nil {
			st.h.Write([]byte(target))
			err = os.Symlink(target, dst)
		}
	case fi.Mode().IsRegular():
		err = st.file(p, dst)
	default:
		return fmt.Errorf("%w: %s is not a file, a directory or a symlink", errclass.Invalid, rel)
	}
	if err != nil {
		return err
	}
	if err := os.Lchown(dst, st.uid, st.gid); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		if err := os.Chmod(dst, fs.FileMode(mode)&fs.ModePerm|unixBits(mode)); err != nil {
			return err
		}
	}
	t := unix.NsecToTimespec(fi.ModTime().UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
}

// unixBits are the setuid, setgid and sticky bits of mode as fs bits.
func unixBits(mode int) fs.FileMode {
	var m fs.FileMode
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// file copies a regular file's bytes, hashing them.
func (st *stager) file(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.MultiWriter(out, st.h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyChanges merges the staging directory into the image at dst: every
// directory non-recursively (its children in the image stay), every
// other entry whole; dst's missing parents are made first. Copying to a
// file path, the staged "f" becomes dst.
func (bd *build) copyChanges(ctx context.Context, staged, dst string, toDir bool) ([]commit.Change, error) {
	if !toDir {
		if _, err := os.Lstat(filepath.Join(staged, "f")); err == nil {
			changes, err := image.MissingDirs(ctx, bd.e.db, bd.b.Root(), path.Dir("/" + dst)[1:], 0, 0)
			if err != nil {
				return nil, err
			}
			return append(changes, commit.Change{Path: dst, Source: "f", Root: staged, Recursive: true}), nil
		}
	}
	changes, err := image.MissingDirs(ctx, bd.e.db, bd.b.Root(), dst, 0, 0)
	if err != nil {
		return nil, err
	}
	err = filepath.WalkDir(staged, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == staged {
			return err
		}
		rel, _ := filepath.Rel(staged, p)
		changes = append(changes, commit.Change{Path: path.Join(dst, filepath.ToSlash(rel)), Source: filepath.ToSlash(rel),
			Root: staged, Recursive: !d.IsDir()})
		return nil
	})
	return changes, err
}
