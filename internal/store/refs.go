package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"layerfs.dev/layerfs/internal/store/sqltx"
)

// Project is a named history: a linear stack of layers and any number of
// branches.
type Project struct {
	Name     string    `json:"name"`
	Created  time.Time `json:"created"`
	Layers   int       `json:"layers"`
	Branches int       `json:"branches"`
	// Image is the image a workspace of the project gets as its root when
	// it names none ("": the platform's runtime).
	Image string `json:"image,omitempty"`
}

// Layer is an immutable, published snapshot: the Index-th entry (from 1)
// of its project's stack.
type Layer struct {
	Project string    `json:"project"`
	Index   int       `json:"index"`
	Commit  ID        `json:"commit"`
	Created time.Time `json:"created"`
}

// Branch is a named writable line whose head moves by compare-and-swap.
type Branch struct {
	Project string    `json:"project"`
	Name    string    `json:"name"`
	Head    ID        `json:"head"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// Publish is the outcome of SetBranchHead.
type Publish int

// The outcomes of a compare-and-swap on a branch head.
const (
	PublishCreated   Publish = iota + 1 // the head moved from expect to the new commit
	PublishUpToDate                     // the head already was the new commit
	PublishHeadMoved                    // the head was neither: nothing changed
)

func (p Publish) String() string {
	switch p {
	case PublishCreated:
		return "created"
	case PublishUpToDate:
		return "up-to-date"
	case PublishHeadMoved:
		return "head-moved"
	}
	return fmt.Sprintf("publish(%d)", int(p))
}

// MarshalText makes outcomes readable in JSON.
func (p Publish) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// DefaultBranch is the branch CreateProject makes.
const DefaultBranch = "main"

func nowNs() int64              { return time.Now().UnixNano() }
func fromNs(ns int64) time.Time { return time.Unix(0, ns) }

// requireCommit fails with ErrNotFound unless id is a stored commit.
func requireCommit(ctx context.Context, tx *tx, id ID) error {
	var n int
	if err := tx.Row(ctx, `SELECT count(*) FROM objects WHERE id = ? AND kind = ?`, id[:], int64(KindCommit)).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("commit %s: %w", id, ErrNotFound)
	}
	return nil
}

func requireProject(ctx context.Context, tx *tx, name string) error {
	var n int
	if err := tx.Row(ctx, `SELECT count(*) FROM projects WHERE name = ?`, name).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("project %q: %w", name, ErrNotFound)
	}
	return nil
}

// CreateProject creates a project whose layer 1 is the commit first and
// whose branch "main" has first as its head, in one transaction. first must
// be a stored commit (the commit package makes an empty-tree commit for an
// empty project).
func (db *DB) CreateProject(ctx context.Context, name string, first ID) (Project, error) {
	if err := ValidName(name); err != nil {
		return Project{}, fmt.Errorf("create project: %w", err)
	}
	now := nowNs()
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		if err := requireCommit(ctx, tx, first); err != nil {
			return err
		}
		if err := tx.ExecOne(ctx, ErrExists, `INSERT INTO projects(name, created) VALUES (?, ?) ON CONFLICT DO NOTHING`, name, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO layers(project, idx, commit_id, created) VALUES (?, 1, ?, ?)`, name, first[:], now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO branches(project, name, head, created, updated) VALUES (?, ?, ?, ?, ?)`,
			name, DefaultBranch, first[:], now, now)
		return err
	})
	if err != nil {
		return Project{}, fmt.Errorf("create project %q: %w", name, err)
	}
	return Project{Name: name, Created: fromNs(now), Layers: 1, Branches: 1}, nil
}

const projectSelect = `SELECT p.name, p.created, p.image,
	(SELECT count(*) FROM layers l WHERE l.project = p.name),
	(SELECT count(*) FROM branches b WHERE b.project = p.name)
	FROM projects p`

func scanProject(s scanner) (Project, error) {
	var p Project
	var created int64
	err := s.Scan(&p.Name, &created, &p.Image, &p.Layers, &p.Branches)
	p.Created = fromNs(created)
	return p, err
}

// Project returns one project.
func (db *DB) Project(ctx context.Context, name string) (Project, error) {
	p, err := readOne(ctx, db, scanProject, projectSelect+` WHERE p.name = ?`, name)
	if err != nil {
		return Project{}, fmt.Errorf("project %q: %w", name, err)
	}
	return p, nil
}

// Projects lists all projects by name.
func (db *DB) Projects(ctx context.Context) ([]Project, error) {
	var out []Project
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		out, err = sqltx.ScanAll(ctx, tx, scanProject, projectSelect+` ORDER BY p.name`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	return out, nil
}

// AddLayer appends commit as the project's next layer.
func (db *DB) AddLayer(ctx context.Context, project string, commit ID) (Layer, error) {
	l := Layer{Project: project, Commit: commit}
	now := nowNs()
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		if err := requireProject(ctx, tx, project); err != nil {
			return err
		}
		if err := requireCommit(ctx, tx, commit); err != nil {
			return err
		}
		if err := tx.Row(ctx, `SELECT coalesce(max(idx), 0) + 1 FROM layers WHERE project = ?`, project).Scan(&l.Index); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO layers(project, idx, commit_id, created) VALUES (?, ?, ?, ?)`, project, l.Index, commit[:], now)
		return err
	})
	if err != nil {
		return Layer{}, fmt.Errorf("add layer to %q: %w", project, err)
	}
	l.Created = fromNs(now)
	return l, nil
}

