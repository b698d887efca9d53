package maintenance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/diskusage"
	"layerfs.dev/layerfs/internal/store/cache"
	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/internal/store/pack"
	"layerfs.dev/layerfs/internal/store/sqltx"
	"layerfs.dev/layerfs/wire/errclass"
)

// GCOptions tune a collection.
type GCOptions struct {
	// CompactRatio: a pack whose dead bytes exceed this fraction of its
	// size is rewritten with only its live chunks; 0 means
	// DefaultCompactRatio. Packs with no live chunk are always deleted.
	CompactRatio float64
	// DryRun marks and counts but deletes nothing.
	DryRun bool
	// Vacuum rebuilds the SQLite file afterwards to return its free pages
	// to the file system.
	Vacuum bool
	// Grace, on a shared Store only: rows stored, or found by a batch's
	// dedup probe, less than this long ago are kept, with everything they
	// reach (gcshared.go); 0 means DefaultGCGrace, negative means none
	// (only when no batch can be running, as in tests).
	Grace time.Duration
}

// DefaultCompactRatio is the dead fraction above which GC rewrites a pack.
const DefaultCompactRatio = 0.25

// GCStats report what a collection found and freed.
type GCStats struct {
	LiveCommits       int64         `json:"live_commits"`
	LiveTrees         int64         `json:"live_trees"`
	LiveManifests     int64         `json:"live_manifests"`
	LiveChunks        int64         `json:"live_chunks"`
	DeadObjects       int64         `json:"dead_objects"` // manifest, tree and commit rows deleted
	DeadChunks        int64         `json:"dead_chunks"`
	DeadChunkBytes    int64         `json:"dead_chunk_bytes"` // payload bytes of deleted chunks
	PacksRewritten    int           `json:"packs_rewritten"`
	PacksDeleted      int           `json:"packs_deleted"`
	OrphanPacks       int           `json:"orphan_packs,omitempty"` // pack objects no row ever named, deleted (shared Store)
	CacheFilesRemoved int           `json:"cache_files_removed"`
	DiskBefore        int64         `json:"disk_before"` // bytes on disk of packs, cache and database
	DiskAfter         int64         `json:"disk_after"`
	Reclaimed         int64         `json:"reclaimed"` // DiskBefore - DiskAfter
	Duration          time.Duration `json:"duration_ns"`
}

// GC deletes everything no branch head, layer or workspace (Base and Head)
// reaches, following commit parents, trees, manifests and chunks; rewrites
// packs whose dead bytes exceed the threshold, deleting the old files; and
// removes cache files of unreachable content. On the embedded Store it needs
// the store to itself: it fails fast with errclass.Busy when another process has
// the store open or a batch of this process holds unflushed work. On a
// shared Store it runs beside every host's work (gcshared.go). It refuses
// to delete anything when a reachable object is missing or corrupt (run
// Fsck).
//
// Every step is crash safe: rows go first (one transaction), a rewritten
// pack is fsynced before the index points at it, and a pack file is removed
// only once no row names it, so an interrupted GC leaves at most files that
// the next GC removes.
func (s *Store) GC(ctx context.Context, opts GCOptions) (GCStats, error) {
	start := time.Now()
	if opts.CompactRatio <= 0 {
		opts.CompactRatio = DefaultCompactRatio
	}
	if s.Bucket != nil {
		return s.gcShared(ctx, opts, start)
	}
	unlock, err := s.LockExclusive(ctx)
	if err != nil {
		return GCStats{}, fmt.Errorf("gc: %w", err)
	}
	defer unlock()

	st := GCStats{}
	st.DiskBefore, err = s.diskFootprint()
	if err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	live, err := s.mark(ctx, &st)
	if err != nil {
		return st, fmt.Errorf("gc: mark: %w", err)
	}
	if err := s.sweep(ctx, live, &st, opts.DryRun); err != nil {
		return st, fmt.Errorf("gc: sweep: %w", err)
	}
	if !opts.DryRun {
		if err := s.compact(ctx, opts.CompactRatio, &st); err != nil {
			return st, fmt.Errorf("gc: compact: %w", err)
		}
		if err := s.sweepCache(live, &st); err != nil {
			return st, fmt.Errorf("gc: cache: %w", err)
		}
		if opts.Vacuum {
			if err := s.ExecWriter(ctx, `VACUUM`); err != nil {
				return st, fmt.Errorf("gc: vacuum: %w", err)
			}
			account.Charge(ctx, s.Total, account.Statements, 1)
		}
		if err := s.ExecWriter(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			return st, fmt.Errorf("gc: checkpoint: %w", err)
		}
		account.Charge(ctx, s.Total, account.Statements, 1)
	}
	st.DiskAfter, err = s.diskFootprint()
	if err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	st.Reclaimed = st.DiskBefore - st.DiskAfter
	st.Duration = time.Since(start)
	s.Log.Info("gc done", "dir", s.Dir, "reclaimed", st.Reclaimed, "dead_objects", st.DeadObjects,
		"dead_chunks", st.DeadChunks, "packs_rewritten", st.PacksRewritten, "packs_deleted", st.PacksDeleted)
	return st, nil
}

