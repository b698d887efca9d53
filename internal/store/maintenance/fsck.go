package maintenance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/s3bucket"
	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/internal/store/pack"
	"layerfs.dev/layerfs/internal/store/sqltx"
)

// Problem is one thing Fsck found wrong.
type Problem struct {
	// Kind is "integrity", "foreign-key", "missing", "hash", "decode",
	// "size", "range", "pack" or "cache" (a damaged file of the cache of
	// contents, which RepairCache evicts).
	Kind   string    `json:"kind"`
	Object object.ID `json:"object"` // the object concerned, zero for store-wide problems
	Where  string    `json:"where"`  // the table, ref or pack file
	Detail string    `json:"detail"`
}

func (p Problem) String() string {
	if p.Object.IsZero() {
		return p.Kind + ": " + p.Where + ": " + p.Detail
	}
	return p.Kind + ": " + p.Object.String() + " in " + p.Where + ": " + p.Detail
}

// FsckReport is the result of Fsck.
type FsckReport struct {
	Refs    int64 `json:"refs"`
	Objects int64 `json:"objects"`
	Chunks  int64 `json:"chunks"`
	Bytes   int64 `json:"bytes"` // chunk payload bytes read and verified
	Packs   int   `json:"packs"`
	// CacheFiles and CacheBytes are the cache's files checked against
	// their contents' IDs, and their bytes.
	CacheFiles int64     `json:"cache_files"`
	CacheBytes int64     `json:"cache_bytes"`
	Problems   []Problem `json:"problems"`
}

// OK reports whether no problem was found.
func (r *FsckReport) OK() bool { return len(r.Problems) == 0 }

// Err returns nil for a clean report, else an error wrapping object.ErrCorrupt
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
	return fmt.Errorf("fsck found %d problems: %s: %w", len(r.Problems), b.String(), object.ErrCorrupt)
}

func (r *FsckReport) add(kind string, id object.ID, where, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Kind: kind, Object: id, Where: where, Detail: fmt.Sprintf(format, args...)})
}

// Fsck checks the whole store: SQLite's integrity_check and foreign keys,
// that every reference resolves (branch, layer and workspace -> commit ->
// parent and tree -> trees, manifests and chunks, with sizes that agree),
// that every object and chunk hashes to its id, that every chunk's range
// and record header lie within its pack, and that every file of the cache
// of contents holds its content (fsckcache.go). It reports each problem
// with the object and where it is; the error is for failures to run the
// check, not for what it found (see FsckReport.Err). progress, if not
// nil, is called with the objects and chunks checked so far and their
// total. Fsck reads one consistent snapshot and may run while other
// processes write.
func (s *Store) Fsck(ctx context.Context, progress func(done, total int)) (FsckReport, error) {
	return s.FsckWith(ctx, FsckOptions{Progress: progress})
}

// FsckOptions tune FsckWith.
type FsckOptions struct {
	// Progress, if not nil, is called with the objects and chunks
	// checked so far and their total.
	Progress func(done, total int)
	// SkipCache leaves the cache of contents unchecked.
	SkipCache bool
}

// FsckWith is Fsck with opts.
func (s *Store) FsckWith(ctx context.Context, opts FsckOptions) (FsckReport, error) {
	var rep FsckReport
	c := &checker{ctx: ctx, s: s, rep: &rep, progress: opts.Progress}
	unlock := s.ReadLock()
	err := s.WithTx(ctx, sqltx.Read, func(tx *sqltx.Tx) error {
		c.tx = tx
		return c.run()
	})
	unlock()
	if err == nil && !opts.SkipCache {
		err = c.cacheFiles()
	}
	if err != nil {
		return rep, fmt.Errorf("fsck: %w", err)
	}
	return rep, nil
}

// checker is one run of Fsck in one read transaction: what it learnt of
// the index so far and the report it writes. Each check is a method; run
// calls them in an order in which each finds what it needs learnt.
type checker struct {
	ctx      context.Context
	s        *Store
	tx       *sqltx.Tx
	rep      *FsckReport
	progress func(done, total int)
	done     int // objects and chunks checked
	total    int // objects and chunks in the index

	kinds        map[object.ID]object.Kind // every object's kind
	chunks       map[object.ID]chunkRow    // every chunk's place
	order        []chunkRow                // the chunks, in pack order
	manifestSize map[object.ID]int64       // the size of every manifest that decodes
	graph        commitGraph               // every commit that decodes
}

