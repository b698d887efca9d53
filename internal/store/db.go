package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/flock"
	"layerfs.dev/layerfs/internal/store/bucketpack"
	"layerfs.dev/layerfs/internal/store/cache"
	"layerfs.dev/layerfs/internal/store/fill"
	"layerfs.dev/layerfs/internal/store/pack"
	"layerfs.dev/layerfs/internal/store/schema"
)

// File and directory names inside a store directory.
const (
	dbFile        = "store.db"
	urlFile       = "store.url" // a shared Store's URL (remote.go)
	nodeFile      = "node"      // this host's name in a shared Store
	lockFile      = "lock"
	packsDir      = "packs"
	cacheDir      = "cache"
	workspacesDir = "workspaces"
	spoolDir      = "spool"  // a shared Store's packs being written
	chunkCacheDir = "chunks" // a shared Store's chunks read from its bucket
)

// Defaults for Options fields left zero.
const (
	DefaultTreeCacheBytes = 64 << 20
	DefaultMaxPackSize    = 1 << 30
	DefaultBusyTimeout    = 30 * time.Second
	// DefaultChunkCacheBytes bounds a shared Store's chunk cache.
	DefaultChunkCacheBytes = 2 << 30
)

// Options tune a DB. The zero value is ready to use.
type Options struct {
	// Logger receives rare events (migrations, GC, pack roll-over); nil is
	// silent.
	Logger *slog.Logger
	// TreeCacheBytes bounds the decoded-tree LRU by the trees' encoded
	// size; 0 means DefaultTreeCacheBytes, negative disables the cache.
	TreeCacheBytes int64
	// MaxPackSize is the size at which a writer starts a new pack file;
	// 0 means DefaultMaxPackSize.
	MaxPackSize int64
	// BusyTimeout is how long a statement waits for another process's
	// write lock; 0 means DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Durable makes every SQLite commit fsync its WAL (synchronous=FULL),
	// so acknowledged commits survive a power failure and not only a crash
	// of the process (synchronous=NORMAL, the default, already survives
	// that). Pack data is fsynced before its index commits either way.
	Durable bool
	// BufferedPacks writes packs through the page cache instead of with
	// O_DIRECT (which is used where the file system supports it).
	BufferedPacks bool
	// URL, given to Init, makes a shared Store: references and the object
	// index in PostgreSQL, chunk payloads in an S3 bucket, and only this
	// host's caches and workspaces in the directory (docs/fleet.md). Init
	// records it in the directory, so Open needs no URL. Empty means the
	// embedded Store (SQLite and pack files in the directory).
	URL string
	// ChunkCacheBytes bounds a shared Store's node-local cache of chunks
	// read from the bucket; 0 means DefaultChunkCacheBytes, negative
	// disables it.
	ChunkCacheBytes int64
	// CacheBytes bounds the cache of contents (package cache): 0 means a
	// quarter of its file system's size, negative no bound.
	CacheBytes int64
	// NoCacheFill leaves the cache of contents to be filled on first read
	// (Materialize) instead of by the captures that store them (CacheFill).
	NoCacheFill bool
	// NoPrefetch leaves the contents a capture's fill left out of the
	// cache (all of them, with NoCacheFill) to be fetched when they are
	// read or readied (Ready), instead of behind the capture
	// (Batch.FillBehind).
	NoPrefetch bool
	// LeaseTTL is how long a shared Store's host stays alive for GC
	// without renewing its lease (lease.go); 0 means DefaultLeaseTTL.
	LeaseTTL time.Duration
}

