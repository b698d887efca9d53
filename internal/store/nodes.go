package store

import (
	"context"
	"fmt"
	"time"

	"layerfs.dev/layerfs/internal/store/schema"
	"layerfs.dev/layerfs/internal/store/sqltx"
	"layerfs.dev/layerfs/wire/errclass"
)

// The hosts of a shared Store (a fleet): each daemon records its host
// (Node), the address it answers on and a heartbeat, so that any daemon
// can say where a workspace of another host is served, and whether that
// host's daemon answers now. Times are the database's, so hosts' clocks
// need not agree. A lease (lease.go) is another thing: it keeps a host's
// workspaces' commits alive for GC, is renewed by any process that opens
// the host's directory, and outlives a clean stop.

// Heartbeats of a fleet's daemons: a daemon calls Heartbeat every
// NodeHeartbeat; a host not heard from for NodeExpiry is not live.
const (
	NodeHeartbeat = 5 * time.Second
	NodeExpiry    = 30 * time.Second
)

// ErrNotShared is an operation of a shared Store asked of an embedded one.
var ErrNotShared = errclass.New(errclass.Invalid, "not a shared store (PostgreSQL and S3)")

// Node is one host of a shared Store.
type Node struct {
	Name    string
	Address string    // where its daemon answers ("" when it advertises none)
	Seen    time.Time // its last heartbeat, on the database's clock
	Live    bool      // running, and heard from within NodeExpiry
}

// nodeColumns are a Node's columns of nodes n, liveness computed on the
// database's clock (the one placeholder is NodeExpiry in nanoseconds).
const nodeColumns = `n.name, n.address, n.seen, n.up AND n.seen > ` + schema.NowNs + ` - ?`

func scanNode(s scanner) (Node, error) {
	var n Node
	var seen int64
	err := s.Scan(&n.Name, &n.Address, &seen, &n.Live)
	n.Seen = fromNs(seen)
	return n, err
}

// Heartbeat records this host's daemon as running and answering at
// address ("" for none), now. A shared Store's daemon calls it every
// NodeHeartbeat.
func (db *DB) Heartbeat(ctx context.Context, address string) error {
	if !db.d.Postgres {
		return fmt.Errorf("heartbeat: %w", ErrNotShared)
	}
	err := db.withTx(ctx, txInsert, func(tx *tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO nodes(name, address, seen, up) VALUES (?, ?, `+schema.NowNs+`, true)
			ON CONFLICT (name) DO UPDATE SET address = excluded.address, seen = excluded.seen, up = true`, db.node, address)
		return err
	})
	if err != nil {
		return fmt.Errorf("heartbeat of node %s: %w", db.node, err)
	}
	return nil
}

// Retire records that this host's daemon stopped: it is no longer live
// (its workspaces stay recorded, for it to serve again when it restarts).
func (db *DB) Retire(ctx context.Context) error {
	if !db.d.Postgres {
		return fmt.Errorf("retire: %w", ErrNotShared)
	}
	err := db.withTx(ctx, txInsert, func(tx *tx) error {
		_, err := tx.Exec(ctx, `UPDATE nodes SET up = false, seen = `+schema.NowNs+` WHERE name = ?`, db.node)
		return err
	})
	if err != nil {
		return fmt.Errorf("retire node %s: %w", db.node, err)
	}
	return nil
}

// Nodes lists the hosts whose daemons have run on the shared Store, by
// name (none on an embedded Store).
func (db *DB) Nodes(ctx context.Context) ([]Node, error) {
	if !db.d.Postgres {
		return nil, nil
	}
	var out []Node
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		out, err = sqltx.ScanAll(ctx, tx, scanNode, `SELECT `+nodeColumns+` FROM nodes n ORDER BY n.name`, NodeExpiry.Nanoseconds())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// WorkspaceNode is the host that serves workspace id, whichever host
// records it: ErrNotFound when none does (always, on an embedded Store).
// A host that recorded workspaces but never ran a daemon with a heartbeat
// has only its Name.
func (db *DB) WorkspaceNode(ctx context.Context, id string) (Node, error) {
	if !db.d.Postgres {
		return Node{}, fmt.Errorf("workspace %q: %w", id, ErrNotFound)
	}
	n, err := readOne(ctx, db, scanNode, `SELECT r.node, COALESCE(n.address, ''), COALESCE(n.seen, 0),
		COALESCE(n.up AND n.seen > `+schema.NowNs+` - ?, false)
		FROM workspace_records r LEFT JOIN nodes n ON n.name = r.node WHERE r.id = ?`, NodeExpiry.Nanoseconds(), id)
	if err != nil {
		return Node{}, fmt.Errorf("workspace %q: %w", id, err)
	}
	if n.Seen.UnixNano() == 0 {
		n.Seen = time.Time{}
	}
	return n, nil
}

// FleetWorkspaces lists every host's workspace records by creation time,
// each with its Node; on an embedded Store, Workspaces.
func (db *DB) FleetWorkspaces(ctx context.Context) ([]Workspace, error) {
	if !db.d.Postgres {
		return db.Workspaces(ctx)
	}
	var out []Workspace
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		out, err = sqltx.ScanAll(ctx, tx, func(s scanner) (Workspace, error) {
			var node string
			w, err := scanWorkspaceAnd(s, &node)
			w.Node = node
			return w, err
		}, `SELECT `+workspaceColumns+`, node FROM workspace_records ORDER BY created, id`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list the fleet's workspaces: %w", err)
	}
	return out, nil
}