func scanLayer(project string, s scanner) (Layer, error) {
	l := Layer{Project: project}
	var id []byte
	var created int64
	err := s.Scan(&l.Index, &id, &created)
	copy(l.Commit[:], id)
	l.Created = fromNs(created)
	return l, err
}

// Layers lists a project's layers from 1 up.
func (db *DB) Layers(ctx context.Context, project string) ([]Layer, error) {
	var out []Layer
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		if err := requireProject(ctx, tx, project); err != nil {
			return err
		}
		var err error
		out, err = sqltx.ScanAll(ctx, tx, func(s scanner) (Layer, error) { return scanLayer(project, s) },
			`SELECT idx, commit_id, created FROM layers WHERE project = ? ORDER BY idx`, project)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("layers of %q: %w", project, err)
	}
	return out, nil
}

// CreateBranch makes a branch whose head is an existing commit. It copies
// nothing, so it costs the same whatever the tree size.
func (db *DB) CreateBranch(ctx context.Context, project, name string, head ID) (Branch, error) {
	if err := ValidName(name); err != nil {
		return Branch{}, fmt.Errorf("create branch: %w", err)
	}
	now := nowNs()
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		if err := requireProject(ctx, tx, project); err != nil {
			return err
		}
		if err := requireCommit(ctx, tx, head); err != nil {
			return err
		}
		return tx.ExecOne(ctx, ErrExists, `INSERT INTO branches(project, name, head, created, updated) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`, project, name, head[:], now, now)
	})
	if err != nil {
		return Branch{}, fmt.Errorf("create branch %q in %q: %w", name, project, err)
	}
	return Branch{Project: project, Name: name, Head: head, Created: fromNs(now), Updated: fromNs(now)}, nil
}

func scanBranch(project string, s scanner) (Branch, error) {
	b := Branch{Project: project}
	var head []byte
	var created, updated int64
	err := s.Scan(&b.Name, &head, &created, &updated)
	copy(b.Head[:], head)
	b.Created, b.Updated = fromNs(created), fromNs(updated)
	return b, err
}

// Branch returns one branch.
func (db *DB) Branch(ctx context.Context, project, name string) (Branch, error) {
	var b Branch
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		b, err = db.branch(ctx, tx, project, name)
		return err
	})
	if err != nil {
		return Branch{}, fmt.Errorf("branch %q of %q: %w", name, project, err)
	}
	return b, nil
}

func (db *DB) branch(ctx context.Context, tx *tx, project, name string) (Branch, error) {
	b, err := scanBranch(project, tx.Row(ctx, `SELECT name, head, created, updated FROM branches WHERE project = ? AND name = ?`, project, name))
	if errors.Is(err, sql.ErrNoRows) {
		if err := requireProject(ctx, tx, project); err != nil {
			return b, err
		}
		return b, ErrNotFound
	}
	return b, err
}

// Branches lists a project's branches by name.
func (db *DB) Branches(ctx context.Context, project string) ([]Branch, error) {
	var out []Branch
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		if err := requireProject(ctx, tx, project); err != nil {
			return err
		}
		var err error
		out, err = sqltx.ScanAll(ctx, tx, func(s scanner) (Branch, error) { return scanBranch(project, s) },
			`SELECT name, head, created, updated FROM branches WHERE project = ? ORDER BY name`, project)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("branches of %q: %w", project, err)
	}
	return out, nil
}