func (c *checker) run() error {
	checks := []func() error{c.engine, c.index, c.refs, c.objects, c.packFiles}
	if c.s.Bucket != nil {
		checks[len(checks)-1] = c.packObjects
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// tick counts one object or chunk checked and reports progress.
func (c *checker) tick() {
	c.done++
	if c.progress != nil && (c.done%1024 == 0 || c.done == c.total) {
		c.progress(c.done, c.total)
	}
}

// engine runs SQLite's own checks (PostgreSQL keeps its constraints
// itself).
func (c *checker) engine() error {
	for _, q := range sqliteChecks(c.tx.Postgres()) {
		r, err := c.tx.Query(c.ctx, q.sql)
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
			c.rep.add(q.kind, object.ZeroID, c.s.IndexFile, "%s", s)
		}
		if err := r.Close(); err != nil {
			return err
		}
	}
	return nil
}

// index reads the index into memory: the kinds of the objects and the
// places of the chunks.
func (c *checker) index() error {
	c.kinds, c.chunks = map[object.ID]object.Kind{}, map[object.ID]chunkRow{}
	if err := c.tx.Row(c.ctx, `SELECT (SELECT count(*) FROM objects) + (SELECT count(*) FROM chunks)`).Scan(&c.total); err != nil {
		return err
	}
	r, err := c.tx.Query(c.ctx, `SELECT id, kind FROM objects`)
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
		c.kinds[toID(b)] = object.Kind(k)
	}
	if err := r.Close(); err != nil {
		return err
	}
	r, err = c.tx.Query(c.ctx, `SELECT id, pack, off, len FROM chunks ORDER BY pack, off`)
	if err != nil {
		return err
	}
	for r.Next() {
		var b []byte
		var ch chunkRow
		if err := r.Scan(&b, &ch.pack, &ch.off, &ch.len); err != nil {
			r.Close()
			return err
		}
		ch.id = toID(b)
		c.chunks[ch.id] = ch
		c.order = append(c.order, ch)
	}
	return r.Close()
}

// refs checks that every branch head, layer, checkpoint and workspace
// names a stored commit.
func (c *checker) refs() error {
	roots, err := refRoots(c.ctx, c.tx, "workspaces")
	if err != nil {
		return err
	}
	for _, rt := range roots {
		c.rep.Refs++
		if c.kinds[rt.id] != object.KindCommit {
			c.rep.add("missing", rt.id, rt.via, "names a commit the store does not hold")
		}
	}
	return nil
}

// objects checks every manifest, tree and commit: its hash, that it
// decodes, and what it names. Manifests come first (kind order), so that
// trees can check file sizes against them; generations are checked once
// every commit is read.
func (c *checker) objects() error {
	c.manifestSize, c.graph = map[object.ID]int64{}, commitGraph{}
	r, err := c.tx.Query(c.ctx, `SELECT id, kind, data FROM objects ORDER BY kind`)
	if err != nil {
		return err
	}
	defer r.Close()
	for r.Next() {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		var b, data []byte
		var k int64
		if err := r.Scan(&b, &k, &data); err != nil {
			return err
		}
		c.object(toID(b), k, data)
	}
	if err := r.Err(); err != nil {
		return err
	}
	c.graph.check(c.rep)
	return nil
}

// object checks one row (id, kind k, data) of the objects table.
func (c *checker) object(id object.ID, k int64, data []byte) {
	kind := object.Kind(k)
	c.rep.Objects++
	c.tick()
	where := "objects table of " + c.s.IndexFile
	if object.Hash(kind, data) != id {
		c.rep.add("hash", id, where, "%s content hashes to %s", kind, object.Hash(kind, data))
		return
	}
	switch kind {
	case object.KindManifest:
		c.manifest(id, data, where)
	case object.KindTree:
		c.tree(id, data, where)
	case object.KindCommit:
		c.commit(id, data, where)
	default:
		c.rep.add("decode", id, where, "unknown kind %d", k)
	}
}

