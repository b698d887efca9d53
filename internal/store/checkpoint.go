package store

import (
	"context"
	"fmt"
	"time"

	"layerfs.dev/layerfs/internal/store/sqltx"
)

// Checkpoint is the durable record of a checkpoint of a workspace's
// sandbox: its processes' image and the workspace's files at one instant.
// Commit is a commit of its own whose tree is the image's files (CRIU's
// images, captured like any content: chunked, so that two checkpoints of
// one program share what did not change) and whose first parent is
// Files, the commit of the workspace's files; it stands on no branch, and
// the record is what keeps it (and so the image and the files, with
// their history) from GC. Meta is JSON owned by the engine: what a
// restore needs beside the images.
type Checkpoint struct {
	ID        string    `json:"id"`
	Project   string    `json:"project"`
	Workspace string    `json:"workspace"` // the workspace it was taken of
	Commit    ID        `json:"commit"`
	Files     ID        `json:"files"`
	Message   string    `json:"message,omitempty"`
	Meta      []byte    `json:"meta,omitempty"`
	Created   time.Time `json:"created"`
}

// CreateCheckpoint records a checkpoint. ID must be a valid name; the
// project must exist; Commit and Files must be stored commits, Files
// Commit's first parent. Created is set by the store.
func (db *DB) CreateCheckpoint(ctx context.Context, c Checkpoint) (Checkpoint, error) {
	if err := ValidName(c.ID); err != nil {
		return Checkpoint{}, fmt.Errorf("create checkpoint: %w", err)
	}
	if c.Commit.IsZero() || c.Files.IsZero() {
		return Checkpoint{}, fmt.Errorf("create checkpoint %q: a checkpoint names its image's commit and its files' commit: %w", c.ID, ErrInvalidCheckpoint)
	}
	cm, err := db.Commit(ctx, c.Commit)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("create checkpoint %q: %w", c.ID, err)
	}
	if cm.Parent() != c.Files {
		return Checkpoint{}, fmt.Errorf("create checkpoint %q: commit %s's first parent is %s, not the files' commit %s: %w",
			c.ID, c.Commit.Short(), cm.Parent().Short(), c.Files.Short(), ErrInvalidCheckpoint)
	}
	now := nowNs()
	err = db.withTx(ctx, txWrite, func(tx *tx) error {
		if err := requireProject(ctx, tx, c.Project); err != nil {
			return err
		}
		if err := requireCommits(ctx, tx, c.Commit, c.Files); err != nil {
			return err
		}
		return tx.ExecOne(ctx, ErrExists, `INSERT INTO checkpoints(id, project, workspace, commit_id, files, message, meta, created)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			c.ID, c.Project, c.Workspace, c.Commit[:], c.Files[:], c.Message, c.Meta, now)
	})
	if err != nil {
		return Checkpoint{}, fmt.Errorf("create checkpoint %q: %w", c.ID, err)
	}
	c.Created = fromNs(now)
	return c, nil
}

const checkpointSelect = `SELECT id, project, workspace, commit_id, files, message, meta, created FROM checkpoints`

func scanCheckpoint(s scanner) (Checkpoint, error) {
	var c Checkpoint
	var commit, files []byte
	var created int64
	err := s.Scan(&c.ID, &c.Project, &c.Workspace, &commit, &files, &c.Message, &c.Meta, &created)
	copy(c.Commit[:], commit)
	copy(c.Files[:], files)
	c.Created = fromNs(created)
	return c, err
}

// Checkpoint returns one checkpoint record.
func (db *DB) Checkpoint(ctx context.Context, id string) (Checkpoint, error) {
	c, err := readOne(ctx, db, scanCheckpoint, checkpointSelect+` WHERE id = ?`, id)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %q: %w", id, err)
	}
	return c, nil
}

// Checkpoints lists the checkpoints of project ("": of every project),
// oldest first.
func (db *DB) Checkpoints(ctx context.Context, project string) ([]Checkpoint, error) {
	var out []Checkpoint
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		if project == "" {
			out, err = sqltx.ScanAll(ctx, tx, scanCheckpoint, checkpointSelect+` ORDER BY created, id`)
		} else {
			out, err = sqltx.ScanAll(ctx, tx, scanCheckpoint, checkpointSelect+` WHERE project = ? ORDER BY created, id`, project)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	return out, nil
}

// DeleteCheckpoint removes a record; its image (and files, unless
// something else keeps them) are then collectable.
func (db *DB) DeleteCheckpoint(ctx context.Context, id string) error {
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		return tx.ExecOne(ctx, ErrNotFound, `DELETE FROM checkpoints WHERE id = ?`, id)
	})
	if err != nil {
		return fmt.Errorf("delete checkpoint %q: %w", id, err)
	}
	return nil
}