// DeleteBranch removes a branch; its commits stay until GC finds them
// unreachable. A branch that a workspace record stands on is refused with
// ErrBusy, whoever asks: the workspace's next commit would have nowhere to go.
func (db *DB) DeleteBranch(ctx context.Context, project, name string) error {
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		// A workspace's record says it stands on the branch: its next
		// commit publishes there. The check and the delete are one
		// transaction, so no workspace can be created in between.
		var ws string
		switch err := tx.Row(ctx, `SELECT id FROM `+db.allWorkspaces()+` WHERE project = ? AND branch = ? ORDER BY created LIMIT 1`, project, name).Scan(&ws); {
		case err == nil:
			return fmt.Errorf("workspace %s stands on it (end it first): %w", ws, ErrBusy)
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		err := tx.ExecOne(ctx, ErrNotFound, `DELETE FROM branches WHERE project = ? AND name = ?`, project, name)
		if errors.Is(err, ErrNotFound) {
			// No such branch: say so, unless there is no such project.
			if perr := requireProject(ctx, tx, project); perr != nil {
				return perr
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete branch %q of %q: %w", name, project, err)
	}
	return nil
}

// SetBranchHead moves a branch's head to head if it is still expect
// (compare-and-swap) and reports PublishCreated; PublishUpToDate if the
// head already is head; PublishHeadMoved, changing nothing, if the head is
// neither. head must be a stored commit, so callers flush the commit's
// batch first and the head moves last.
func (db *DB) SetBranchHead(ctx context.Context, project, branch string, expect, head ID) (Publish, error) {
	var out Publish
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		b, err := db.branch(ctx, tx, project, branch)
		if err != nil {
			return err
		}
		switch {
		case b.Head == head:
			out = PublishUpToDate
			return nil
		case b.Head != expect:
			out = PublishHeadMoved
			return nil
		}
		if err := requireCommit(ctx, tx, head); err != nil {
			return err
		}
		// The head is compared again as it is set: the transaction holds
		// the store's write lock already, so this never fails on either
		// engine; it keeps the swap atomic should that lock ever be finer.
		if err := tx.ExecOne(ctx, errHeadMoved, `UPDATE branches SET head = ?, updated = ? WHERE project = ? AND name = ? AND head = ?`,
			head[:], nowNs(), project, branch, expect[:]); err != nil {
			if errors.Is(err, errHeadMoved) {
				out = PublishHeadMoved
				return nil
			}
			return err
		}
		out = PublishCreated
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("set head of branch %q of %q: %w", branch, project, err)
	}
	return out, nil
}

// ResolveRef turns a reference into a commit id: "layer:N" (a layer of the
// project), a branch name (its head), a full 64-digit commit id, or a hex
// prefix of at least 4 digits that names exactly one commit. Branch names
// win over prefixes. It fails with ErrNotFound, or ErrAmbiguous listing
// the candidates.
func (db *DB) ResolveRef(ctx context.Context, project, ref string) (ID, error) {
	var id ID
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		if err := requireProject(ctx, tx, project); err != nil {
			return err
		}
		if n, ok := strings.CutPrefix(ref, "layer:"); ok {
			idx, err := strconv.Atoi(n)
			if err != nil || idx < 1 {
				return fmt.Errorf("layer %q: want a number from 1: %w", n, ErrNotFound)
			}
			var b []byte
			err = tx.Row(ctx, `SELECT commit_id FROM layers WHERE project = ? AND idx = ?`, project, idx).Scan(&b)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("layer %d: %w", idx, ErrNotFound)
			}
			copy(id[:], b)
			return err
		}
		var b []byte
		err := tx.Row(ctx, `SELECT head FROM branches WHERE project = ? AND name = ?`, project, ref).Scan(&b)
		if err == nil {
			copy(id[:], b)
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if len(ref) < 4 || len(ref) > 64 || !isHex(ref) {
			return fmt.Errorf("no branch, layer or commit called %q: %w", ref, ErrNotFound)
		}
		lo, hi := prefixRange(strings.ToLower(ref))
		r, err := tx.Query(ctx, `SELECT id FROM objects WHERE kind = ? AND id >= ? AND id <= ? ORDER BY id LIMIT 6`,
			int64(KindCommit), lo, hi)
		if err != nil {
			return err
		}
		defer r.Close()
		var found []ID
		for r.Next() {
			var b []byte
			if err := r.Scan(&b); err != nil {
				return err
			}
			var c ID
			copy(c[:], b)
			found = append(found, c)
		}
		if err := r.Err(); err != nil {
			return err
		}
		switch len(found) {
		case 0:
			return fmt.Errorf("no branch, layer or commit called %q: %w", ref, ErrNotFound)
		case 1:
			id = found[0]
			return nil
		}
		names := make([]string, len(found))
		for i, c := range found {
			names[i] = c.Short()
		}
		if len(found) > 5 {
			names[5] = "..."
		}
		return fmt.Errorf("%q matches commits %s: %w", ref, strings.Join(names, ", "), ErrAmbiguous)
	})
	if err != nil {
		return ZeroID, fmt.Errorf("resolve %q in %q: %w", ref, project, err)
	}
	return id, nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// prefixRange returns the smallest and largest 32-byte ids starting with
// the hex digits p.
func prefixRange(p string) (lo, hi []byte) {
	l := p + strings.Repeat("0", 64-len(p))
	h := p + strings.Repeat("f", 64-len(p))
	lo, _ = hex.DecodeString(l)
	hi, _ = hex.DecodeString(h)
	return lo, hi
}
