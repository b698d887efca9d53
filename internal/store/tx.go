package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/sqltx"
)

// Counters are the Store's figures: the work of every request and of
// none, since the DB was opened (its totals, Counters), or of one request
// (Account). What one request cost is its account, never a difference of
// totals, which other requests move too (package account).
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

// Sub returns c minus prev: what happened between two snapshots of the
// totals (of the whole DB: in a daemon, every request's work and more).
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

// Counters returns the DB's totals since it was opened.
func (db *DB) Counters() Counters { return countersOf(&db.total) }

// Account returns the figures of the Store work counted in a (a request's
// account: see package account).
func Account(a *account.Account) Counters { return countersOf(a) }

func countersOf(a *account.Account) Counters {
	f := a.Figures()
	return Counters{
		Transactions: f.Transactions, TxTime: f.TxTime, Statements: f.Statements, Rows: f.Rows,
		PackBytesWritten: f.PackBytesWritten, PackBytesRead: f.PackBytesRead, PackSyncs: f.PackSyncs,
		ChunksWritten: f.ChunksWritten, ChunksReused: f.ChunksReused, ChunksRead: f.ChunksRead,
		TreeCacheHits: f.TreeCacheHits, TreeCacheMisses: f.TreeCacheMisses, CacheBytes: f.CacheBytes,
	}
}

// count adds n to figure f of the DB's totals and of the account of the
// request ctx is of, if any.
func (db *DB) count(ctx context.Context, f account.Figure, n int64) {
	account.Charge(ctx, &db.total, f, n)
}

// countIn adds n to figure f of the DB's totals and of a (a request's
// account, taken from its context when its work was handed over).
func (db *DB) countIn(a *account.Account, f account.Figure, n int64) {
	db.total.Add(f, n)
	a.Add(f, n)
}

// countTally adds t to the DB's totals and to a.
func (db *DB) countTally(a *account.Account, t *account.Tally) {
	db.total.AddTally(t)
	a.AddTally(t)
}

type txMode = sqltx.Mode

const (
	txRead   = sqltx.Read
	txWrite  = sqltx.Write
	txInsert = sqltx.Insert
)

// refLock is the PostgreSQL advisory lock every txWrite takes first: it
// serialises reference changes across all hosts as SQLite's single writer
// does on one, so read-check-write sequences (a compare-and-swap, the next
// layer number) see every earlier commit.
const refLock = 0x4c61796572465321 // "LayerFS!"

// tx is a transaction whose statements are counted (package sqltx); it
// is added to the totals and the request's account when it ends.
type tx = sqltx.Tx

// scanner is a row, or the current row of rows.
type scanner = sqltx.Scanner

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
	t := sqltx.New(stx, &db.d)
	defer func() {
		tally := t.Tally()
		tally[account.Transactions]++
		tally[account.TxNs] += int64(time.Since(start))
		db.countTally(account.From(ctx), tally)
	}()
	if mode == txWrite && db.d.Postgres {
		if _, err := t.Exec(ctx, `SELECT pg_advisory_xact_lock(?)`, int64(refLock)); err != nil {
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

// readOne reads the one row a query returns with scan, in a read
// transaction of its own; no row is ErrNotFound.
func readOne[T any](ctx context.Context, db *DB, scan func(scanner) (T, error), q string, args ...any) (T, error) {
	var v T
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		v, err = scan(tx.Row(ctx, q, args...))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	return v, err
}

func toID(b []byte) ID {
	var id ID
	copy(id[:], b)
	return id
}
