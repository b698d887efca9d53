package maintenance

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"layerfs.dev/layerfs/internal/diskusage"
	"layerfs.dev/layerfs/internal/store/bucketpack"
	"layerfs.dev/layerfs/internal/store/cache"
	"layerfs.dev/layerfs/internal/store/object"
	"layerfs.dev/layerfs/internal/store/schema"
	"layerfs.dev/layerfs/internal/store/sqltx"
)

// GC on a shared Store (docs/fleet.md) runs while every host keeps working;
// nothing can hold the whole fleet still as the embedded Store's file lock
// holds one host. What keeps it safe:
//
//   - Roots are branch heads, layers, and the base and head of the
//     workspaces of hosts whose lease (lease.go) is live: a dead host's
//     workspaces stop pinning their commits once its lease expires.
//   - Marking and deleting rows happen in one transaction that holds the
//     reference lock, so no branch, layer or workspace can start naming an
//     object between the mark and the delete.
//   - A batch does not publish what it stores at once: its rows commit at
//     Flush, the branch moves after, and a dedup probe may find an old,
//     unreachable chunk or object that the batch then names. So every row
//     carries the time (the database's clock) it was stored, refreshed
//     when a probe finds it older than ProbeRefresh; rows younger than the
//     grace period (DefaultGCGrace) are roots of the mark and are never
//     deleted, and every DELETE checks that age again on the row's latest
//     version, so a probe that refreshed a row after the mark keeps it.
//     A batch therefore has DefaultGCGrace - ProbeRefresh (90 minutes)
//     between finding a row and publishing what names it. This is a grace
//     period on rows, not on packs, because a dedup probe can revive a
//     chunk of any age; and not an upload-intent record, because a row's
//     time needs nothing renewed and nothing cleaned up when a host dies.
//   - A pack object is deleted once no chunk row names it (chunk rows
//     commit with their pack's row and are never added later), and a pack
//     object no row ever named (an upload whose batch died) once it is
//     older than the grace period.
//
// Packs with some dead chunks are kept whole (no compaction on a bucket).

// DefaultGCGrace is how long a shared Store keeps rows that were stored, or
// found by a dedup probe, even when nothing reaches them.
const DefaultGCGrace = 2 * time.Hour

// ProbeRefresh: a dedup probe (package store's) that finds a row older than this makes it
// young again (one UPDATE); younger rows it leaves alone, to keep re-imports
// of recent content from writing every row they find.
const ProbeRefresh = DefaultGCGrace / 4

// deleteGroup is how many rows one DELETE names.
const deleteGroup = 1000

// liveWorkspaces is every workspace record of a host with a live lease.
const liveWorkspaces = `(SELECT r.id, r.base, r.head, r.image FROM workspace_records r
	JOIN leases l ON l.node = r.node WHERE l.expires > ` + schema.NowNs + `)`

