package sqltx

import (
	"context"
	"database/sql"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/schema"
)

// Mode is what a transaction may do, which decides where it runs.
type Mode int

const (
	// Read is a read-only snapshot on the reader pool.
	Read Mode = iota
	// Write is a serialised write: BEGIN IMMEDIATE on SQLite's one writer
	// connection; on PostgreSQL it takes the reference lock first.
	Write
	// Insert inserts immutable, content-addressed rows only: the same as
	// Write on SQLite; on PostgreSQL it skips the reference lock, since
	// two such transactions cannot conflict (ON CONFLICT DO NOTHING).
	Insert
)

// Tx is a transaction whose statements are counted (see the package
// comment).
type Tx struct {
	tx    *sql.Tx
	d     *schema.Dialect
	tally account.Tally
}

// New wraps tx, whose statements run in dialect d.
func New(tx *sql.Tx, d *schema.Dialect) *Tx { return &Tx{tx: tx, d: d} }

// Tally is what the transaction's statements did so far; its owner adds
// the transaction itself and charges it when the transaction ends.
func (t *Tx) Tally() *account.Tally { return &t.tally }

// Raw is the database/sql transaction, for statements that are neither
// counted nor translated (reading the schema's version before migrating).
func (t *Tx) Raw() *sql.Tx { return t.tx }

// Postgres reports whether the transaction runs on PostgreSQL.
func (t *Tx) Postgres() bool { return t.d.Postgres }

// Exec runs a statement that returns no rows.
func (t *Tx) Exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	t.tally[account.Statements]++
	res, err := t.tx.ExecContext(ctx, t.d.SQL(q), args...)
	if err == nil {
		if n, err := res.RowsAffected(); err == nil {
			t.tally[account.Rows] += n
		}
	}
	return res, err
}

// ExecOne runs a statement that changes at most one row and returns none
// when it changed nothing (a conflict, or no such row).
func (t *Tx) ExecOne(ctx context.Context, none error, q string, args ...any) error {
	res, err := t.Exec(ctx, q, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return none
	}
	return nil
}

// Row runs a query expected to return at most one row.
func (t *Tx) Row(ctx context.Context, q string, args ...any) *sql.Row {
	t.tally[account.Statements]++
	t.tally[account.Rows]++
	return t.tx.QueryRowContext(ctx, t.d.SQL(q), args...)
}

// Query runs a query; each call of Next counts a row.
func (t *Tx) Query(ctx context.Context, q string, args ...any) (*Rows, error) {
	t.tally[account.Statements]++
	r, err := t.tx.QueryContext(ctx, t.d.SQL(q), args...)
	if err != nil {
		return nil, err
	}
	return &Rows{Rows: r, t: t}, nil
}

// Prepare makes a statement for repeated use inside this transaction.
func (t *Tx) Prepare(ctx context.Context, q string) (*Stmt, error) {
	s, err := t.tx.PrepareContext(ctx, t.d.SQL(q))
	if err != nil {
		return nil, err
	}
	return &Stmt{s: s, t: t}, nil
}

// Scanner is a row, or the current row of Rows.
type Scanner interface{ Scan(dest ...any) error }

// ScanAll runs a query and reads every row it returns with scan.
func ScanAll[T any](ctx context.Context, t *Tx, scan func(Scanner) (T, error), q string, args ...any) ([]T, error) {
	r, err := t.Query(ctx, q, args...)
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

// Rows are a query's rows, counted as they are read.
type Rows struct {
	*sql.Rows
	t *Tx
}

// Next advances to the next row, counting it.
func (r *Rows) Next() bool {
	ok := r.Rows.Next()
	if ok {
		r.t.tally[account.Rows]++
	}
	return ok
}

// Stmt is a prepared statement of a Tx, whose runs are counted.
type Stmt struct {
	s *sql.Stmt
	t *Tx
}

// Exec runs the statement with args.
func (s *Stmt) Exec(ctx context.Context, args ...any) (sql.Result, error) {
	s.t.tally[account.Statements]++
	res, err := s.s.ExecContext(ctx, args...)
	if err == nil {
		if n, err := res.RowsAffected(); err == nil {
			s.t.tally[account.Rows] += n
		}
	}
	return res, err
}

// Row runs the statement as a query of at most one row.
func (s *Stmt) Row(ctx context.Context, args ...any) *sql.Row {
	s.t.tally[account.Statements]++
	s.t.tally[account.Rows]++
	return s.s.QueryRowContext(ctx, args...)
}

// Close releases the statement.
func (s *Stmt) Close() error { return s.s.Close() }
