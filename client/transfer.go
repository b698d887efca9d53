package client

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// Upload copies localPath (a file, a symlink or a directory tree) to wsPath
// in the workspace: a file becomes the file wsPath, a directory's contents
// go into the directory wsPath (created when missing), like cp -r SRC/. DST.
func (ws *Workspace) Upload(ctx context.Context, localPath, wsPath string) error {
	fi, err := os.Lstat(localPath)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	if fi.Mode().IsRegular() {
		f, err := os.Open(localPath)
		if err != nil {
			return fmt.Errorf("upload: %w", err)
		}
		defer f.Close()
		return ws.WriteFrom(ctx, wsPath, f, fi.Size(), fi.Mode().Perm())
	}
	dir, tarRoot := wsPath, localPath
	if !fi.IsDir() {
		// A symlink travels in a tar of its parent with its own name.
		dir = path.Dir(wsPath)
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeTree(pw, tarRoot, fi, path.Base(wsPath)))
	}()
	resp, err := ws.send(ctx, call{method: http.MethodPut, path: ws.path("/tar"),
		query: url.Values{"path": {dir}}, body: pr, size: -1, ctype: wire.MediaTar})
	pr.CloseWithError(errors.New("upload finished"))
	if err != nil {
		return fmt.Errorf("upload %s: %w", localPath, err)
	}
	return resp.Body.Close()
}

// writeTree writes root as a tar stream: a directory's entries relative to
// it, anything else as the single entry name.
func writeTree(w io.Writer, root string, fi fs.FileInfo, name string) error {
	tw := tar.NewWriter(w)
	if !fi.IsDir() {
		if err := addEntry(tw, root, fi, name); err != nil {
			return err
		}
		return tw.Close()
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return addEntry(tw, p, info, filepath.ToSlash(rel))
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func addEntry(tw *tar.Writer, p string, fi fs.FileInfo, name string) error {
	var link string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(p)
		if err != nil {
			return err
		}
		link = t
	case fi.IsDir(), fi.Mode().IsRegular():
	default:
		return fmt.Errorf("upload %s: only files, directories and symlinks can be uploaded", p)
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	h.Name, h.Uname, h.Gname, h.Uid, h.Gid = name, "", "", 0, 0
	h.Format = tar.FormatPAX
	if fi.IsDir() {
		h.Name += "/"
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(tw, f, fi.Size())
	return err
}

// Download copies wsPath (a file, a symlink or a directory tree) from the
// workspace to localPath, like cp -r: when localPath is an existing
// directory the copy goes inside it under wsPath's base name (the root
// "." merges into it). Nothing is written outside localPath, whatever the
// stream holds.
func (ws *Workspace) Download(ctx context.Context, wsPath, localPath string) error {
	resp, err := ws.send(ctx, call{method: http.MethodGet, path: ws.path("/tar"),
		query: url.Values{"path": {wsPath}}, size: -1, gzip: ws.c.gzip})
	if err != nil {
		return fmt.Errorf("download %s: %w", wsPath, err)
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return fmt.Errorf("download %s: %w", wsPath, err)
		}
		defer zr.Close()
		body = zr
	}
	if err := extract(body, localPath); err != nil {
		return fmt.Errorf("download %s to %s: %w", wsPath, localPath, err)
	}
	return nil
}

// ErrUnsafeEntry is wrapped by Download when the stream holds an entry that
// would land outside the destination.
var ErrUnsafeEntry = errclass.New(errclass.Invalid, "unsafe tar entry")

// extract writes a tar stream whose entries all sit below one top name (a
// file, or a directory and its tree) to dest.
func extract(r io.Reader, dest string) error {
	tr := tar.NewReader(r)
	var (
		m    mapping
		root *os.Root
	)
	defer func() {
		if root != nil {
			root.Close()
		}
	}()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			if root == nil {
				return errors.New("empty archive")
			}
			return nil
		}
		if err != nil {
			return err
		}
		name, err := entryName(h.Name)
		if err != nil {
			return err
		}
		if root == nil {
			m.from = name
			root, m.to, err = openDest(dest, name, h.Typeflag == tar.TypeDir)
			if err != nil {
				return err
			}
		}
		rel, ok := m.below(name)
		if !ok {
			return fmt.Errorf("%w: %q is not below %q", ErrUnsafeEntry, h.Name, m.from)
		}
		if err := writeEntry(root, tr, h, rel, m); err != nil {
			return err
		}
	}
}

