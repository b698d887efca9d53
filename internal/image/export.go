package image

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
)

// LayerTar writes the difference from the tree from to the tree to
// (ZeroID: the empty tree) as an OCI layer to w: what was added or changed
// as entries, in path order, what went as whiteouts, hard links of to
// that the layer writes twice as links. The bytes are a function of the
// two trees, so a layer's diff ID is too. It returns the bytes written.
func LayerTar(ctx context.Context, r commit.Reader, from, to store.ID, w io.Writer) (int64, error) {
	diffs, _, err := commit.Diff(ctx, r, from, to, "", 0)
	if err != nil {
		return 0, err
	}
	cw := &countingWriter{w: w}
	tw := tar.NewWriter(cw)
	written, err := linkTargets(ctx, r, to, diffs)
	if err != nil {
		return 0, err
	}
	gone := "" // the last path removed: what is below it goes with it
	for _, d := range diffs {
		if gone != "" && strings.HasPrefix(d.Path, gone+"/") && d.Kind == commit.Removed {
			continue
		}
		if d.Kind == commit.Removed {
			gone = d.Path
			dir, name := splitDir(d.Path)
			if err := tw.WriteHeader(&tar.Header{Name: dir + whiteoutPrefix + name, Typeflag: tar.TypeReg, Format: tar.FormatPAX,
				ModTime: time.Unix(0, 0)}); err != nil {
				return cw.n, err
			}
			continue
		}
		if d.Kind == commit.TypeChanged && d.Old.Type == store.TypeDir {
			gone = d.Path
		}
		if err := writeEntry(ctx, r, tw, d.Path, d.New, written); err != nil {
			return cw.n, fmt.Errorf("layer tar: %s: %w", d.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

// DiffID is LayerTar's digest and length, without keeping the tar.
func DiffID(ctx context.Context, r commit.Reader, from, to store.ID) (string, int64, error) {
	h := sha256.New()
	n, err := LayerTar(ctx, r, from, to, h)
	if err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

// linkTargets maps each link group that a difference of diffs writes to
// the path its other members link to: the group's first path in to, in
// Diff's order, which the layer writes first or the base holds unchanged.
func linkTargets(ctx context.Context, r commit.Reader, to store.ID, diffs []commit.Difference) (map[uint64]string, error) {
	want := map[uint64]bool{}
	for _, d := range diffs {
		if d.New != nil && d.New.Type == store.TypeFile && d.New.Link != 0 {
			want[d.New.Link] = true
		}
	}
	out := map[uint64]string{}
	if len(want) == 0 {
		return out, nil
	}
	var walk func(id store.ID, dir string) error
	walk = func(id store.ID, dir string) error {
		if id.IsZero() || len(out) == len(want) {
			return nil
		}
		t, err := r.Tree(ctx, id)
		if err != nil {
			return err
		}
		for i := range t.Entries {
			e := &t.Entries[i]
			p := dir + e.Name
			if e.Type == store.TypeDir {
				if err := walk(e.Object, p+"/"); err != nil {
					return err
				}
				continue
			}
			if _, seen := out[e.Link]; want[e.Link] && !seen {
				out[e.Link] = p
			}
		}
		return nil
	}
	return out, walk(to, "")
}

func splitDir(p string) (dir, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i+1], p[i+1:]
	}
	return "", p
}

// writeEntry writes one entry of the new tree.
func writeEntry(ctx context.Context, r commit.Reader, tw *tar.Writer, p string, e *store.Entry, written map[uint64]string) error {
	h := &tar.Header{Name: p, Mode: int64(e.Mode & 0o7777), Uid: int(e.UID), Gid: int(e.GID),
		ModTime: time.Unix(0, e.MtimeNs), Format: tar.FormatPAX}
	if len(e.Xattrs) > 0 {
		h.PAXRecords = map[string]string{}
		for _, x := range e.Xattrs {
			if strings.HasPrefix(x.Name, "trusted.overlay.") {
				continue // an overlay upper's own
			}
			h.PAXRecords["SCHILY.xattr."+x.Name] = string(x.Value)
		}
	}
	switch e.Type {
	case store.TypeDir:
		h.Typeflag, h.Name = tar.TypeDir, p+"/"
	case store.TypeSymlink:
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.Target
	case store.TypeFIFO:
		h.Typeflag = tar.TypeFifo
	case store.TypeFile:
		if first, ok := written[e.Link]; ok && e.Link != 0 && first != p {
			h.Typeflag, h.Linkname = tar.TypeLink, first
			return tw.WriteHeader(h)
		}
		h.Typeflag, h.Size = tar.TypeReg, e.Size
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		return writeContent(ctx, r, e, tw)
	default:
		return fmt.Errorf("%w: a %s cannot be part of an image", ErrBadLayer, e.Type)
	}
	return tw.WriteHeader(h)
}

// writeContent writes a file entry's bytes, a chunk at a time.
func writeContent(ctx context.Context, r commit.Reader, e *store.Entry, w io.Writer) error {
	switch {
	case e.Object.IsZero():
		return nil
	case e.ObjectKind == store.KindChunk:
		b, err := r.Chunk(ctx, e.Object)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	m, err := r.Manifest(ctx, e.Object)
	if err != nil {
		return err
	}
	var zeros []byte
	for _, x := range m.Extents {
		if x.Chunk.IsZero() {
			if int64(len(zeros)) < min(x.Length, 1<<20) {
				zeros = make([]byte, min(x.Length, 1<<20))
			}
			for left := x.Length; left > 0; {
				n := min(left, int64(len(zeros)))
				if _, err := w.Write(zeros[:n]); err != nil {
					return err
				}
				left -= n
			}
			continue
		}
		b, err := r.Chunk(ctx, x.Chunk)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