// liveSet is what mark found reachable.
type liveSet struct {
	objects map[object.ID]object.Kind // manifests, trees and commits
	chunks  map[object.ID]struct{}    // chunk ids
	content map[object.ID]struct{}    // file content ids (cache keys), including object.ZeroID
}

func newLiveSet() *liveSet {
	return &liveSet{objects: map[object.ID]object.Kind{}, chunks: map[object.ID]struct{}{}, content: map[object.ID]struct{}{object.ZeroID: {}}}
}

// mark walks the object graph from every ref in one read transaction.
func (s *Store) mark(ctx context.Context, st *GCStats) (*liveSet, error) {
	live := newLiveSet()
	err := s.WithTx(ctx, sqltx.Read, func(tx *sqltx.Tx) error {
		roots, err := refRoots(ctx, tx, "workspaces")
		if err != nil {
			return err
		}
		return markFrom(ctx, tx, roots, live, st)
	})
	return live, err
}

// markFrom adds to live everything roots reach, in tx.
func markFrom(ctx context.Context, tx *sqltx.Tx, roots []root, live *liveSet, st *GCStats) error {
	get, err := tx.Prepare(ctx, `SELECT kind, data FROM objects WHERE id = ?`)
	if err != nil {
		return err
	}
	defer get.Close()
	load := func(k object.Kind, id object.ID, via string) ([]byte, error) {
		var kind int64
		var data []byte
		err := get.Row(ctx, id[:]).Scan(&kind, &data)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && object.Kind(kind) != k) {
			return nil, fmt.Errorf("%s %s (reached from %s) is missing; run fsck: %w", k, id, via, errclass.NotFound)
		}
		if err != nil {
			return nil, err
		}
		if object.Hash(k, data) != id {
			return nil, fmt.Errorf("%s %s (reached from %s) does not match its id; run fsck: %w", k, id, via, object.ErrCorrupt)
		}
		return data, nil
	}
	type item struct {
		k   object.Kind
		id  object.ID
		via string
	}
	var stack []item
	for _, r := range roots {
		stack = append(stack, item(r))
	}
	for len(stack) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if it.k == object.KindChunk {
			if _, ok := live.chunks[it.id]; !ok {
				live.chunks[it.id] = struct{}{}
				st.LiveChunks++
			}
			continue
		}
		if _, ok := live.objects[it.id]; ok {
			continue
		}
		data, err := load(it.k, it.id, it.via)
		if err != nil {
			return err
		}
		live.objects[it.id] = it.k
		via := it.k.String() + " " + it.id.Short()
		switch it.k {
		case object.KindCommit:
			st.LiveCommits++
			c, err := object.DecodeCommit(data)
			if err != nil {
				return fmt.Errorf("commit %s: %w", it.id, err)
			}
			stack = append(stack, item{object.KindTree, c.Root, via})
			for _, p := range c.Parents {
				stack = append(stack, item{object.KindCommit, p, via})
			}
		case object.KindTree:
			st.LiveTrees++
			t, err := object.DecodeTree(data)
			if err != nil {
				return fmt.Errorf("tree %s: %w", it.id, err)
			}
			for i := range t.Entries {
				e := &t.Entries[i]
				switch {
				case e.Type == object.TypeDir:
					stack = append(stack, item{object.KindTree, e.Object, via})
				case e.Type == object.TypeFile:
					live.content[e.Object] = struct{}{}
					if e.ObjectKind == object.KindChunk || e.ObjectKind == object.KindManifest {
						stack = append(stack, item{e.ObjectKind, e.Object, via})
					}
				}
			}
		case object.KindManifest:
			st.LiveManifests++
			m, err := object.DecodeManifest(data)
			if err != nil {
				return fmt.Errorf("manifest %s: %w", it.id, err)
			}
			for _, x := range m.Extents {
				if !x.Chunk.IsZero() {
					stack = append(stack, item{object.KindChunk, x.Chunk, via})
				}
			}
		}
	}
	return nil
}