func (o *Options) fill() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TreeCacheBytes == 0 {
		o.TreeCacheBytes = DefaultTreeCacheBytes
	}
	if o.MaxPackSize <= 0 {
		o.MaxPackSize = DefaultMaxPackSize
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.ChunkCacheBytes == 0 {
		o.ChunkCacheBytes = DefaultChunkCacheBytes
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
}

// DB is an open store. It is safe for concurrent use by many goroutines,
// and several processes may open the same store at once. Close it when done.
type DB struct {
	dir  string
	opts Options
	log  *slog.Logger

	w *sql.DB        // one connection: in-process writers are serialised here
	r *sql.DB        // read-only connections
	d schema.Dialect // SQLite's (the zero value) or PostgreSQL's

	lock   *os.File // shared flock for the DB's lifetime; exclusive during GC
	lockMu sync.Mutex

	// gcMu is held shared by everything that reads pack files or has
	// unflushed batch work, and exclusively by GC while it deletes rows
	// and rewrites packs.
	gcMu    sync.RWMutex
	batches atomic.Int64 // batches holding unflushed work

	packs   *pack.Set       // the embedded Store's pack files; nil on a shared Store
	bucket  *bucketpack.Set // a shared Store's pack objects; nil on the embedded one
	content packStore       // whichever of the two this DB has
	node    string          // this host's name in a shared Store
	lease   *leaseKeeper    // renews node's lease; nil on the embedded Store
	trees   *treeCache
	mat     flightGroup
	cache   *cache.Dir  // the cache of contents
	fc      *fill.Cache // the cache's fills, prefetches and trust (fill.go)
	digests sync.Map    // content ID -> its fs-verity digest, once measured (trust.go)

	total  account.Account // the totals: every request's work and that of none
	closed atomic.Bool
}

// DefaultDir is $LAYERFS_HOME, else ~/.local/share/layerfs.
func DefaultDir() string {
	if d := os.Getenv("LAYERFS_HOME"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = "/root"
	}
	return filepath.Join(home, ".local", "share", "layerfs")
}

// Init creates a new store in dir (creating dir if needed) and opens it.
// It fails with ErrExists, changing nothing, if dir already holds a store.
func Init(ctx context.Context, dir string, opts Options) (*DB, error) {
	if opts.URL != "" {
		return initRemote(ctx, dir, opts)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("init store %s: %w", dir, err)
	}
	if isFile(filepath.Join(dir, urlFile)) {
		return nil, fmt.Errorf("init store %s: it holds a shared store's %s: %w", dir, urlFile, ErrExists)
	}
	// O_EXCL on the database file makes a second Init (even a concurrent
	// one) fail before it touches anything.
	f, err := os.OpenFile(filepath.Join(dir, dbFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("init store %s: %w", dir, ErrExists)
		}
		return nil, fmt.Errorf("init store %s: %w", dir, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("init store %s: %w", dir, err)
	}
	for _, d := range []string{packsDir, cacheDir, workspacesDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("init store %s: %w", dir, err)
		}
	}
	db, err := open(ctx, dir, opts, true)
	if err != nil {
		// Leave no half-made database behind: a retry must find none.
		for _, f := range dbFiles() {
			os.Remove(filepath.Join(dir, f))
		}
		return nil, fmt.Errorf("init store %s: %w", dir, err)
	}
	return db, nil
}

// Exists reports whether dir holds a store (its database file, or a shared
// Store's URL), without opening it.
func Exists(dir string) bool {
	return isFile(filepath.Join(dir, dbFile)) || isFile(filepath.Join(dir, urlFile))
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// Open opens the store in dir, applying pending schema migrations. It fails
// with ErrNoStore if dir holds no store and with ErrNewerSchema, changing
// nothing, if the store was written by a newer LayerFS.
func Open(ctx context.Context, dir string, opts Options) (*DB, error) {
	if !Exists(dir) {
		return nil, fmt.Errorf("open store %s: %w", dir, ErrNoStore)
	}
	if isFile(filepath.Join(dir, urlFile)) {
		return openRemote(ctx, dir, opts, false)
	}
	db, err := open(ctx, dir, opts, false)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	return db, nil
}

func dsn(path string, opts Options, write bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	if write {
		q.Set("mode", "rw")
		q.Set("_txlock", "immediate")
		q.Add("_pragma", "journal_mode(WAL)")
		if opts.Durable {
			q.Add("_pragma", "synchronous(FULL)")
		} else {
			q.Add("_pragma", "synchronous(NORMAL)")
		}
		q.Add("_pragma", "cache_size(-16384)")
		// Multi-row inserts need a statement journal; keep it in memory
		// rather than in a temporary file written on every statement.
		q.Add("_pragma", "temp_store(MEMORY)")
	} else {
		q.Set("mode", "rw") // read-only handles still need the WAL index
		q.Add("_pragma", "query_only(1)")
		q.Add("_pragma", "cache_size(-16384)")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

func open(ctx context.Context, dir string, opts Options, create bool) (_ *DB, err error) {
	opts.fill()
	db := &DB{dir: dir, opts: opts, log: opts.Logger}
	defer func() {
		if err != nil {
			db.closeAll()
		}
	}()

	db.lock, err = os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock.Lock(ctx, db.lock, unix.LOCK_SH); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}

	path := filepath.Join(dir, dbFile)
	if !create {
		// Read the schema version before anything may write to the file:
		// a newer store must be left exactly as it is.
		if err := checkVersion(ctx, path, opts); err != nil {
			return nil, err
		}
	}
	db.w, err = sql.Open("sqlite", dsn(path, opts, true))
	if err != nil {
		return nil, err
	}
	db.w.SetMaxOpenConns(1)
	db.w.SetMaxIdleConns(1)
	db.w.SetConnMaxLifetime(0)
	db.r, err = sql.Open("sqlite", dsn(path, opts, false))
	if err != nil {
		return nil, err
	}
	db.r.SetMaxOpenConns(8)
	db.r.SetMaxIdleConns(8)
	db.r.SetConnMaxLifetime(0)

	if err := db.migrate(ctx, len(schema.SQLite), create); err != nil {
		return nil, err
	}
	for _, d := range []string{packsDir, cacheDir, workspacesDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := db.openCache(ctx); err != nil {
		return nil, err
	}
	db.packs = pack.NewSet(db.PacksDir(), opts.MaxPackSize, !opts.BufferedPacks, &db.total)
	db.content = db.packs
	db.fc = db.newFill()
	db.trees = newTreeCache(opts.TreeCacheBytes)
	return db, nil
}

// Dir is the store's directory.
func (db *DB) Dir() string { return db.dir }

// CacheDir is where Materialize puts file contents.
func (db *DB) CacheDir() string { return filepath.Join(db.dir, cacheDir) }

// WorkspacesDir is where workspace upper layers live; the store creates it
// and otherwise leaves its contents to the engine.
func (db *DB) WorkspacesDir() string { return filepath.Join(db.dir, workspacesDir) }

// PacksDir is where pack files live.
func (db *DB) PacksDir() string { return filepath.Join(db.dir, packsDir) }

// Close releases the database, pack files and the store lock. Batches not
// flushed are lost (as by Abort). Close is idempotent.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	return db.closeAll()
}

func (db *DB) closeAll() error {
	var errs []error
	db.stopLease()
	if db.fc != nil {
		db.fc.Close()
	}
	if db.cache != nil {
		db.cache.Close()
	}
	if db.content != nil {
		errs = append(errs, db.content.Close())
	}
	if db.r != nil && db.r != db.w {
		errs = append(errs, db.r.Close())
	}
	if db.w != nil {
		// No explicit checkpoint here: a TRUNCATE checkpoint takes the
		// write lock and then waits for other processes' readers, and a
		// reader that is about to write waits for that lock, so the two
		// stall each other until the busy timeout. SQLite checkpoints
		// (passively) on its own, and folds the WAL in when the last
		// connection to the store closes.
		errs = append(errs, db.w.Close())
	}
	if db.lock != nil {
		errs = append(errs, db.lock.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close store %s: %w", db.dir, err)
	}
	return nil
}

func (db *DB) check() error {
	if db.closed.Load() {
		return ErrClosed
	}
	return nil
}

// checkContext is a cheap cancellation check for long loops.
func checkContext(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}

func dbFiles() []string { return []string{dbFile, dbFile + "-wal", dbFile + "-shm"} }
