package store

import (
	"context"
	"fmt"
	"time"

	"layerfs.dev/layerfs/internal/store/sqltx"
)

// PortShare is the durable record of a share of a workspace's port: the
// token a request carries to reach the port without the daemon's own
// authority. A workspace has at most one share per port; deleting it
// revokes the token for good. The engine owns what it means.
type PortShare struct {
	Token     string    `json:"token"`
	Workspace string    `json:"workspace"`
	Port      int       `json:"port"`
	Public    bool      `json:"public,omitempty"`
	Created   time.Time `json:"created"`
}

// CreatePortShare records a share; ErrExists when the workspace's port is
// shared already or the token is taken. Created is set by the store.
func (db *DB) CreatePortShare(ctx context.Context, s PortShare) (PortShare, error) {
	now := nowNs()
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		return tx.ExecOne(ctx, ErrExists, `INSERT INTO port_shares(token, workspace, port, public, created)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, s.Token, s.Workspace, s.Port, s.Public, now)
	})
	if err != nil {
		return PortShare{}, fmt.Errorf("share port %d of %s: %w", s.Port, s.Workspace, err)
	}
	s.Created = fromNs(now)
	return s, nil
}

const portShareSelect = `SELECT token, workspace, port, public, created FROM port_shares`

func scanPortShare(s scanner) (PortShare, error) {
	var p PortShare
	var created int64
	err := s.Scan(&p.Token, &p.Workspace, &p.Port, &p.Public, &created)
	p.Created = fromNs(created)
	return p, err
}

// PortShareByToken returns the share a token names; ErrNotFound when none
// does (never was, or was revoked).
func (db *DB) PortShareByToken(ctx context.Context, token string) (PortShare, error) {
	p, err := readOne(ctx, db, scanPortShare, portShareSelect+` WHERE token = ?`, token)
	if err != nil {
		return PortShare{}, fmt.Errorf("port share: %w", err)
	}
	return p, nil
}

// PortShares lists the shares of a workspace by port.
func (db *DB) PortShares(ctx context.Context, workspace string) ([]PortShare, error) {
	var out []PortShare
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		out, err = sqltx.ScanAll(ctx, tx, scanPortShare, portShareSelect+` WHERE workspace = ? ORDER BY port`, workspace)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("port shares of %s: %w", workspace, err)
	}
	return out, nil
}

// DeletePortShares revokes the shares of a workspace's port, or, with
// port 0, all of the workspace's; it returns how many there were.
func (db *DB) DeletePortShares(ctx context.Context, workspace string, port int) (int, error) {
	var n int64
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		q, args := `DELETE FROM port_shares WHERE workspace = ?`, []any{workspace}
		if port != 0 {
			q, args = q+` AND port = ?`, append(args, port)
		}
		res, err := tx.Exec(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("revoke port shares of %s: %w", workspace, err)
	}
	return int(n), nil
}
