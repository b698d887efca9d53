package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
)

// NewID is a fresh checkpoint id: "ckpt-" and 12 hex digits.
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "ckpt-" + hex.EncodeToString(b[:])
}

// SaveStats are what Save stored.
type SaveStats struct {
	commit.Stats
	Took time.Duration
}

// Save stores the images in dir as the checkpoint rec (its ID, Project,
// Workspace, Message and Meta as given; Files the commit of the
// workspace's files) and returns the record as stored.
func Save(ctx context.Context, db *store.DB, dir string, rec store.Checkpoint) (store.Checkpoint, SaveStats, error) {
	start := time.Now()
	fail := func(err error) (store.Checkpoint, SaveStats, error) {
		return store.Checkpoint{}, SaveStats{}, fmt.Errorf("save checkpoint %s: %w", rec.ID, err)
	}
	if rec.Files.IsZero() {
		return fail(fmt.Errorf("%w: no files' commit", store.ErrInvalidCheckpoint))
	}
	b, err := db.NewBatch(ctx)
	if err != nil {
		return fail(err)
	}
	defer b.Abort()
	root, st, err := commit.CaptureDir(ctx, b, db, dir, nil)
	if err != nil {
		return fail(err)
	}
	if err := b.Flush(ctx); err != nil {
		return fail(err)
	}
	msg := "checkpoint " + rec.ID
	if rec.Message != "" {
		msg += ": " + rec.Message
	}
	id, err := commit.StoreCommit(ctx, db, &store.Commit{Root: root, Parents: []store.ID{rec.Files}, Message: msg})
	if err != nil {
		return fail(err)
	}
	rec.Commit = id
	out, err := db.CreateCheckpoint(ctx, rec)
	if err != nil {
		return fail(err)
	}
	return out, SaveStats{Stats: st, Took: time.Since(start)}, nil
}

// Load writes the images of checkpoint rec into dir (created, or empty).
func Load(ctx context.Context, db *store.DB, rec store.Checkpoint, dir string) (commit.CheckoutStats, error) {
	c, err := db.Commit(ctx, rec.Commit)
	if err != nil {
		return commit.CheckoutStats{}, fmt.Errorf("load checkpoint %s: %w", rec.ID, err)
	}
	st, err := commit.Checkout(ctx, db, c.Root, dir, nil)
	if err != nil {
		return st, fmt.Errorf("load checkpoint %s: %w", rec.ID, err)
	}
	return st, nil
}