// mapping places the archive's top entry (from) at to inside the root;
// every other entry must lie below from.
type mapping struct{ from, to string }

// below maps an entry name to its path inside the root.
func (m mapping) below(name string) (string, bool) {
	var rest string
	switch {
	case name == m.from:
	case m.from == ".":
		rest = name
	case strings.HasPrefix(name, m.from+"/"):
		rest = name[len(m.from)+1:]
	default:
		return "", false
	}
	return path.Join(m.to, rest), true
}

// entryName validates a tar name and cleans it.
func entryName(n string) (string, error) {
	if n == "" || strings.ContainsRune(n, 0) {
		return "", fmt.Errorf("%w: empty name or NUL in %q", ErrUnsafeEntry, n)
	}
	if strings.HasPrefix(n, "/") {
		return "", fmt.Errorf("%w: absolute name %q", ErrUnsafeEntry, n)
	}
	for s := range strings.SplitSeq(n, "/") {
		if s == ".." {
			return "", fmt.Errorf("%w: %q contains \"..\"", ErrUnsafeEntry, n)
		}
	}
	return path.Clean(n), nil
}

// openDest decides where the copy goes and opens the directory that will
// hold it as an os.Root. It returns the path of the top entry inside it.
func openDest(dest, top string, isDir bool) (*os.Root, string, error) {
	fi, err := os.Stat(dest)
	switch {
	case err == nil && fi.IsDir() && top == ".":
		r, err := os.OpenRoot(dest)
		return r, ".", err
	case err == nil && fi.IsDir():
		r, err := os.OpenRoot(dest)
		return r, path.Base(top), err
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, "", err
	}
	// dest names the copy itself.
	if isDir {
		if err := os.MkdirAll(dest, 0o755); err != nil {
			return nil, "", err
		}
		r, err := os.OpenRoot(dest)
		return r, ".", err
	}
	r, err := os.OpenRoot(filepath.Dir(dest))
	return r, filepath.Base(dest), err
}

func writeEntry(root *os.Root, tr *tar.Reader, h *tar.Header, rel string, m mapping) error {
	mode := fs.FileMode(h.Mode) & fs.ModePerm
	switch h.Typeflag {
	case tar.TypeDir:
		if rel == "." {
			return nil
		}
		if err := root.MkdirAll(rel, 0o755); err != nil {
			return err
		}
		return root.Chmod(rel, mode|0o700)
	case tar.TypeReg:
		if err := mkParent(root, rel); err != nil {
			return err
		}
		// A symlink in the way is replaced, never followed.
		if fi, err := root.Lstat(rel); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			if err := root.Remove(rel); err != nil {
				return err
			}
		}
		f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := root.Chmod(rel, mode); err != nil {
			return err
		}
		return root.Chtimes(rel, h.ModTime, h.ModTime)
	case tar.TypeSymlink:
		t := h.Linkname
		if t == "" || strings.ContainsRune(t, 0) || strings.HasPrefix(t, "/") {
			return fmt.Errorf("%w: symlink %q -> %q leaves the destination", ErrUnsafeEntry, h.Name, t)
		}
		if j := path.Join(path.Dir(rel), t); j == ".." || strings.HasPrefix(j, "../") {
			return fmt.Errorf("%w: symlink %q -> %q leaves the destination", ErrUnsafeEntry, h.Name, t)
		}
		if err := mkParent(root, rel); err != nil {
			return err
		}
		if err := removeNonDir(root, rel); err != nil {
			return err
		}
		return root.Symlink(t, rel)
	case tar.TypeLink:
		ln, err := entryName(h.Linkname)
		if err != nil {
			return err
		}
		src, ok := m.below(ln)
		if !ok {
			return fmt.Errorf("%w: hard link %q -> %q leaves the copy", ErrUnsafeEntry, h.Name, h.Linkname)
		}
		if err := mkParent(root, rel); err != nil {
			return err
		}
		if err := removeNonDir(root, rel); err != nil {
			return err
		}
		return root.Link(src, rel)
	case tar.TypeXGlobalHeader:
		return nil
	}
	return fmt.Errorf("%w: %q has type %q", ErrUnsafeEntry, h.Name, h.Typeflag)
}

func mkParent(root *os.Root, rel string) error {
	if d := path.Dir(rel); d != "." {
		return root.MkdirAll(d, 0o755)
	}
	return nil
}

func removeNonDir(root *os.Root, rel string) error {
	fi, err := root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s: a directory is in the way", rel)
	}
	return root.Remove(rel)
}
