package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"layerfs.dev/layerfs/internal/store/pack"
	"layerfs.dev/layerfs/internal/store/schema"
)

// Counters are cumulative totals since the DB was opened. Take one before
// and one after an operation and Sub them for the operation's receipt.
type Counters struct {
	Transactions     int64         `json:"transactions"`
	TxTime           time.Duration `json:"tx_time_ns"` // total time inside transactions
	Statements       int64         `json:"statements"`
	Rows             int64         `json:"rows"` // rows read plus rows changed
	PackBytesWritten int64         `json:"pack_bytes_written"`
	PackBytesRead    int64         `json:"pack_bytes_read"`
	PackSyncs        int64         `json:"pack_syncs"`
	ChunksWritten    int64         `json:"chunks_written"`
	ChunksReused     int64         `json:"chunks_reused"`
	ChunksRead       int64         `json:"chunks_read"`
	TreeCacheHits    int64         `json:"tree_cache_hits"`
	TreeCacheMisses  int64         `json:"tree_cache_misses"`
	CacheBytes       int64         `json:"cache_bytes_written"` // bytes materialized into cache/
}

// Sub returns c minus prev: what happened between two snapshots.
func (c Counters) Sub(prev Counters) Counters {
	return Counters{
		Transactions:     c.Transactions - prev.Transactions,
		TxTime:           c.TxTime - prev.TxTime,
		Statements:       c.Statements - prev.Statements,
		Rows:             c.Rows - prev.Rows,
		PackBytesWritten: c.PackBytesWritten - prev.PackBytesWritten,
		PackBytesRead:    c.PackBytesRead - prev.PackBytesRead,
		PackSyncs:        c.PackSyncs - prev.PackSyncs,
		ChunksWritten:    c.ChunksWritten - prev.ChunksWritten,
		ChunksReused:     c.ChunksReused - prev.ChunksReused,
		ChunksRead:       c.ChunksRead - prev.ChunksRead,
		TreeCacheHits:    c.TreeCacheHits - prev.TreeCacheHits,
		TreeCacheMisses:  c.TreeCacheMisses - prev.TreeCacheMisses,
		CacheBytes:       c.CacheBytes - prev.CacheBytes,
	}
}

type counters struct {
	transactions, txTime, statements, rows atomic.Int64
	packWritten, packSyncs                 atomic.Int64
	read                                   pack.ReadCounters // packs' bytes and chunks read
	chunksWritten, chunksReused            atomic.Int64
	treeHits, treeMisses                   atomic.Int64
}

// Counters returns the cumulative counters.
func (db *DB) Counters() Counters {
	c := &db.ctr
	var cached int64
	if db.cache != nil {
		cached = db.cache.Placed()
	}
	return Counters{
		Transactions:     c.transactions.Load(),
		TxTime:           time.Duration(c.txTime.Load()),
		Statements:       c.statements.Load(),
		Rows:             c.rows.Load(),
		PackBytesWritten: c.packWritten.Load(),
		PackBytesRead:    c.read.Bytes.Load(),
		PackSyncs:        c.packSyncs.Load(),
		ChunksWritten:    c.chunksWritten.Load(),
		ChunksReused:     c.chunksReused.Load(),
		ChunksRead:       c.read.Chunks.Load(),
		TreeCacheHits:    c.treeHits.Load(),
		TreeCacheMisses:  c.treeMisses.Load(),
		CacheBytes:       cached,
	}
}

type txMode int

const (
	txRead  txMode = iota // a read-only snapshot on the reader pool
	txWrite               // BEGIN IMMEDIATE on the single writer connection
	// txInsert inserts immutable, content-addressed rows only: the same as
	// txWrite on SQLite; on PostgreSQL it skips the reference lock, since
	// two such transactions cannot conflict (ON CONFLICT DO NOTHING).
	txInsert
)

// refLock is the PostgreSQL advisory lock every txWrite takes first: it
// serialises reference changes across all hosts as SQLite's single writer
// does on one, so read-check-write sequences (a compare-and-swap, the next
// layer number) see every earlier commit.
const refLock = 0x4c61796572465321 // "LayerFS!"

// tx is a transaction whose statements are counted.
type tx struct {
	tx   *sql.Tx
	d    *schema.Dialect
	ctr  *counters
	rows int64
}