func (s *Store) gcShared(ctx context.Context, opts GCOptions, start time.Time) (GCStats, error) {
	grace := opts.Grace
	if grace == 0 {
		grace = DefaultGCGrace
	}
	grace = max(grace, 0)
	st := GCStats{}
	var err error
	if st.DiskBefore, err = s.sharedFootprint(ctx); err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	live := newLiveSet()
	err = s.WithTx(ctx, sqltx.Write, func(tx *sqltx.Tx) error {
		var cutoff int64
		if err := tx.Row(ctx, `SELECT `+schema.NowNs+` - ?`, grace.Nanoseconds()).Scan(&cutoff); err != nil {
			return err
		}
		roots, err := refRoots(ctx, tx, liveWorkspaces)
		if err != nil {
			return err
		}
		young, err := youngRoots(ctx, tx, cutoff)
		if err != nil {
			return err
		}
		if err := markFrom(ctx, tx, append(roots, young...), live, &st); err != nil {
			return fmt.Errorf("mark: %w", err)
		}
		if err := sweepShared(ctx, tx, live, cutoff, &st, opts.DryRun); err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	if !opts.DryRun {
		if err := s.deleteDeadPacks(ctx, &st); err != nil {
			return st, fmt.Errorf("gc: %w", err)
		}
		if err := s.deleteOrphanPacks(ctx, grace, &st); err != nil {
			return st, fmt.Errorf("gc: %w", err)
		}
		if err := s.sweepCache(live, &st); err != nil {
			return st, fmt.Errorf("gc: cache: %w", err)
		}
	}
	if st.DiskAfter, err = s.sharedFootprint(ctx); err != nil {
		return st, fmt.Errorf("gc: %w", err)
	}
	st.Reclaimed = st.DiskBefore - st.DiskAfter
	st.Duration = time.Since(start)
	s.Log.Info("gc done", "node", s.Node, "reclaimed", st.Reclaimed, "dead_objects", st.DeadObjects,
		"dead_chunks", st.DeadChunks, "packs_deleted", st.PacksDeleted, "orphan_packs", st.OrphanPacks)
	return st, nil
}

// youngRoots lists the objects stored (or found by a probe) since cutoff.
func youngRoots(ctx context.Context, tx *sqltx.Tx, cutoff int64) ([]root, error) {
	return sqltx.ScanAll(ctx, tx, func(s sqltx.Scanner) (root, error) {
		var b []byte
		var k int64
		err := s.Scan(&b, &k)
		r := root{k: object.Kind(k), via: "an object stored within the grace period"}
		copy(r.id[:], b)
		return r, err
	}, `SELECT id, kind FROM objects WHERE created >= ?`, cutoff)
}

// sweepShared deletes the rows older than cutoff that live does not hold,
// each DELETE checking the age again on the row's latest version.
func sweepShared(ctx context.Context, tx *sqltx.Tx, live *liveSet, cutoff int64, st *GCStats, dryRun bool) error {
	ids := func(q string, keep func(object.ID) bool) ([][]byte, error) {
		all, err := sqltx.ScanAll(ctx, tx, func(s sqltx.Scanner) ([]byte, error) {
			var b []byte
			return b, s.Scan(&b)
		}, q, cutoff)
		if err != nil {
			return nil, err
		}
		var dead [][]byte
		for _, b := range all {
			var id object.ID
			copy(id[:], b)
			if !keep(id) {
				dead = append(dead, b)
			}
		}
		return dead, nil
	}
	deadObjs, err := ids(`SELECT id FROM objects WHERE created < ?`, func(id object.ID) bool { _, ok := live.objects[id]; return ok })
	if err != nil {
		return err
	}
	deadChunks, err := ids(`SELECT id FROM chunks WHERE created < ?`, func(id object.ID) bool { _, ok := live.chunks[id]; return ok })
	if err != nil {
		return err
	}
	if dryRun {
		st.DeadObjects, st.DeadChunks = int64(len(deadObjs)), int64(len(deadChunks))
		return nil
	}
	for i := 0; i < len(deadObjs); i += deleteGroup {
		group := deadObjs[i:min(i+deleteGroup, len(deadObjs))]
		res, err := tx.Exec(ctx, `DELETE FROM objects WHERE id = ANY(?) AND created < ?`, group, cutoff)
		if err != nil {
			return fmt.Errorf("delete objects: %w", err)
		}
		n, _ := res.RowsAffected()
		st.DeadObjects += n
	}
	for i := 0; i < len(deadChunks); i += deleteGroup {
		group := deadChunks[i:min(i+deleteGroup, len(deadChunks))]
		var n, bytes int64
		err := tx.Row(ctx, `WITH d AS (DELETE FROM chunks WHERE id = ANY(?) AND created < ? RETURNING len)
			SELECT count(*), COALESCE(sum(len), 0) FROM d`, group, cutoff).Scan(&n, &bytes)
		if err != nil {
			return fmt.Errorf("delete chunks: %w", err)
		}
		st.DeadChunks += n
		st.DeadChunkBytes += bytes
	}
	return dropDeadDerivations(ctx, tx)
}

// deleteDeadPacks deletes the pack objects no chunk row names, then their
// rows. Chunk rows commit with their pack's row, never later, so a pack
// without chunk rows stays without them.
func (s *Store) deleteDeadPacks(ctx context.Context, st *GCStats) error {
	type pack struct {
		num int64
		key string
	}
	var dead []pack
	err := s.WithTx(ctx, sqltx.Read, func(tx *sqltx.Tx) error {
		var err error
		dead, err = sqltx.ScanAll(ctx, tx, func(s sqltx.Scanner) (pack, error) {
			var p pack
			return p, s.Scan(&p.num, &p.key)
		}, `SELECT num, key FROM packs p WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.pack = p.num) ORDER BY num`)
		return err
	})
	if err != nil {
		return fmt.Errorf("list dead packs: %w", err)
	}
	for _, p := range dead {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.Bucket.S3().Delete(ctx, p.key); err != nil {
			return fmt.Errorf("delete pack %d: %w", p.num, err)
		}
		err := s.WithTx(ctx, sqltx.Insert, func(tx *sqltx.Tx) error {
			_, err := tx.Exec(ctx, `DELETE FROM packs WHERE num = ?`, p.num)
			return err
		})
		if err != nil {
			return fmt.Errorf("unindex pack %d: %w", p.num, err)
		}
		s.Bucket.Forget(p.num)
		s.Log.Debug("gc removed pack", "pack", p.key)
		st.PacksDeleted++
	}
	return nil
}

// deleteOrphanPacks deletes pack objects that no row names and that are
// older than grace: uploads whose batch never committed (its host died, or
// its Flush failed after the upload). A younger one may belong to a flush
// about to commit.
func (s *Store) deleteOrphanPacks(ctx context.Context, grace time.Duration, st *GCStats) error {
	objs, err := s.Bucket.S3().List(ctx, bucketpack.KeyPrefix)
	if err != nil {
		return err
	}
	named := map[string]bool{}
	err = s.WithTx(ctx, sqltx.Read, func(tx *sqltx.Tx) error {
		keys, err := sqltx.ScanAll(ctx, tx, func(s sqltx.Scanner) (string, error) {
			var k string
			return k, s.Scan(&k)
		}, `SELECT key FROM packs`)
		for _, k := range keys {
			named[k] = true
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("list packs: %w", err)
	}
	for _, o := range objs {
		if named[o.Key] || !strings.HasSuffix(o.Key, ".pack") || time.Since(o.Modified) < grace {
			continue
		}
		if err := s.Bucket.S3().Delete(ctx, o.Key); err != nil {
			return fmt.Errorf("delete orphan pack: %w", err)
		}
		s.Log.Debug("gc removed orphan pack", "pack", o.Key)
		st.OrphanPacks++
	}
	return nil
}

// sharedFootprint is the bytes of the pack objects in the bucket and of
// this host's cache of materialised files.
func (s *Store) sharedFootprint(ctx context.Context) (int64, error) {
	objs, err := s.Bucket.S3().List(ctx, bucketpack.KeyPrefix)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, o := range objs {
		total += o.Size
	}
	n, err := diskusage.Tree(s.CacheDir, cache.TrustedDir)
	if err != nil && !os.IsNotExist(err) {
		return 0, err
	}
	return total + n, nil
}