// manifest checks that a manifest's chunks are indexed with the lengths
// its extents say.
func (c *checker) manifest(id object.ID, data []byte, where string) {
	m, err := object.DecodeManifest(data)
	if err != nil {
		c.rep.add("decode", id, where, "manifest: %v", err)
		return
	}
	c.manifestSize[id] = m.Size
	for _, x := range m.Extents {
		if x.Chunk.IsZero() {
			continue
		}
		ch, ok := c.chunks[x.Chunk]
		if !ok {
			c.rep.add("missing", x.Chunk, "manifest "+id.String(), "chunk is not in the index")
		} else if ch.len != x.Length {
			c.rep.add("size", x.Chunk, "manifest "+id.String(), "chunk has %d bytes, extent says %d", ch.len, x.Length)
		}
	}
}

// tree checks that a tree decodes and that each entry names what it
// should.
func (c *checker) tree(id object.ID, data []byte, where string) {
	t, err := object.DecodeTree(data)
	if err != nil {
		c.rep.add("decode", id, where, "tree: %v", err)
		return
	}
	for i := range t.Entries {
		c.entry(id, &t.Entries[i])
	}
}

// entry checks that a directory names a stored tree and a file its
// content, of the size the entry says.
func (c *checker) entry(tree object.ID, e *object.Entry) {
	where := fmt.Sprintf("tree %s entry %q", tree, e.Name)
	switch e.Type {
	case object.TypeDir:
		if c.kinds[e.Object] != object.KindTree {
			c.rep.add("missing", e.Object, where, "directory's tree is not in the store")
		}
	case object.TypeFile:
		switch {
		case e.Object.IsZero():
			if e.Size != 0 {
				c.rep.add("size", e.Object, where, "empty content for a %d-byte file", e.Size)
			}
		case e.ObjectKind == object.KindChunk:
			ch, ok := c.chunks[e.Object]
			if !ok {
				c.rep.add("missing", e.Object, where, "file's chunk is not in the index")
			} else if ch.len != e.Size {
				c.rep.add("size", e.Object, where, "chunk has %d bytes, entry says %d", ch.len, e.Size)
			}
		case e.ObjectKind == object.KindManifest:
			if c.kinds[e.Object] != object.KindManifest {
				c.rep.add("missing", e.Object, where, "file's manifest is not in the store")
			} else if n, ok := c.manifestSize[e.Object]; ok && n != e.Size {
				c.rep.add("size", e.Object, where, "manifest has %d bytes, entry says %d", n, e.Size)
			}
		}
	}
}

// commit checks that a commit's root tree and parents are stored, and
// keeps it for the generation check.
func (c *checker) commit(id object.ID, data []byte, where string) {
	cm, err := object.DecodeCommit(data)
	if err != nil {
		c.rep.add("decode", id, where, "commit: %v", err)
		return
	}
	if c.kinds[cm.Root] != object.KindTree {
		c.rep.add("missing", cm.Root, "commit "+id.String(), "root tree is not in the store")
	}
	for _, p := range cm.Parents {
		if c.kinds[p] != object.KindCommit {
			c.rep.add("missing", p, "commit "+id.String(), "parent commit is not in the store")
		}
	}
	c.graph.add(id, cm)
}

// packFile is the pack file packFiles is in; f is nil when it is missing.
type packFile struct {
	num  int64
	path string
	f    *os.File
	size int64
}

func (p *packFile) close() {
	if p.f != nil {
		p.f.Close()
		p.f = nil
	}
}

// packFiles checks an embedded Store's chunks, pack by pack in file order:
// each one's range and record header within its pack, and its bytes
// against its id.
func (c *checker) packFiles() error {
	cur := packFile{num: -1}
	defer cur.close()
	for _, ch := range c.order {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		c.rep.Chunks++
		c.tick()
		if ch.pack != cur.num {
			if err := c.openPack(&cur, ch.pack); err != nil {
				return err
			}
		}
		if err := c.packChunk(&cur, ch); err != nil {
			return err
		}
	}
	return nil
}

