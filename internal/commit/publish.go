package commit

import (
	"context"
	"fmt"
	"time"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire/errclass"
)

// The outcomes of Publish; they are the store's compare-and-swap outcomes.
const (
	Created   = store.PublishCreated   // the branch head moved to the new commit
	UpToDate  = store.PublishUpToDate  // the head's tree already is the commit's tree: no new commit
	HeadMoved = store.PublishHeadMoved // the head is no longer expect: the commit is stored, the branch unchanged
)

// ErrHeadMoved is what Published.Err returns for HeadMoved, for callers
// that treat a lost race as an error: the class errclass.HeadMoved itself.
var ErrHeadMoved = errclass.HeadMoved

// Published is the result of Publish.
type Published struct {
	Result store.Publish `json:"result"`
	// Commit is the new commit (Created, HeadMoved: stored either way, so
	// a caller can retry on the new head or fork a branch from it), or the
	// head whose tree it equals (UpToDate).
	Commit store.ID `json:"commit"`
	// Head is the branch head after the call.
	Head store.ID `json:"head"`
	// Root is the commit's root tree (UpToDate: the head's, the same
	// tree), so that a caller need not read the commit again.
	Root store.ID `json:"root"`
}

// Err is nil unless the head moved.
func (p Published) Err() error {
	if p.Result == HeadMoved {
		return fmt.Errorf("commit %s not published, head is %s: %w", p.Commit.Short(), p.Head.Short(), ErrHeadMoved)
	}
	return nil
}

// Publish stores the commit c, whose parent is set to expect (none when
// expect is ZeroID) and its generation to match, and moves
// the branch head from expect to it by compare-and-swap. When the head's
// tree already equals c.Root nothing is written (UpToDate). When the head
// is no longer expect the commit is still stored and returned (HeadMoved).
// The commit is durable before the head moves, so an acknowledged publish
// survives a crash. TimeNs defaults to now.
func Publish(ctx context.Context, db *store.DB, project, branch string, expect store.ID, c *store.Commit) (Published, error) {
	b, err := db.Branch(ctx, project, branch)
	if err != nil {
		return Published{}, fmt.Errorf("publish: %w", err)
	}
	if !b.Head.IsZero() {
		hc, err := db.Commit(ctx, b.Head)
		if err != nil {
			return Published{}, fmt.Errorf("publish: %w", err)
		}
		if hc.Root == c.Root {
			return Published{Result: UpToDate, Commit: b.Head, Head: b.Head, Root: c.Root}, nil
		}
	}
	c.Parents = nil
	if !expect.IsZero() {
		c.Parents = []store.ID{expect}
	}
	if c.TimeNs == 0 {
		c.TimeNs = time.Now().UnixNano()
	}
	id, err := writeCommit(ctx, db, c)
	if err != nil {
		return Published{}, fmt.Errorf("publish: %w", err)
	}
	res, err := db.SetBranchHead(ctx, project, branch, expect, id)
	if err != nil {
		return Published{Commit: id, Root: c.Root}, fmt.Errorf("publish: %w", err)
	}
	p := Published{Result: res, Commit: id, Head: id, Root: c.Root}
	if res == HeadMoved {
		if b, err = db.Branch(ctx, project, branch); err != nil {
			return p, fmt.Errorf("publish: %w", err)
		}
		p.Head = b.Head
	}
	return p, nil
}

// writeCommit stores c durably on its own batch, with the generation its
// parents give it.
func writeCommit(ctx context.Context, db *store.DB, c *store.Commit) (store.ID, error) {
	gen, err := Generation(ctx, db, c.Parents)
	if err != nil {
		return store.ZeroID, err
	}
	c.Generation = gen
	b, err := db.NewBatch(ctx)
	if err != nil {
		return store.ZeroID, err
	}
	id, err := b.PutCommit(c)
	if err == nil {
		err = b.Flush(ctx)
	}
	if err != nil {
		b.Abort()
		return id, err
	}
	b.Abort() // ends the (flushed, now empty) batch
	return id, nil
}
