package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"layerfs.dev/layerfs/internal/s3bucket"
	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/internal/store/pack"
)

// Problem is one thing Fsck found wrong.
type Problem struct {
	// Kind is "integrity", "foreign-key", "missing", "hash", "decode",
	// "size", "range" or "pack".
	Kind   string `json:"kind"`
	Object ID     `json:"object"` // the object concerned, zero for store-wide problems
	Where  string `json:"where"`  // the table, ref or pack file
	Detail string `json:"detail"`
}

func (p Problem) String() string {
	if p.Object.IsZero() {
		return p.Kind + ": " + p.Where + ": " + p.Detail
	}
	return p.Kind + ": " + p.Object.String() + " in " + p.Where + ": " + p.Detail
}

// FsckReport is the result of Fsck.
type FsckReport struct {
	Refs     int64     `json:"refs"`
	Objects  int64     `json:"objects"`
	Chunks   int64     `json:"chunks"`
	Bytes    int64     `json:"bytes"` // chunk payload bytes read and verified
	Packs    int       `json:"packs"`
	Problems []Problem `json:"problems"`
}

// OK reports whether no problem was found.
func (r *FsckReport) OK() bool { return len(r.Problems) == 0 }

// Err returns nil for a clean report, else an error wrapping ErrCorrupt
// that names the first problems.
func (r *FsckReport) Err() error {
	if r.OK() {
		return nil
	}
	var b bytes.Buffer
	for i, p := range r.Problems {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(r.Problems)-3)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return fmt.Errorf("fsck found %d problems: %s: %w", len(r.Problems), b.String(), ErrCorrupt)
}

func (r *FsckReport) add(kind string, id ID, where, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Kind: kind, Object: id, Where: where, Detail: fmt.Sprintf(format, args...)})
}

// Fsck checks the whole store: SQLite's integrity_check and foreign keys,
// that every reference resolves (branch, layer and workspace -> commit ->
// parent and tree -> trees, manifests and chunks, with sizes that agree),
// that every object and chunk hashes to its id and that every chunk's range
// and record header lie within its pack. It reports each problem with the
// object and where it is; the error is for failures to run the check, not
// for what it found (see FsckReport.Err). progress, if not nil, is called
// with the objects and chunks checked so far and their total. Fsck reads
// one consistent snapshot and may run while other processes write.
func (db *DB) Fsck(ctx context.Context, progress func(done, total int)) (FsckReport, error) {
	var rep FsckReport
	db.gcMu.RLock()
	defer db.gcMu.RUnlock()
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		return db.fsck(ctx, tx, &rep, progress)
	})
	if err != nil {
		return rep, fmt.Errorf("fsck: %w", err)
	}
	return rep, nil
}