// openPack moves p to pack num and checks the pack's magic.
func (c *checker) openPack(p *packFile, num int64) error {
	p.close()
	*p = packFile{num: num, path: c.s.Packs.Path(num)}
	c.rep.Packs++
	f, err := os.Open(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	p.f = f
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	p.size = fi.Size()
	var magic [len(pack.Magic)]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil || string(magic[:]) != pack.Magic {
		c.rep.add("pack", object.ZeroID, p.path, "bad pack header")
	}
	return nil
}

// packChunk checks chunk ch of the pack file p.
func (c *checker) packChunk(p *packFile, ch chunkRow) error {
	if p.f == nil {
		c.rep.add("pack", ch.id, p.path, "pack file is missing")
		return nil
	}
	if ch.off < pack.MinOffset || ch.len < 0 || ch.off+ch.len > p.size {
		c.rep.add("range", ch.id, p.path, "range %d+%d outside the pack's %d bytes", ch.off, ch.len, p.size)
		return nil
	}
	var hdr [pack.HeaderSize]byte
	if _, err := p.f.ReadAt(hdr[:], ch.off-pack.HeaderSize); err != nil {
		return fmt.Errorf("read %s: %w", p.path, err)
	}
	if id, n := pack.ParseHeader(hdr[:]); id != ch.id || n != ch.len {
		c.rep.add("pack", ch.id, p.path, "record header at offset %d does not match the index", ch.off-pack.HeaderSize)
		return nil
	}
	data := make([]byte, ch.len)
	if _, err := p.f.ReadAt(data, ch.off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", p.path, err)
	}
	c.rep.Bytes += ch.len
	c.s.Total.Add(account.PackBytesRead, ch.len)
	if got := object.Hash(object.KindChunk, data); got != ch.id {
		c.rep.add("hash", ch.id, p.path, "chunk at offset %d hashes to %s", ch.off, got)
	}
	return nil
}

// packObjects checks a shared Store's chunks: each one read from its pack
// object with a ranged GET (past the chunk cache) and hashed.
func (c *checker) packObjects() error {
	packs := map[int64]bool{}
	for _, ch := range c.order {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		c.rep.Chunks++
		c.tick()
		if !packs[ch.pack] {
			packs[ch.pack] = true
			c.rep.Packs++
		}
		c.packObjectChunk(ch)
	}
	return nil
}

// packObjectChunk checks chunk ch of a pack object.
func (c *checker) packObjectChunk(ch chunkRow) {
	bp := c.s.Bucket
	key, err := bp.Key(c.ctx, ch.pack)
	if err != nil {
		c.rep.add("pack", ch.id, fmt.Sprintf("pack %d", ch.pack), "%v", err)
		return
	}
	if ch.off < pack.MinOffset || ch.len <= 0 || ch.len > pack.MaxChunkSize {
		c.rep.add("range", ch.id, key, "invalid range %d+%d", ch.off, ch.len)
		return
	}
	data, err := bp.S3().ReadRange(c.ctx, key, ch.off-pack.HeaderSize, pack.HeaderSize+ch.len)
	if errors.Is(err, s3bucket.ErrNotFound) {
		c.rep.add("pack", ch.id, key, "pack object is missing")
		return
	}
	if err != nil {
		c.rep.add("range", ch.id, key, "%v", err)
		return
	}
	if id, n := pack.ParseHeader(data); id != ch.id || n != ch.len {
		c.rep.add("pack", ch.id, key, "record header at offset %d does not match the index", ch.off-pack.HeaderSize)
		return
	}
	c.rep.Bytes += ch.len
	c.s.Total.Add(account.PackBytesRead, ch.len)
	if got := object.Hash(object.KindChunk, data[pack.HeaderSize:]); got != ch.id {
		c.rep.add("hash", ch.id, key, "chunk at offset %d hashes to %s", ch.off, got)
	}
}

type sqliteCheck struct{ kind, sql string }

// sqliteChecks are SQLite's own integrity checks; none on PostgreSQL.
func sqliteChecks(postgres bool) []sqliteCheck {
	if postgres {
		return nil
	}
	return []sqliteCheck{{"integrity", `PRAGMA integrity_check`}, {"foreign-key", `PRAGMA foreign_key_check`}}
}

// commitGraph is what fsck keeps of each commit to check generations once
// every commit is read.
type commitGraph map[object.ID]graphNode

type graphNode struct {
	gen     uint64
	parents []object.ID
}

func (g commitGraph) add(id object.ID, c *object.Commit) {
	g[id] = graphNode{gen: c.Generation, parents: c.Parents}
}

// check reports commits whose generation breaks its rule: a commit with a
// generation is above every parent, and exactly one above the highest when
// every parent has one (version 1 commits have none).
func (g commitGraph) check(rep *FsckReport) {
	ids := make([]object.ID, 0, len(g))
	for id := range g {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b object.ID) int { return bytes.Compare(a[:], b[:]) })
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
