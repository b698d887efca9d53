package api

import (
	"context"
	"io"
	"io/fs"

	"layerfs.dev/layerfs/wire"
)

// Engine is what the API needs from LayerFS's engine (*engine.Engine). Errors
// wrap error classes (errclass.NotFound, ...) so that handlers can
// map them to statuses. A request for a workspace another host of a shared
// Store serves fails with a *wire.Error of code misdirected whose Node
// names that host; the API answers it as it is (421).
//
// Paths given to the file methods are relative to the workspace root, slash
// separated and already cleaned ("." is the root); the engine still resolves
// them inside the workspace (no symlink escapes). GetTar names every entry
// below the path's base name ("." for the root): a file is one entry, a
// directory its own entry followed by its tree. PutTar checks the whole
// archive before it writes anything (absolute or ".." names, links leaving
// the tree, devices) and extracts into dir, creating it when missing.
type Engine interface {
	CreateProject(ctx context.Context, req wire.CreateProject) (wire.Project, error)
	Projects(ctx context.Context) ([]wire.Project, error)
	Project(ctx context.Context, name string) (wire.Project, error)
	Layers(ctx context.Context, project string) ([]wire.Layer, error)
	AddLayer(ctx context.Context, project string, req wire.AddLayer) (wire.Layer, error)
	Branches(ctx context.Context, project string) ([]wire.Branch, error)
	Branch(ctx context.Context, project, name string) (wire.Branch, error)
	ForkBranch(ctx context.Context, project string, req wire.ForkBranch) (wire.Branch, error)
	DeleteBranch(ctx context.Context, project, name string) error
	Commit(ctx context.Context, project, ref string) (wire.Commit, error)
	Log(ctx context.Context, project, ref string, limit int) ([]wire.Commit, error)
	Diff(ctx context.Context, project, from, to, cursor string, limit int) (wire.DiffPage, error)
	CommitDir(ctx context.Context, project, branch string, req wire.CommitDir) (wire.CommitResult, error)
	Checkout(ctx context.Context, project string, req wire.Checkout) (wire.CheckoutResult, error)

	CreateWorkspace(ctx context.Context, spec wire.WorkspaceSpec) (wire.Workspace, error)
	Workspaces(ctx context.Context) ([]wire.Workspace, error)
	// FleetWorkspaces lists every host's workspaces of a shared Store,
	// each with its host (Workspaces on an embedded Store).
	FleetWorkspaces(ctx context.Context) ([]wire.Workspace, error)
	WorkspaceStatus(ctx context.Context, id string) (wire.WorkspaceStatus, error)
	MountWorkspace(ctx context.Context, id string) (wire.Workspace, error)
	CommitWorkspace(ctx context.Context, id string, req wire.CommitRequest) (wire.CommitResult, error)
	EndWorkspace(ctx context.Context, id string, discard bool) error
	Exec(ctx context.Context, id string, req wire.ExecRequest, stdout, stderr io.Writer) (wire.ExecResult, error)

	WriteFile(ctx context.Context, id, path string, mode fs.FileMode, r io.Reader) error
	ReadFile(ctx context.Context, id, path string, w io.Writer) (size int64, err error)
	PutTar(ctx context.Context, id, dir string, r io.Reader) error
	GetTar(ctx context.Context, id, path string, w io.Writer) error
	// Stat describes path without following a symlink at its end.
	Stat(ctx context.Context, id, path string) (wire.FileInfo, error)
	// List pages through the directory path in name order (depth first
	// when recursive), after the path cursor, at most limit entries.
	List(ctx context.Context, id, path string, recursive bool, cursor string, limit int) (wire.DirPage, error)
	// WatchWorkspace emits batches of changes below the directory prefix:
	// one wire.EventReady first, wire.EventEnded last when the workspace
	// ends; it returns when ctx ends or emit fails.
	WatchWorkspace(ctx context.Context, id, prefix string, emit func([]wire.FileEvent) error) error

	GC(ctx context.Context, req wire.GCRequest) (wire.GCResult, error)
	Fsck(ctx context.Context) (wire.FsckReport, error)
	Stats(ctx context.Context) (wire.StoreStats, error)
	WriteMetrics(w io.Writer) error
}
