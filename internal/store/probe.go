package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"time"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/store/maintenance"
	"layerfs.dev/layerfs/internal/store/schema"
)

// dedupProbe answers "is this id stored?" for a batch.
type dedupProbe interface {
	has(id ID, objects bool) (bool, error)
	// concurrent: has may be called from several goroutines at once.
	concurrent() bool
	close()
}

// openProbe opens a batch's probe; its statements are counted in a, the
// batch's account.
func (db *DB) openProbe(ctx context.Context, a *account.Account) (dedupProbe, error) {
	if db.d.Postgres {
		return &pgProbe{db: db, acct: a}, nil
	}
	return openProber(ctx, db, a)
}

// pgProbe asks PostgreSQL one id at a time, outside any transaction: a
// chunk another host stores meanwhile merely looks new, as with SQLite's
// snapshot (its pack bytes become dead bytes). pgx prepares and caches the
// statements per connection.
//
// A row it finds older than maintenance.ProbeRefresh it makes young again (one UPDATE,
// which fails to find the row if GC deleted it meanwhile: then the id is
// not stored), so that fleet GC, which spares young rows, keeps what this
// batch is about to name (gcshared.go).
type pgProbe struct {
	db   *DB
	acct *account.Account
}

func (p *pgProbe) has(id ID, objects bool) (bool, error) {
	table := "chunks"
	if objects {
		table = "objects"
	}
	p.db.countIn(p.acct, account.Statements, 1)
	start := time.Now()
	defer func() { p.db.countIn(p.acct, account.TxNs, int64(time.Since(start))) }()
	ctx := context.Background()
	var stale bool
	err := p.db.r.QueryRowContext(ctx, `SELECT created < `+schema.NowNs+` - $2 FROM `+table+` WHERE id = $1`,
		id[:], maintenance.ProbeRefresh.Nanoseconds()).Scan(&stale)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	p.db.countIn(p.acct, account.Rows, 1)
	if !stale {
		return true, nil
	}
	p.db.countIn(p.acct, account.Statements, 1)
	res, err := p.db.w.ExecContext(ctx, `UPDATE `+table+` SET created = `+schema.NowNs+` WHERE id = $1`, id[:])
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (p *pgProbe) concurrent() bool { return true }

func (p *pgProbe) close() {}

// prober answers "is this id stored?" for a batch: the hot path of capture
// (one probe per chunk) and the one place SQL runs outside withTx, because
// its transaction spans PutChunk calls and so cannot be a closure.
//
// Two measured costs shape it (modernc.org/sqlite, this machine kind): an
// autocommit SELECT sets up a WAL read snapshot every time, and
// database/sql allocates a Rows, a context and dependency-map entries per
// query; together about 4x the cost of the lookup itself. So the probes run
// in one read transaction, on a connection the prober owns, through the
// driver's prepared statements. A chunk another process stores after the
// snapshot began merely looks new: it is written again, the index keeps one
// copy and the other becomes dead pack bytes for GC.
type prober struct {
	db         *DB
	conn       *sql.Conn
	chunk, obj driver.Stmt // SELECT 1 FROM chunks|objects WHERE id = ?
	args       []driver.NamedValue
	dest       []driver.Value
	inTx       bool
	// tally counts the probes (one goroutine at a time: concurrent), added
	// to the totals and to acct, the batch's account, at close.
	tally account.Tally
	acct  *account.Account
}

func openProber(ctx context.Context, db *DB, a *account.Account) (_ *prober, err error) {
	c, err := db.r.Conn(ctx)
	if err != nil {
		return nil, err
	}
	p := &prober{db: db, conn: c, args: make([]driver.NamedValue, 1), dest: make([]driver.Value, 1), acct: a}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	err = c.Raw(func(dc any) error {
		prep, ok := dc.(driver.ConnPrepareContext)
		exec, ok2 := dc.(driver.ExecerContext)
		if !ok || !ok2 {
			return fmt.Errorf("sqlite driver lacks prepared statements")
		}
		if _, err := exec.ExecContext(ctx, `BEGIN`, nil); err != nil {
			return err
		}
		p.inTx = true
		var err error
		if p.chunk, err = prep.PrepareContext(ctx, `SELECT 1 FROM chunks WHERE id = ?`); err != nil {
			return err
		}
		p.obj, err = prep.PrepareContext(ctx, `SELECT 1 FROM objects WHERE id = ?`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open dedup probe: %w", err)
	}
	return p, nil
}

// has reports whether the chunk (or, with objects, the manifest, tree or
// commit) id is stored.
func (p *prober) has(id ID, objects bool) (bool, error) {
	s := p.chunk
	if objects {
		s = p.obj
	}
	p.tally[account.Statements]++
	start := time.Now()
	defer func() { p.tally[account.TxNs] += int64(time.Since(start)) }()
	var found bool
	err := p.conn.Raw(func(any) error {
		p.args[0] = driver.NamedValue{Ordinal: 1, Value: id[:]}
		rows, err := s.(driver.StmtQueryContext).QueryContext(context.Background(), p.args)
		if err != nil {
			return err
		}
		err = rows.Next(p.dest)
		found = err == nil
		if cerr := rows.Close(); cerr != nil && (err == nil || errors.Is(err, io.EOF)) {
			return cerr
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		return nil
	})
	if found {
		p.tally[account.Rows]++
	}
	return found, err
}

// concurrent: the prober's one connection and arguments serve one probe
// at a time.
func (p *prober) concurrent() bool { return false }

// close ends the snapshot and returns the connection to the pool.
func (p *prober) close() {
	p.conn.Raw(func(dc any) error {
		for _, s := range []driver.Stmt{p.chunk, p.obj} {
			if s != nil {
				s.Close()
			}
		}
		if p.inTx {
			if exec, ok := dc.(driver.ExecerContext); ok {
				exec.ExecContext(context.Background(), `ROLLBACK`, nil)
			}
		}
		return nil
	})
	p.conn.Close()
	// One transaction; its time is what the probes took (added per
	// probe), not how long the snapshot stayed open.
	p.tally[account.Transactions]++
	p.db.countTally(p.acct, &p.tally)
	p.tally = account.Tally{}
}