func (db *DB) fsck(ctx context.Context, tx *tx, rep *FsckReport, progress func(int, int)) error {
	// SQLite's own checks (PostgreSQL keeps its constraints itself).
	for _, q := range sqliteChecks(db.d.Postgres) {
		r, err := tx.query(ctx, q.sql)
		if err != nil {
			return err
		}
		cols, _ := r.Columns()
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(any)
		}
		for r.Next() {
			if err := r.Scan(vals...); err != nil {
				r.Close()
				return err
			}
			s := fmt.Sprint(*(vals[0].(*any)))
			if q.kind == "integrity" && s == "ok" {
				continue
			}
			for _, v := range vals[1:] {
				s += " " + fmt.Sprint(*(v.(*any)))
			}
			rep.add(q.kind, ZeroID, dbFile, "%s", s)
		}
		if err := r.Close(); err != nil {
			return err
		}
	}

	// The index, in memory: kinds of objects, locations of chunks.
	kinds := map[ID]Kind{}
	chunks := map[ID]chunkRow{}
	var total int
	if err := tx.row(ctx, `SELECT (SELECT count(*) FROM objects) + (SELECT count(*) FROM chunks)`).Scan(&total); err != nil {
		return err
	}
	r, err := tx.query(ctx, `SELECT id, kind FROM objects`)
	if err != nil {
		return err
	}
	for r.Next() {
		var b []byte
		var k int64
		if err := r.Scan(&b, &k); err != nil {
			r.Close()
			return err
		}
		kinds[toID(b)] = Kind(k)
	}
	if err := r.Close(); err != nil {
		return err
	}
	r, err = tx.query(ctx, `SELECT id, pack, off, len FROM chunks ORDER BY pack, off`)
	if err != nil {
		return err
	}
	var order []chunkRow
	for r.Next() {
		var b []byte
		var c chunkRow
		if err := r.Scan(&b, &c.pack, &c.off, &c.len); err != nil {
			r.Close()
			return err
		}
		c.id = toID(b)
		chunks[c.id] = c
		order = append(order, c)
	}
	if err := r.Close(); err != nil {
		return err
	}

	// Refs.
	roots, err := refRoots(ctx, tx, "workspaces")
	if err != nil {
		return err
	}
	for _, rt := range roots {
		rep.Refs++
		if kinds[rt.id] != KindCommit {
			rep.add("missing", rt.id, rt.via, "names a commit the store does not hold")
		}
	}

	// Objects: hash, decode, references. Manifests first so trees can
	// check file sizes against them.
	done := 0
	tick := func() {
		done++
		if progress != nil && (done%1024 == 0 || done == total) {
			progress(done, total)
		}
	}
	manifestSize := map[ID]int64{}
	graph := commitGraph{}
	r, err = tx.query(ctx, `SELECT id, kind, data FROM objects ORDER BY kind`)
	if err != nil {
		return err
	}
	defer r.Close()
	for r.Next() {
		if err := checkContext(ctx); err != nil {
			return err
		}
		var b, data []byte
		var k int64
		if err := r.Scan(&b, &k, &data); err != nil {
			return err
		}
		id, kind := toID(b), Kind(k)
		rep.Objects++
		tick()
		where := "objects table of " + dbFile
		if Hash(kind, data) != id {
			rep.add("hash", id, where, "%s content hashes to %s", kind, Hash(kind, data))
			continue
		}
		switch kind {
		case KindManifest:
			m, err := object.DecodeManifest(data)
			if err != nil {
				rep.add("decode", id, where, "manifest: %v", err)
				continue
			}
			manifestSize[id] = m.Size
			for _, x := range m.Extents {
				if x.Chunk.IsZero() {
					continue
				}
				c, ok := chunks[x.Chunk]
				if !ok {
					rep.add("missing", x.Chunk, "manifest "+id.String(), "chunk is not in the index")
				} else if c.len != x.Length {
					rep.add("size", x.Chunk, "manifest "+id.String(), "chunk has %d bytes, extent says %d", c.len, x.Length)
				}
			}
		case KindTree:
			t, err := object.DecodeTree(data)
			if err != nil {
				rep.add("decode", id, where, "tree: %v", err)
				continue
			}
			for i := range t.Entries {
				db.fsckEntry(rep, id, &t.Entries[i], kinds, chunks, manifestSize)
			}
		case KindCommit:
			c, err := object.DecodeCommit(data)
			if err != nil {
				rep.add("decode", id, where, "commit: %v", err)
				continue
			}
			if kinds[c.Root] != KindTree {
				rep.add("missing", c.Root, "commit "+id.String(), "root tree is not in the store")
			}
			for _, p := range c.Parents {
				if kinds[p] != KindCommit {
					rep.add("missing", p, "commit "+id.String(), "parent commit is not in the store")
				}
			}
			graph.add(id, c)
		default:
			rep.add("decode", id, where, "unknown kind %d", k)
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	graph.check(rep)

	if db.bucket != nil {
		return db.fsckBucket(ctx, rep, order, tick)
	}

	// Chunks, pack by pack in file order.
	var f *os.File
	var fsize int64
	cur := int64(-1)
	closeCur := func() {
		if f != nil {
			f.Close()
			f = nil
		}
	}
	defer closeCur()
	var hdr [pack.HeaderSize]byte
	for _, c := range order {
		if err := checkContext(ctx); err != nil {
			return err
		}
		rep.Chunks++
		tick()
		path := db.packs.Path(c.pack)
		if c.pack != cur {
			closeCur()
			cur = c.pack
			rep.Packs++
			f, err = os.Open(path)
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					return err
				}
				f = nil
			} else {
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				fsize = fi.Size()
				var magic [len(pack.Magic)]byte
				if _, err := f.ReadAt(magic[:], 0); err != nil || string(magic[:]) != pack.Magic {
					rep.add("pack", ZeroID, path, "bad pack header")
				}
			}
		}
		if f == nil {
			rep.add("pack", c.id, path, "pack file is missing")
			continue
		}
		if c.off < pack.MinOffset || c.len < 0 || c.off+c.len > fsize {
			rep.add("range", c.id, path, "range %d+%d outside the pack's %d bytes", c.off, c.len, fsize)
			continue
		}
		if _, err := f.ReadAt(hdr[:], c.off-pack.HeaderSize); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if id, n := pack.ParseHeader(hdr[:]); id != c.id || n != c.len {
			rep.add("pack", c.id, path, "record header at offset %d does not match the index", c.off-pack.HeaderSize)
			continue
		}
		data := make([]byte, c.len)
		if _, err := f.ReadAt(data, c.off); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", path, err)
		}
		rep.Bytes += c.len
		db.ctr.read.Bytes.Add(c.len)
		if got := Hash(KindChunk, data); got != c.id {
			rep.add("hash", c.id, path, "chunk at offset %d hashes to %s", c.off, got)
		}
	}
	return nil
}

