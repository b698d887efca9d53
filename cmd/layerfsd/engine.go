package main

import (
	"context"
	"errors"
	"fmt"

	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/host"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
)

// daemonEngine is what the daemon needs from the engine beyond the API.
type daemonEngine interface {
	api.Engine
	// Recover remounts (or cleans up) the workspaces a previous daemon left.
	Recover(ctx context.Context) error
	// Drain refuses new work and waits for running execs.
	Drain(ctx context.Context) error
	// Shutdown unmounts every workspace, keeping their records.
	Shutdown(ctx context.Context) error
	Platforms() []string
	// Isolation says what each platform's sandboxes get.
	Isolation(ctx context.Context) ([]wire.Isolation, error)
	LiveWorkspaces() int
}

// The engine serves each of the API's services; the daemon adds its own.
var (
	_ api.ProjectManager   = (*engine.Engine)(nil)
	_ api.BranchManager    = (*engine.Engine)(nil)
	_ api.History          = (*engine.Engine)(nil)
	_ api.WorkspaceManager = (*engine.Engine)(nil)
	_ api.Executor         = (*engine.Engine)(nil)
	_ api.Services         = (*engine.Engine)(nil)
	_ api.Files            = (*engine.Engine)(nil)
	_ api.Watcher          = (*engine.Engine)(nil)
	_ api.Maintenance      = (*engine.Engine)(nil)
	_ api.ImageManager     = (*engine.Engine)(nil)
	_ api.MetricsWriter    = (*engine.Engine)(nil)
	_ daemonEngine         = (*engine.Engine)(nil)
)

// newEngine brings up the named platforms and builds the engine over the
// Store. down takes the platforms down again (after the engine's Shutdown).
// engineDefaults are the settings of workspaces that name none.
type engineDefaults struct{ dataPath, durability string }

func newEngine(ctx context.Context, db *store.DB, names []string, defaults engineDefaults, hostOpts host.Options) (daemonEngine, func(context.Context) error, error) {
	var plats []platforms.Platform
	down := func(ctx context.Context) error {
		var errs []error
		for _, p := range plats {
			errs = append(errs, p.Down(ctx))
		}
		return errors.Join(errs...)
	}
	for _, n := range names {
		p, err := host.New(n, hostOpts)
		if err != nil {
			return nil, down, usageError{fmt.Errorf("--platform: %w", err)}
		}
		if err := p.Up(ctx); err != nil {
			return nil, down, fmt.Errorf("platform %s: %w", n, err)
		}
		plats = append(plats, p)
	}
	e, err := engine.New(ctx, engine.Config{Store: db, Platforms: plats, DataPath: defaults.dataPath,
		Durability: defaults.durability, Logger: hostOpts.Logger})
	if err != nil {
		return nil, down, err
	}
	return e, down, nil
}
