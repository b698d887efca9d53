package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/flock"
	"layerfs.dev/layerfs/internal/s3bucket"
	"layerfs.dev/layerfs/internal/store/bucketpack"
	"layerfs.dev/layerfs/internal/store/schema"
)

// A shared Store (docs/fleet.md): references, the object index and
// workspace records in PostgreSQL, chunk payloads in pack objects of an S3
// bucket, and in the directory only what is this host's: store.url (the
// Store's URL), node (this host's name in it), the chunk cache, the
// materialized-file cache and the workspaces.

// errHeadMoved is SetBranchHead's compare failing inside its transaction.
var errHeadMoved = errors.New("head moved")

// remoteConfig is a parsed Store URL.
type remoteConfig struct {
	postgres string // the URL without LayerFS's own parameters
	bucket   s3bucket.Config
}

// parseStoreURL splits postgres://...?bucket=s3://HOST[:PORT]/BUCKET[/PREFIX]
// [&bucket_tls=0][&bucket_region=R] into PostgreSQL's URL and the bucket's
// configuration. S3 credentials are the bucket URL's user and password,
// else $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY.
func parseStoreURL(raw string) (remoteConfig, error) {
	var rc remoteConfig
	u, err := url.Parse(raw)
	if err != nil {
		return rc, fmt.Errorf("store URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return rc, fmt.Errorf("store URL: scheme %q: want postgres://...?bucket=s3://HOST/BUCKET", u.Scheme)
	}
	q := u.Query()
	b, err := url.Parse(q.Get("bucket"))
	if err != nil || b.Scheme != "s3" || b.Host == "" {
		return rc, fmt.Errorf("store URL: bucket=%q: want s3://HOST[:PORT]/BUCKET[/PREFIX]", q.Get("bucket"))
	}
	name, prefix, _ := strings.Cut(strings.Trim(b.Path, "/"), "/")
	if name == "" {
		return rc, fmt.Errorf("store URL: bucket=%q names no bucket", q.Get("bucket"))
	}
	if prefix != "" {
		prefix += "/"
	}
	rc.bucket = s3bucket.Config{
		Endpoint:  b.Host,
		Bucket:    name,
		Prefix:    prefix,
		TLS:       q.Get("bucket_tls") != "0",
		Region:    q.Get("bucket_region"),
		AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
	}
	if b.User != nil {
		rc.bucket.AccessKey = b.User.Username()
		rc.bucket.SecretKey, _ = b.User.Password()
	}
	for _, k := range []string{"bucket", "bucket_tls", "bucket_region"} {
		q.Del(k)
	}
	u.RawQuery = q.Encode()
	rc.postgres = u.String()
	return rc, nil
}

// initRemote makes dir a host's directory of the shared Store at opts.URL,
// creating the Store's schema and bucket if this is its first host.
func initRemote(ctx context.Context, dir string, opts Options) (*DB, error) {
	if _, err := parseStoreURL(opts.URL); err != nil {
		return nil, fmt.Errorf("init store %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("init store %s: %w", dir, err)
	}
	if isFile(filepath.Join(dir, dbFile)) {
		return nil, fmt.Errorf("init store %s: it holds an embedded store: %w", dir, ErrExists)
	}
	path := filepath.Join(dir, urlFile)
	// O_EXCL: a second Init fails before it changes anything. The file
	// may hold a password: owner only.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("init store %s: %w", dir, ErrExists)
		}
		return nil, fmt.Errorf("init store %s: %w", dir, err)
	}
	_, werr := f.WriteString(opts.URL + "\n")
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("init store %s: %w", dir, err)
	}
	db, err := openRemote(ctx, dir, opts, true)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return db, nil
}

// openRemote opens this host's view of a shared Store.
func openRemote(ctx context.Context, dir string, opts Options, create bool) (_ *DB, err error) {
	opts.fill()
	db := &DB{dir: dir, opts: opts, log: opts.Logger, d: schema.Dialect{Postgres: true}}
	defer func() {
		if err != nil {
			db.closeAll()
			err = fmt.Errorf("open store %s: %w", dir, err)
		}
	}()
	raw, err := os.ReadFile(filepath.Join(dir, urlFile))
	if err != nil {
		return nil, err
	}
	rc, err := parseStoreURL(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, err
	}
	if db.node, err = nodeName(dir); err != nil {
		return nil, err
	}
	db.lock, err = os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock.Lock(ctx, db.lock, unix.LOCK_SH); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}

	cfg, err := pgx.ParseConfig(rc.postgres)
	if err != nil {
		return nil, fmt.Errorf("postgres URL: %w", err)
	}
	// The workspaces view shows each connection its own host's records.
	cfg.RuntimeParams["layerfs.node"] = db.node
	pool := stdlib.OpenDB(*cfg)
	pool.SetMaxOpenConns(16)
	pool.SetMaxIdleConns(16)
	db.w, db.r = pool, pool
	if err := pool.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("postgres %s: %w", cfg.Host, err)
	}
	// Init creates the schema if this is the Store's first host; Open
	// finds it or fails with ErrNoStore.
	if err := db.migrate(ctx, len(schema.Postgres), create); err != nil {
		return nil, err
	}

	bucket, err := s3bucket.Open(rc.bucket)
	if err != nil {
		return nil, err
	}
	if create {
		if err := bucket.Create(ctx); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{cacheDir, workspacesDir, spoolDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := bucketpack.RemoveDeadSpools(filepath.Join(dir, spoolDir)); err != nil {
		return nil, err
	}
	if err := db.openCache(ctx); err != nil {
		return nil, err
	}
	db.bucket, err = bucketpack.Open(bucket, packIndex{db}, filepath.Join(dir, spoolDir),
		filepath.Join(dir, chunkCacheDir), opts.ChunkCacheBytes, &db.total)
	if err != nil {
		return nil, err
	}
	db.content = db.bucket
	db.fc = db.newFill()
	db.trees = newTreeCache(opts.TreeCacheBytes)
	if err := db.keepLease(ctx); err != nil {
		return nil, err
	}
	return db, nil
}

// nodeName returns this host's name in the shared Store, made at the first
// open of the directory: random, so two directories (two hosts, or two
// daemons on one host) never share one.
func nodeName(dir string) (string, error) {
	path := filepath.Join(dir, nodeFile)
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var r [8]byte
	rand.Read(r[:])
	host, _ := os.Hostname()
	name := fmt.Sprintf("%s-%s", host, hex.EncodeToString(r[:]))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(name+"\n"), 0o600); err != nil {
		return "", err
	}
	// Link, not rename: of two first opens at once, one name wins for both.
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		os.Remove(tmp)
		return "", err
	}
	os.Remove(tmp)
	b, err = os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

// Node is this host's name in a shared Store, "" in the embedded one.
func (db *DB) Node() string { return db.node }

// Shared reports whether db is a shared Store (PostgreSQL and a bucket).
func (db *DB) Shared() bool { return db.d.Postgres }

// allWorkspaces is the table of every host's workspace records.
func (db *DB) allWorkspaces() string {
	if db.d.Postgres {
		return "workspace_records"
	}
	return "workspaces"
}