func (db *DB) fsckEntry(rep *FsckReport, tree ID, e *Entry, kinds map[ID]Kind, chunks map[ID]chunkRow, manifestSize map[ID]int64) {
	where := fmt.Sprintf("tree %s entry %q", tree, e.Name)
	switch e.Type {
	case TypeDir:
		if kinds[e.Object] != KindTree {
			rep.add("missing", e.Object, where, "directory's tree is not in the store")
		}
	case TypeFile:
		switch {
		case e.Object.IsZero():
			if e.Size != 0 {
				rep.add("size", e.Object, where, "empty content for a %d-byte file", e.Size)
			}
		case e.ObjectKind == KindChunk:
			c, ok := chunks[e.Object]
			if !ok {
				rep.add("missing", e.Object, where, "file's chunk is not in the index")
			} else if c.len != e.Size {
				rep.add("size", e.Object, where, "chunk has %d bytes, entry says %d", c.len, e.Size)
			}
		case e.ObjectKind == KindManifest:
			if kinds[e.Object] != KindManifest {
				rep.add("missing", e.Object, where, "file's manifest is not in the store")
			} else if n, ok := manifestSize[e.Object]; ok && n != e.Size {
				rep.add("size", e.Object, where, "manifest has %d bytes, entry says %d", n, e.Size)
			}
		}
	}
}

func toID(b []byte) ID {
	var id ID
	copy(id[:], b)
	return id
}

type sqliteCheck struct{ kind, sql string }

// sqliteChecks are SQLite's own integrity checks; none on PostgreSQL.
func sqliteChecks(postgres bool) []sqliteCheck {
	if postgres {
		return nil
	}
	return []sqliteCheck{{"integrity", `PRAGMA integrity_check`}, {"foreign-key", `PRAGMA foreign_key_check`}}
}

// fsckBucket checks a shared Store's chunks: each one read from its pack
// object with a ranged GET (past the chunk cache) and hashed.
func (db *DB) fsckBucket(ctx context.Context, rep *FsckReport, order []chunkRow, tick func()) error {
	bp := db.bucket
	packs := map[int64]bool{}
	for _, c := range order {
		if err := checkContext(ctx); err != nil {
			return err
		}
		rep.Chunks++
		tick()
		if !packs[c.pack] {
			packs[c.pack] = true
			rep.Packs++
		}
		key, err := bp.Key(ctx, c.pack)
		if err != nil {
			rep.add("pack", c.id, fmt.Sprintf("pack %d", c.pack), "%v", err)
			continue
		}
		if c.off < pack.MinOffset || c.len <= 0 || c.len > pack.MaxChunkSize {
			rep.add("range", c.id, key, "invalid range %d+%d", c.off, c.len)
			continue
		}
		data, err := bp.S3().ReadRange(ctx, key, c.off-pack.HeaderSize, pack.HeaderSize+c.len)
		if errors.Is(err, s3bucket.ErrNotFound) {
			rep.add("pack", c.id, key, "pack object is missing")
			continue
		}
		if err != nil {
			rep.add("range", c.id, key, "%v", err)
			continue
		}
		if id, n := pack.ParseHeader(data); id != c.id || n != c.len {
			rep.add("pack", c.id, key, "record header at offset %d does not match the index", c.off-pack.HeaderSize)
			continue
		}
		rep.Bytes += c.len
		db.ctr.read.Bytes.Add(c.len)
		if got := Hash(KindChunk, data[pack.HeaderSize:]); got != c.id {
			rep.add("hash", c.id, key, "chunk at offset %d hashes to %s", c.off, got)
		}
	}
	return nil
}

// commitGraph is what fsck keeps of each commit to check generations once
// every commit is read.
type commitGraph map[ID]graphNode

type graphNode struct {
	gen     uint64
	parents []ID
}

func (g commitGraph) add(id ID, c *Commit) { g[id] = graphNode{gen: c.Generation, parents: c.Parents} }

// check reports commits whose generation breaks its rule: a commit with a
// generation is above every parent, and exactly one above the highest when
// every parent has one (version 1 commits have none).
func (g commitGraph) check(rep *FsckReport) {
	ids := make([]ID, 0, len(g))
	for id := range g {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b ID) int { return bytes.Compare(a[:], b[:]) })
	for _, id := range ids {
		n := g[id]
		if n.gen == 0 {
			continue
		}
		var top uint64
		known := true
		for _, p := range n.parents {
			pn, ok := g[p]
			if !ok || pn.gen == 0 {
				known = false
				continue
			}
			top = max(top, pn.gen)
		}
		switch {
		case n.gen <= top:
			rep.add("generation", id, "commit "+id.String(), "generation %d is not above its parent's %d", n.gen, top)
		case known && n.gen != top+1:
			rep.add("generation", id, "commit "+id.String(), "generation %d, want %d (one above its parents')", n.gen, top+1)
		}
	}
}
