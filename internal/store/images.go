package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"layerfs.dev/layerfs/internal/store/sqltx"
)

// Image is a named tree a workspace's root can be: the commit of its last
// layer (each layer a commit whose first parent is the layer below) and
// its record, JSON owned by package image (the OCI config, the layers'
// digests). Digest names its content (the digest of its OCI config);
// naming an image again replaces what the name points at, and the commits
// it pointed at stay while anything else reaches them.
type Image struct {
	Name    string    `json:"name"`
	Digest  string    `json:"digest"`
	Commit  ID        `json:"commit"`
	Record  []byte    `json:"record"`
	Created time.Time `json:"created"`
}

// MaxImageNameLen is the longest image name in bytes.
const MaxImageNameLen = 255

// imageNameRE is a container image reference without its digest:
// lower-case path components separated by "/", the first of which may
// be a host with a port, and an optional ":tag".
var imageNameRE = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?$`)

// ValidImageName checks an image name: a reference as container tools
// spell it, without a digest ("python", "team/env:3.12",
// "localhost:5000/base:v1"), at most MaxImageNameLen bytes. The error
// wraps ErrInvalidName.
func ValidImageName(name string) error {
	if len(name) > MaxImageNameLen || !imageNameRE.MatchString(name) {
		return fmt.Errorf("image name %q: want a reference such as team/env:3.12 (lower-case path, optional :tag, no @digest), at most %d bytes: %w",
			name, MaxImageNameLen, ErrInvalidName)
	}
	return nil
}

// PutImage names img.Commit, a stored commit, img.Name (replacing what
// the name pointed at) and records derivations (key -> commit, see
// Derivation) in the same transaction, so that an import or a build is
// visible whole or not at all.
func (db *DB) PutImage(ctx context.Context, img Image, derivations map[string]ID) (Image, error) {
	if err := ValidImageName(img.Name); err != nil {
		return Image{}, fmt.Errorf("put image: %w", err)
	}
	now := nowNs()
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		if err := requireCommit(ctx, tx, img.Commit); err != nil {
			return err
		}
		for key, id := range derivations {
			if _, err := tx.Exec(ctx, `INSERT INTO derivations(key, commit_id, created) VALUES (?, ?, ?)
				ON CONFLICT (key) DO UPDATE SET commit_id = excluded.commit_id, created = excluded.created`, key, id[:], now); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO images(name, digest, commit_id, record, created) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, commit_id = excluded.commit_id,
			record = excluded.record, created = excluded.created`, img.Name, img.Digest, img.Commit[:], img.Record, now)
		return err
	})
	if err != nil {
		return Image{}, fmt.Errorf("put image %q: %w", img.Name, err)
	}
	img.Created = fromNs(now)
	return img, nil
}

// PutDerivations records derivations (key -> commit) without naming an
// image: the steps of a build that failed later are kept for the next.
func (db *DB) PutDerivations(ctx context.Context, derivations map[string]ID) error {
	now := nowNs()
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		for key, id := range derivations {
			if err := requireCommit(ctx, tx, id); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO derivations(key, commit_id, created) VALUES (?, ?, ?)
				ON CONFLICT (key) DO UPDATE SET commit_id = excluded.commit_id, created = excluded.created`, key, id[:], now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put derivations: %w", err)
	}
	return nil
}

const imageSelect = `SELECT name, digest, commit_id, record, created FROM images`

func scanImage(s scanner) (Image, error) {
	var img Image
	var id []byte
	var created int64
	err := s.Scan(&img.Name, &img.Digest, &id, &img.Record, &created)
	copy(img.Commit[:], id)
	img.Created = fromNs(created)
	return img, err
}

// Image returns the image called name.
func (db *DB) Image(ctx context.Context, name string) (Image, error) {
	img, err := readOne(ctx, db, scanImage, imageSelect+` WHERE name = ?`, name)
	if err != nil {
		return Image{}, fmt.Errorf("image %q: %w", name, err)
	}
	return img, nil
}

// ImagesByDigest returns the images whose digest is digest, by name.
func (db *DB) ImagesByDigest(ctx context.Context, digest string) ([]Image, error) {
	var out []Image
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		out, err = sqltx.ScanAll(ctx, tx, scanImage, imageSelect+` WHERE digest = ? ORDER BY name`, digest)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("images of digest %s: %w", digest, err)
	}
	return out, nil
}

// Images lists every image by name.
func (db *DB) Images(ctx context.Context) ([]Image, error) {
	var out []Image
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var err error
		out, err = sqltx.ScanAll(ctx, tx, scanImage, imageSelect+` ORDER BY name`)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	return out, nil
}

// DeleteImage removes the name; GC collects the commits, trees and
// chunks nothing else reaches. Workspaces whose root stands on the image
// keep their root (their record names its commit), and a project whose
// default it was has none.
func (db *DB) DeleteImage(ctx context.Context, name string) error {
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		if err := tx.ExecOne(ctx, ErrNotFound, `DELETE FROM images WHERE name = ?`, name); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE projects SET image = '' WHERE image = ? OR image LIKE ?`, name, name+"@%")
		return err
	})
	if err != nil {
		return fmt.Errorf("delete image %q: %w", name, err)
	}
	return nil
}

// Derivation returns the commit recorded for key (what a step applied to
// a commit gave: an image layer on its parent, a build step on its
// input), if it is still stored.
func (db *DB) Derivation(ctx context.Context, key string) (ID, bool, error) {
	var id ID
	found := false
	err := db.withTx(ctx, txRead, func(tx *tx) error {
		var b []byte
		err := tx.Row(ctx, `SELECT d.commit_id FROM derivations d JOIN objects o ON o.id = d.commit_id WHERE d.key = ?`, key).Scan(&b)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		copy(id[:], b)
		found = true
		return nil
	})
	if err != nil {
		return ZeroID, false, fmt.Errorf("derivation %q: %w", key, err)
	}
	return id, found, nil
}

// SetProjectImage makes image (NAME or NAME@DIGEST) the default image of
// the project's workspaces ("" for none). The name must exist.
func (db *DB) SetProjectImage(ctx context.Context, project, image string) error {
	err := db.withTx(ctx, txWrite, func(tx *tx) error {
		if err := requireProject(ctx, tx, project); err != nil {
			return err
		}
		if image != "" {
			name, _, _ := strings.Cut(image, "@")
			var n int
			if err := tx.Row(ctx, `SELECT count(*) FROM images WHERE name = ?`, name).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("image %q: %w", image, ErrNotFound)
			}
		}
		_, err := tx.Exec(ctx, `UPDATE projects SET image = ? WHERE name = ?`, image, project)
		return err
	})
	if err != nil {
		return fmt.Errorf("set the default image of %q: %w", project, err)
	}
	return nil
}
