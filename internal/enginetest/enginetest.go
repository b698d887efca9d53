package enginetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
)

// Engine is a running engine with the Store and the platform it runs on.
type Engine struct {
	*engine.Engine
	Store *store.DB
	plat  *local.Platform
}

// Config is how Start makes an engine; the zero value is the daemon's
// defaults.
type Config struct {
	// DataPath is the data path of workspaces that name none (engine.Config).
	DataPath string
	// StoreURL, when set, makes the Store a shared one (store.Options.URL;
	// testenv.StoreURL gives one): engines started on one URL are hosts of
	// one fleet.
	StoreURL string
}

// Start brings up an engine on a new Store in dir/store with the local
// platform. Close takes it down.
func Start(ctx context.Context, dir string) (*Engine, error) {
	return StartWith(ctx, dir, Config{})
}

// StartWith is Start with cfg.
func StartWith(ctx context.Context, dir string, cfg Config) (*Engine, error) {
	db, err := store.Init(ctx, filepath.Join(dir, "store"), store.Options{URL: cfg.StoreURL})
	if err != nil {
		return nil, fmt.Errorf("enginetest: %w", err)
	}
	plat := local.New(local.Options{})
	if err := plat.Up(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("enginetest: %w", err), db.Close())
	}
	eng, err := engine.New(ctx, engine.Config{Store: db, Platforms: []platforms.Platform{plat}, DataPath: cfg.DataPath})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("enginetest: %w", err), plat.Down(ctx), db.Close())
	}
	return &Engine{Engine: eng, Store: db, plat: plat}, nil
}

// Close shuts the engine down (unmounting its workspaces), takes the
// platform down and closes the Store, in that order.
func (e *Engine) Close(ctx context.Context) error {
	return errors.Join(e.Shutdown(ctx), e.plat.Down(ctx), e.Store.Close())
}

// New returns an engine of t's own on a Store in t's temporary directory,
// closed when t ends.
func New(t testing.TB) *Engine {
	t.Helper()
	return NewWith(t, Config{})
}

// NewWith is New with cfg.
func NewWith(t testing.TB, cfg Config) *Engine {
	t.Helper()
	testenv.RequireFUSE(t)
	// Not t.Context(): the engine outlives the test body; it is closed in
	// a cleanup.
	e, err := StartWith(context.Background(), t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("enginetest: close: %v", err)
		}
	})
	return e
}

// shared is the test binary's shared engine, started on first use.
var shared struct {
	once sync.Once
	dir  string
	eng  *Engine
	err  error
}

// Shared returns the engine every test of this binary shares, starting it
// on first use; Main closes it after the last test.
func Shared(t testing.TB) *Engine {
	t.Helper()
	testenv.RequireFUSE(t)
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "layerfs-enginetest-"); shared.err != nil {
			return
		}
		shared.eng, shared.err = Start(context.Background(), shared.dir)
	})
	if shared.err != nil {
		t.Fatalf("the shared engine: %v", shared.err)
	}
	return shared.eng
}

// CloseShared closes the shared engine, if one was started, and removes its
// directory. Main calls it; a TestMain of its own calls it after m.Run.
func CloseShared() error {
	var errs []error
	if shared.eng != nil {
		errs = append(errs, shared.eng.Close(context.Background()))
		shared.eng = nil
	}
	if shared.dir != "" {
		errs = append(errs, os.RemoveAll(shared.dir))
		shared.dir = ""
	}
	return errors.Join(errs...)
}

// InitMain runs the sandbox init when this process was started as one and
// exits; otherwise it returns false. A TestMain of its own calls it first.
func InitMain() bool { return sandbox.InitMain() }

// Main is the TestMain of a package whose tests use New or Shared: it runs
// the sandbox init when the binary was started as one, else the tests, then
// closes the shared engine and exits with the tests' code (1 when they
// passed but the close failed).
func Main(m *testing.M) {
	if InitMain() {
		return
	}
	code := m.Run()
	if err := CloseShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