type root struct {
	k   object.Kind
	id  object.ID
	via string
}

// refRoots lists every commit a ref names: branch heads, layers, images,
// checkpoints, and the base, head and root image of each workspace of the
// table (or subquery) workspaces.
func refRoots(ctx context.Context, tx *sqltx.Tx, workspaces string) ([]root, error) {
	var out []root
	r, err := tx.Query(ctx, `
		SELECT head, 'branch ' || project || '/' || name FROM branches
		UNION ALL SELECT commit_id, 'layer ' || project || ':' || idx FROM layers
		UNION ALL SELECT commit_id, 'image ' || name FROM images
		UNION ALL SELECT commit_id, 'checkpoint ' || id FROM checkpoints
		UNION ALL SELECT base, 'workspace ' || id || ' base' FROM `+workspaces+` AS w
		UNION ALL SELECT head, 'workspace ' || id || ' head' FROM `+workspaces+` AS w
		UNION ALL SELECT image, 'workspace ' || id || ' image' FROM `+workspaces+` AS w WHERE image IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	for r.Next() {
		var b []byte
		var via string
		if err := r.Scan(&b, &via); err != nil {
			return nil, err
		}
		var id object.ID
		copy(id[:], b)
		if !id.IsZero() {
			out = append(out, root{object.KindCommit, id, via})
		}
	}
	return out, r.Err()
}

// sweep deletes unmarked rows in one write transaction.
func (s *Store) sweep(ctx context.Context, live *liveSet, st *GCStats, dryRun bool) error {
	return s.WithTx(ctx, sqltx.Write, func(tx *sqltx.Tx) error {
		var deadObjs, deadChunks []object.ID
		r, err := tx.Query(ctx, `SELECT id FROM objects`)
		if err != nil {
			return err
		}
		for r.Next() {
			var b []byte
			if err := r.Scan(&b); err != nil {
				r.Close()
				return err
			}
			var id object.ID
			copy(id[:], b)
			if _, ok := live.objects[id]; !ok {
				deadObjs = append(deadObjs, id)
			}
		}
		if err := r.Close(); err != nil {
			return err
		}
		r, err = tx.Query(ctx, `SELECT id, len FROM chunks`)
		if err != nil {
			return err
		}
		for r.Next() {
			var b []byte
			var n int64
			if err := r.Scan(&b, &n); err != nil {
				r.Close()
				return err
			}
			var id object.ID
			copy(id[:], b)
			if _, ok := live.chunks[id]; !ok {
				deadChunks = append(deadChunks, id)
				st.DeadChunkBytes += n
			}
		}
		if err := r.Close(); err != nil {
			return err
		}
		st.DeadObjects, st.DeadChunks = int64(len(deadObjs)), int64(len(deadChunks))
		if dryRun {
			return nil
		}
		for _, del := range []struct {
			q   string
			ids []object.ID
		}{{`DELETE FROM objects WHERE id = ?`, deadObjs}, {`DELETE FROM chunks WHERE id = ?`, deadChunks}} {
			if len(del.ids) == 0 {
				continue
			}
			s, err := tx.Prepare(ctx, del.q)
			if err != nil {
				return err
			}
			for _, id := range del.ids {
				if _, err := s.Exec(ctx, id[:]); err != nil {
					s.Close()
					return fmt.Errorf("delete %s: %w", id, err)
				}
			}
			s.Close()
		}
		return dropDeadDerivations(ctx, tx)
	})
}

// dropDeadDerivations forgets the derivations whose commit a sweep
// deleted: they are a memo, not a root.
func dropDeadDerivations(ctx context.Context, tx *sqltx.Tx) error {
	_, err := tx.Exec(ctx, `DELETE FROM derivations WHERE commit_id NOT IN (SELECT id FROM objects)`)
	return err
}

// packLive is one pack's live chunks as the index has them.
type packLive struct {
	num    int64
	chunks []chunkRow // sorted by offset
	bytes  int64      // live bytes including record headers
}

// livePacks groups the chunk index by pack.
func (s *Store) livePacks(ctx context.Context) (map[int64]*packLive, error) {
	out := map[int64]*packLive{}
	err := s.WithTx(ctx, sqltx.Read, func(tx *sqltx.Tx) error {
		r, err := tx.Query(ctx, `SELECT id, pack, off, len FROM chunks ORDER BY pack, off`)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var c chunkRow
			var b []byte
			if err := r.Scan(&b, &c.pack, &c.off, &c.len); err != nil {
				return err
			}
			copy(c.id[:], b)
			p := out[c.pack]
			if p == nil {
				p = &packLive{num: c.pack}
				out[c.pack] = p
			}
			p.chunks = append(p.chunks, c)
			p.bytes += pack.HeaderSize + c.len
		}
		return r.Err()
	})
	return out, err
}

// compact deletes packs with no live chunk and rewrites those with too many
// dead bytes into new packs.
func (s *Store) compact(ctx context.Context, ratio float64, st *GCStats) error {
	if err := s.Packs.DropIdle(); err != nil {
		return err
	}
	live, err := s.livePacks(ctx)
	if err != nil {
		return err
	}
	nums, err := s.Packs.List()
	if err != nil {
		return err
	}
	var out *pack.Writer // the pack live chunks are copied into
	defer func() {
		if out != nil {
			s.Packs.Discard(out)
		}
	}()
	for _, num := range nums {
		if err := ctx.Err(); err != nil {
			return err
		}
		path := s.Packs.Path(num)
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		p := live[num]
		if p == nil {
			if err := s.removePack(num); err != nil {
				return err
			}
			st.PacksDeleted++
			continue
		}
		dead := fi.Size() - int64(len(pack.Magic)) - p.bytes
		if float64(dead) <= ratio*float64(fi.Size()) {
			continue
		}
		// Copy the live chunks (verified) into the output pack, make them
		// durable, then point the index at them.
		moved := make([]chunkRow, 0, len(p.chunks))
		for _, c := range p.chunks {
			data, err := s.ReadChunk(ctx, c.id, c.pack, c.off, c.len)
			if err != nil {
				return fmt.Errorf("pack %s: %w", path, err)
			}
			if out == nil || out.End()+pack.HeaderSize+c.len > s.MaxPackSize {
				if out != nil {
					if err := out.Sync(); err != nil {
						return err
					}
					s.Packs.Discard(out)
				}
				out, err = s.Packs.Create()
				if err != nil {
					return err
				}
			}
			off, err := out.Append(c.id, data)
			if err != nil {
				return err
			}
			account.Charge(ctx, s.Total, account.PackBytesWritten, pack.HeaderSize+c.len)
			moved = append(moved, chunkRow{id: c.id, pack: out.Number(), off: off, len: c.len})
		}
		if err := out.Sync(); err != nil {
			return err
		}
		account.Charge(ctx, s.Total, account.PackSyncs, 1)
		err = s.WithTx(ctx, sqltx.Write, func(tx *sqltx.Tx) error {
			s, err := tx.Prepare(ctx, `UPDATE chunks SET pack = ?, off = ? WHERE id = ? AND pack = ?`)
			if err != nil {
				return err
			}
			defer s.Close()
			for _, c := range moved {
				if _, err := s.Exec(ctx, c.pack, c.off, c.id[:], num); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := s.removePack(num); err != nil {
			return err
		}
		st.PacksRewritten++
	}
	return nil
}

func (s *Store) removePack(num int64) error {
	if err := s.Packs.Remove(num); err != nil {
		return err
	}
	s.Log.Debug("gc removed pack", "pack", s.Packs.Path(num))
	return nil
}

// sweepCache removes cache files whose content no live tree names, and
// temporary files a crashed materialization left behind.
func (s *Store) sweepCache(live *liveSet, st *GCStats) error {
	n, err := s.Cache.Sweep(func(id object.ID) bool {
		_, ok := live.content[id]
		return ok
	})
	st.CacheFilesRemoved += n
	return err
}

// diskFootprint is the bytes on disk of the packs, the cache and the
// database files.
func (s *Store) diskFootprint() (int64, error) {
	var total int64
	for _, d := range []string{s.PacksDir, s.CacheDir} {
		n, err := diskusage.Tree(d, cache.TrustedDir)
		if err != nil {
			return 0, err
		}
		total += n
	}
	for _, f := range s.indexFiles() {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(s.Dir, f), &st); err == nil {
			total += st.Blocks * 512
		}
	}
	return total, nil
}
