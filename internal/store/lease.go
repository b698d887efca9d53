package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/store/schema"
	"layerfs.dev/layerfs/internal/store/sqltx"
)

// A host's lease on a shared Store: a row (node, expires) on the
// database's clock, so that hosts' clocks need not agree. Every process
// that has a host's directory open renews it (the daemon, for as long as it
// runs); when the host dies nothing renews it, it expires, and the host's
// workspace records stop keeping their commits alive for GC. A clean Close
// leaves the lease to expire rather than dropping it, so that a daemon
// restarted within the TTL finds its workspaces' bases still there.

// DefaultLeaseTTL is a lease's life when Options.LeaseTTL is zero; it is
// renewed every quarter of it.
const DefaultLeaseTTL = 2 * time.Minute

// leaseKeeper renews this host's lease until stopped.
type leaseKeeper struct {
	stop chan struct{}
	done sync.WaitGroup
}

// RenewLease extends this host's lease to the database's now plus the TTL
// (Options.LeaseTTL). Open on a shared Store renews it once and then every
// quarter of the TTL until Close; RenewLease is for a caller that wants it
// done now. It does nothing on an embedded Store.
func (db *DB) RenewLease(ctx context.Context) error {
	if !db.d.Postgres {
		return nil
	}
	err := db.withTx(ctx, txInsert, func(tx *tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO leases(node, expires) VALUES (?, `+schema.NowNs+` + ?)
			ON CONFLICT (node) DO UPDATE SET expires = excluded.expires`, db.node, db.opts.LeaseTTL.Nanoseconds())
		return err
	})
	if err != nil {
		return fmt.Errorf("renew the lease of host %s: %w", db.node, err)
	}
	return nil
}

// keepLease renews the lease now, then in the background every quarter of
// the TTL. A failed renewal is logged and tried again at the next tick: a
// host cut off from the database for longer than the TTL is taken for dead.
func (db *DB) keepLease(ctx context.Context) error {
	if err := db.RenewLease(ctx); err != nil {
		return err
	}
	k := &leaseKeeper{stop: make(chan struct{})}
	k.done.Add(1)
	go func() {
		defer k.done.Done()
		t := time.NewTicker(db.opts.LeaseTTL / 4)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), db.opts.LeaseTTL/4)
			if err := db.RenewLease(ctx); err != nil {
				db.log.Warn("lease not renewed", "node", db.node, "err", err)
			}
			cancel()
		}
	}()
	db.lease = k
	return nil
}

// stopLease ends the renewals (the lease itself expires on its own).
func (db *DB) stopLease() {
	if db.lease != nil {
		close(db.lease.stop)
		db.lease.done.Wait()
		db.lease = nil
	}
}

// Lease is one host's lease as GC sees it.
type Lease struct {
	Node    string    `json:"node"`
	Expires time.Time `json:"expires"` // on the database's clock
	Live    bool      `json:"live"`
}

// Leases lists the hosts' leases of a shared Store, by node (none on an
// embedded Store).
func (db *DB) Leases(ctx context.Context) ([]Lease, error) {
	if !db.d.Postgres {
		return nil, nil
	}
	var out []Lease
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		out, err = sqltx.ScanAll(ctx, tx, func(s scanner) (Lease, error) {
			var l Lease
			var exp int64
			err := s.Scan(&l.Node, &exp, &l.Live)
			l.Expires = fromNs(exp)
			return l, err
		}, `SELECT node, expires, expires > `+schema.NowNs+` FROM leases ORDER BY node`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return out, nil
}
