package store

import (
	"context"
	"fmt"
	"time"

	"layerfs.dev/layerfs/internal/store/sqltx"
)

// Workspace is the durable record of a workspace, so that the engine can
// find (and clean up or remount) its workspaces after a crash. The store
// keeps the record and protects Base and Head from GC; the engine owns
// what the fields mean.
type Workspace struct {
	ID        string    `json:"id"`
	Project   string    `json:"project"`
	Branch    string    `json:"branch"`
	Base      ID        `json:"base"` // the commit the workspace was mounted on
	Head      ID        `json:"head"` // its latest commit (Base until one is made)
	MountPath string    `json:"mount_path"`
	UpperDir  string    `json:"upper_dir"`
	State     string    `json:"state"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
	Options   []byte    `json:"options,omitempty"` // JSON owned by the engine
	// Image is the commit the workspace's root file system lies over (an
	// image's), ZeroID for none; the store keeps it from GC as it keeps
	// Base and Head. It never changes.
	Image ID `json:"image,omitempty"`
	// Node is the host that serves the workspace in a shared Store (this
	// host's, except in FleetWorkspaces); "" in an embedded Store.
	Node string `json:"node,omitempty"`
}

// CreateWorkspace records a new workspace. ID must be a valid name; the
// project must exist; Base, Head and Image, when not zero, must be stored
// commits.
// Created and Updated are set by the store.
func (db *DB) CreateWorkspace(ctx context.Context, w Workspace) (Workspace, error) {
	if err := ValidName(w.ID); err != nil {
		return Workspace{}, fmt.Errorf("create workspace: %w", err)
	}
	now := nowNs()
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		if err := requireProject(ctx, tx, w.Project); err != nil {
			return err
		}
		if err := requireCommits(ctx, tx, w.Base, w.Head, w.Image); err != nil {
			return err
		}
		return tx.ExecOne(ctx, ErrExists, `INSERT INTO workspaces(id, project, branch, base, head, mount_path, upper_dir, state, created, updated, options, image)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			w.ID, w.Project, w.Branch, w.Base[:], w.Head[:], w.MountPath, w.UpperDir, w.State, now, now, w.Options, nullID(w.Image))
	})
	if err != nil {
		return Workspace{}, fmt.Errorf("create workspace %q: %w", w.ID, err)
	}
	w.Created, w.Updated, w.Node = fromNs(now), fromNs(now), db.node
	return w, nil
}

func requireCommits(ctx context.Context, tx *tx, ids ...ID) error {
	for _, id := range ids {
		if id.IsZero() {
			continue
		}
		if err := requireCommit(ctx, tx, id); err != nil {
			return err
		}
	}
	return nil
}

const (
	workspaceColumns = `id, project, branch, base, head, mount_path, upper_dir, state, created, updated, options, image`
	workspaceSelect  = `SELECT ` + workspaceColumns + ` FROM workspaces`
)

func scanWorkspace(s scanner) (Workspace, error) { return scanWorkspaceAnd(s) }

// scanWorkspaceAnd scans workspaceSelect's columns, then those of extra.
func scanWorkspaceAnd(s scanner, extra ...any) (Workspace, error) {
	var w Workspace
	var base, head, image []byte
	var created, updated int64
	err := s.Scan(append([]any{&w.ID, &w.Project, &w.Branch, &base, &head, &w.MountPath, &w.UpperDir, &w.State, &created, &updated, &w.Options, &image}, extra...)...)
	copy(w.Base[:], base)
	copy(w.Head[:], head)
	copy(w.Image[:], image)
	w.Created, w.Updated = fromNs(created), fromNs(updated)
	return w, err
}

// Workspace returns one workspace record.
func (db *DB) Workspace(ctx context.Context, id string) (Workspace, error) {
	w, err := readOne(ctx, db, scanWorkspace, workspaceSelect+` WHERE id = ?`, id)
	if err != nil {
		return Workspace{}, fmt.Errorf("workspace %q: %w", id, err)
	}
	w.Node = db.node
	return w, nil
}

// Workspaces lists all workspace records by creation time.
func (db *DB) Workspaces(ctx context.Context) ([]Workspace, error) {
	var out []Workspace
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		out, err = sqltx.ScanAll(ctx, tx, scanWorkspace, workspaceSelect+` ORDER BY created, id`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	for i := range out {
		out[i].Node = db.node
	}
	return out, nil
}

// UpdateWorkspace replaces a record's Branch, Base, Head, MountPath,
// UpperDir, State and Options (ID, Project and Created stay). It returns
// the stored record.
func (db *DB) UpdateWorkspace(ctx context.Context, w Workspace) (Workspace, error) {
	var out Workspace
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		if err := requireCommits(ctx, tx, w.Base, w.Head); err != nil {
			return err
		}
		if err := tx.ExecOne(ctx, ErrNotFound, `UPDATE workspaces SET branch = ?, base = ?, head = ?, mount_path = ?, upper_dir = ?, state = ?, options = ?, updated = ?
			WHERE id = ?`, w.Branch, w.Base[:], w.Head[:], w.MountPath, w.UpperDir, w.State, w.Options, nowNs(), w.ID); err != nil {
			return err
		}
		var err error
		out, err = scanWorkspace(tx.Row(ctx, workspaceSelect+` WHERE id = ?`, w.ID))
		return err
	})
	if err != nil {
		return Workspace{}, fmt.Errorf("update workspace %q: %w", w.ID, err)
	}
	out.Node = db.node
	return out, nil
}

// DeleteWorkspace removes a record; what it protected from GC is then
// collectable. The upper directory is the engine's to remove.
func (db *DB) DeleteWorkspace(ctx context.Context, id string) error {
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		return tx.ExecOne(ctx, ErrNotFound, `DELETE FROM workspaces WHERE id = ?`, id)
	})
	if err != nil {
		return fmt.Errorf("delete workspace %q: %w", id, err)
	}
	return nil
}

// nullID is id as a column value: NULL for ZeroID.
func nullID(id ID) any {
	if id.IsZero() {
		return nil
	}
	return id[:]
}
