package main

import (
	"context"
	"errors"
	"log/slog"

	"layerfs.dev/layerfs/api"
	"layerfs.dev/layerfs/store"
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
	LiveWorkspaces() int
}

// newEngine wires the engine: the platforms named (brought up) and the
// Store. This is the one place that knows how; it is finished when
// engine.New lands:
//
//	plats := []platforms.Platform{local.New(local.Options{Logger: log})} // per name, each Up
//	e, err := engine.New(ctx, engine.Config{Store: db, Platforms: plats, Logger: log})
//
// down takes the platforms down again; it is never nil.
func newEngine(ctx context.Context, db *store.DB, platformNames []string, log *slog.Logger) (daemonEngine, func(context.Context) error, error) {
	down := func(context.Context) error { return nil }
	return nil, down, errors.New("this build has no engine yet (engine.New has not landed)")
}
