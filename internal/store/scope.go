package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"

	"github.com/jackc/pgx/v5"

	"layerfs.dev/layerfs/internal/s3bucket"
)

// A scope is an empty shared Store made inside another's database and
// bucket: a PostgreSQL schema (the scope's URL sets search_path to it) and a
// key prefix under the bucket's. The bench gives each sample one, so that
// every sample starts from an empty shared Store without making a database
// or a bucket, which needs rights a Store URL need not carry.

var scopeName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// NewScope makes the scope name (lower-case letters, digits and _) in the
// database and bucket of the shared Store at storeURL. It returns the
// scope's Store URL and a function that removes the scope: the schema with
// everything in it, and the objects under its prefix.
func NewScope(ctx context.Context, storeURL, name string) (scoped string, remove func(context.Context) error, err error) {
	if !scopeName.MatchString(name) {
		return "", nil, fmt.Errorf("store scope %q: want lower-case letters, digits and _", name)
	}
	u, err := url.Parse(storeURL)
	if err != nil {
		return "", nil, fmt.Errorf("store scope %s: %w", name, err)
	}
	q := u.Query()
	b, err := url.Parse(q.Get("bucket"))
	if err != nil {
		return "", nil, fmt.Errorf("store scope %s: bucket: %w", name, err)
	}
	b.Path = path.Join("/", b.Path, name)
	q.Set("bucket", b.String())
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	scoped = u.String()
	rc, err := parseStoreURL(scoped)
	if err != nil {
		return "", nil, fmt.Errorf("store scope %s: %w", name, err)
	}
	schema := pgx.Identifier{name}.Sanitize()
	if err := pgExec(ctx, rc.postgres, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("store scope %s: %w", name, err)
	}
	remove = func(ctx context.Context) error {
		err := pgExec(ctx, rc.postgres, "DROP SCHEMA "+schema+" CASCADE")
		return errors.Join(err, emptyBucketPrefix(ctx, rc.bucket))
	}
	return scoped, remove, nil
}

// pgExec runs one statement on a connection of its own.
func pgExec(ctx context.Context, pgURL, sql string) error {
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, sql); err != nil {
		return fmt.Errorf("postgres: %s: %w", sql, err)
	}
	return nil
}

// emptyBucketPrefix deletes every object under cfg's prefix.
func emptyBucketPrefix(ctx context.Context, cfg s3bucket.Config) error {
	b, err := s3bucket.Open(cfg)
	if err != nil {
		return err
	}
	objs, err := b.List(ctx, "")
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := b.Delete(ctx, o.Key); err != nil {
			return err
		}
	}
	return nil
}
