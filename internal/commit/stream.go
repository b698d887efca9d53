package commit

import (
	"context"
	"errors"
	"fmt"
	"io"

	"layerfs.dev/layerfs/internal/store"
)

// ContentWriter stores file contents read from streams (a tar's entries),
// cut exactly as a capture cuts a file of the same bytes, so a content
// imported from an archive and the same bytes captured from a workspace
// are one object. Where the Writer fills the Store's cache
// (store.Batch), each content is placed there as it is read. A
// ContentWriter is not safe for concurrent use.
type ContentWriter struct {
	ch    *Chunker
	w     Writer
	fill  *store.CacheFill
	buf   []byte
	stats Stats
}

// NewContentWriter returns a ContentWriter into w.
func NewContentWriter(w Writer, opts *Options) (*ContentWriter, error) {
	ch, err := opts.chunker()
	if err != nil {
		return nil, err
	}
	c := &ContentWriter{ch: ch, w: w, buf: make([]byte, 2<<20+ch.p.Max)}
	if f, ok := w.(interface{ CacheFill() *store.CacheFill }); ok {
		c.fill = f.CacheFill()
	}
	return c, nil
}

// Stats counts what was stored so far (Files, Bytes, Chunks, NewChunks,
// NewBytes).
func (c *ContentWriter) Stats() Stats { return c.stats }

// LinkValue is the Link of a group of hard links whose content is obj and
// whose first path (in the order the group was found) is first: a
// function of both, never 0, as Build derives it.
func LinkValue(obj store.ID, first string) uint64 { return linkValue(obj, first) }

// Store reads exactly size bytes from r and stores them as one file's
// content; it returns the object and its kind (ZeroID and 0 for no
// bytes). A stream that ends early fails with io.ErrUnexpectedEOF.
func (c *ContentWriter) Store(ctx context.Context, r io.Reader, size int64) (store.ID, store.Kind, error) {
	if size < 0 {
		return store.ZeroID, 0, fmt.Errorf("%w: content of negative size %d", ErrInvalidChange, size)
	}
	c.stats.Files++
	c.stats.Bytes += size
	if size == 0 {
		return store.ZeroID, 0, nil
	}
	if size <= int64(c.ch.p.Max) {
		data := c.buf[:size]
		if err := readFull(r, data); err != nil {
			return store.ZeroID, 0, err
		}
		id := store.Hash(store.KindChunk, data)
		added, err := c.put(id, data)
		if err != nil {
			return store.ZeroID, 0, err
		}
		c.fill.Put(id, data, added)
		return id, store.KindChunk, nil
	}
	fw := c.fill.Start()
	m, err := c.chunked(ctx, r, size, fw)
	if err != nil {
		fw.Abort()
		return store.ZeroID, 0, err
	}
	id, err := c.w.PutManifest(m)
	if err != nil {
		fw.Abort()
		return store.ZeroID, 0, err
	}
	fw.Place(id, size)
	return id, store.KindManifest, nil
}

// chunked cuts a content larger than one chunk into a manifest, runs of
// zeros of a page or more becoming holes, as chunkRange does.
func (c *ContentWriter) chunked(ctx context.Context, r io.Reader, size int64, fw *store.FillWriter) (*store.Manifest, error) {
	m := &store.Manifest{Size: size}
	left, carry, lastHole := size, 0, -1
	for left > 0 || carry > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := int(min(int64(len(c.buf)-carry), left))
		if err := readFull(r, c.buf[carry:carry+n]); err != nil {
			return nil, err
		}
		left -= int64(n)
		data := c.buf[:carry+n]
		for len(data) > 0 {
			if left > 0 && len(data) < c.ch.p.Max {
				break
			}
			k, zero := c.ch.cut(data)
			if isHole(data[:k], zero) {
				addHole(m, &lastHole, k)
				fw.Skip(int64(k))
			} else {
				fw.Write(data[:k])
				id := store.Hash(store.KindChunk, data[:k])
				if _, err := c.put(id, data[:k]); err != nil {
					return nil, err
				}
				m.Extents = append(m.Extents, store.Extent{Chunk: id, Length: int64(k)})
			}
			data = data[k:]
		}
		carry = copy(c.buf, data)
	}
	return m, nil
}

func (c *ContentWriter) put(id store.ID, data []byte) (bool, error) {
	added, err := c.w.PutChunk(id, data)
	if err != nil {
		return false, err
	}
	c.stats.Chunks++
	if added {
		c.stats.NewChunks++
		c.stats.NewBytes += int64(len(data))
	}
	return added, nil
}

// readFull fills b from r; a stream that ends first is io.ErrUnexpectedEOF.
func readFull(r io.Reader, b []byte) error {
	_, err := io.ReadFull(r, b)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}