// withTx runs fn in one transaction: a consistent read snapshot (txRead)
// or a serialised write (txWrite). It commits when fn returns nil and rolls
// back otherwise (joining a rollback error to fn's), and times and counts
// the transaction. Every SQL statement of the package runs through here.
func (db *DB) withTx(ctx context.Context, mode txMode, fn func(*tx) error) (err error) {
	if err := db.check(); err != nil {
		return err
	}
	start := time.Now()
	pool := db.r
	var opts *sql.TxOptions
	if mode == txRead {
		opts = &sql.TxOptions{ReadOnly: true}
		if db.d.Postgres {
			// One snapshot for the whole transaction, as SQLite's.
			opts.Isolation = sql.LevelRepeatableRead
		}
	} else {
		pool = db.w
	}
	stx, err := pool.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	t := &tx{tx: stx, d: &db.d, ctr: &db.ctr}
	defer func() {
		db.ctr.transactions.Add(1)
		db.ctr.rows.Add(t.rows)
		db.ctr.txTime.Add(int64(time.Since(start)))
	}()
	if mode == txWrite && db.d.Postgres {
		if _, err := t.exec(ctx, `SELECT pg_advisory_xact_lock(?)`, int64(refLock)); err != nil {
			stx.Rollback()
			return fmt.Errorf("take the reference lock: %w", err)
		}
	}
	if err := fn(t); err != nil {
		if rerr := stx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			return errors.Join(err, fmt.Errorf("rollback: %w", rerr))
		}
		return err
	}
	if err := stx.Commit(); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return nil
}

func (t *tx) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	t.ctr.statements.Add(1)
	res, err := t.tx.ExecContext(ctx, t.d.SQL(q), args...)
	if err == nil {
		if n, err := res.RowsAffected(); err == nil {
			t.rows += n
		}
	}
	return res, err
}

// execOne runs a statement that changes at most one row and returns none
// when it changed nothing (a conflict, or no such row).
func (t *tx) execOne(ctx context.Context, none error, q string, args ...any) error {
	res, err := t.exec(ctx, q, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return none
	}
	return nil
}

// row runs a query expected to return at most one row.
func (t *tx) row(ctx context.Context, q string, args ...any) *sql.Row {
	t.ctr.statements.Add(1)
	t.rows++
	return t.tx.QueryRowContext(ctx, t.d.SQL(q), args...)
}

// query runs a query; each call of next counts a row.
func (t *tx) query(ctx context.Context, q string, args ...any) (*rows, error) {
	t.ctr.statements.Add(1)
	r, err := t.tx.QueryContext(ctx, t.d.SQL(q), args...)
	if err != nil {
		return nil, err
	}
	return &rows{Rows: r, t: t}, nil
}

// prepare makes a statement for repeated use inside this transaction.
func (t *tx) prepare(ctx context.Context, q string) (*stmt, error) {
	s, err := t.tx.PrepareContext(ctx, t.d.SQL(q))
	if err != nil {
		return nil, err
	}
	return &stmt{s: s, t: t}, nil
}

// scanner is a row, or the current row of rows.
type scanner interface{ Scan(dest ...any) error }

// scanAll runs a query and reads every row it returns with scan.
func scanAll[T any](ctx context.Context, t *tx, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	r, err := t.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []T
	for r.Next() {
		v, err := scan(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, r.Err()
}

// readOne reads the one row a query returns with scan, in a read
// transaction of its own; no row is ErrNotFound.
func readOne[T any](ctx context.Context, db *DB, scan func(scanner) (T, error), q string, args ...any) (T, error) {
	var v T
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		v, err = scan(tx.row(ctx, q, args...))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	return v, err
}

type rows struct {
	*sql.Rows
	t *tx
}

func (r *rows) Next() bool {
	ok := r.Rows.Next()
	if ok {
		r.t.rows++
	}
	return ok
}

type stmt struct {
	s *sql.Stmt
	t *tx
}

func (s *stmt) exec(ctx context.Context, args ...any) (sql.Result, error) {
	s.t.ctr.statements.Add(1)
	res, err := s.s.ExecContext(ctx, args...)
	if err == nil {
		if n, err := res.RowsAffected(); err == nil {
			s.t.rows += n
		}
	}
	return res, err
}

func (s *stmt) row(ctx context.Context, args ...any) *sql.Row {
	s.t.ctr.statements.Add(1)
	s.t.rows++
	return s.s.QueryRowContext(ctx, args...)
}

func (s *stmt) close() error { return s.s.Close() }
