package apitest

import (
	"context"
	"io"
	"io/fs"
	"net"
	"sync"

	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/wire"
)

// Elsewhere is an engine as one host of a fleet sees it: requests for the
// workspaces it is told another host serves (Serve) fail as misdirected,
// naming that host, and every other call goes to the engine it wraps. It
// gives a test the answers a consistent shared Store never gives at once
// (one host naming a second that names a third, a host that is down at an
// address nothing listens on) without PostgreSQL, S3 and three daemons; Run
// checks that it answers as the engine does.
type Elsewhere struct {
	api.Engine

	mu    sync.Mutex
	hosts map[string]wire.Node // workspace id -> the host that serves it
}

// NewElsewhere wraps eng.
func NewElsewhere(eng api.Engine) *Elsewhere {
	return &Elsewhere{Engine: eng, hosts: map[string]wire.Node{}}
}

// Serve makes requests for workspace id fail as misdirected, naming n as
// the host that serves it.
func (e *Elsewhere) Serve(id string, n wire.Node) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hosts[id] = n
}

// misdirected is the engine's answer for a workspace another host serves,
// or nil when this one is not told of one.
func (e *Elsewhere) misdirected(id string) error {
	e.mu.Lock()
	n, ok := e.hosts[id]
	e.mu.Unlock()
	if !ok {
		return nil
	}
	msg := "workspace " + id + " is served by host " + n.Name
	if !n.Live {
		msg += " at " + n.Address + ": it is down"
	} else {
		msg += " at " + n.Address + ", not by this daemon: send the request there"
	}
	return &wire.Error{Code: wire.CodeMisdirected, Message: msg, Node: &n}
}

// WorkspaceStatus implements api.WorkspaceManager.
func (e *Elsewhere) WorkspaceStatus(ctx context.Context, id string) (wire.WorkspaceStatus, error) {
	if err := e.misdirected(id); err != nil {
		return wire.WorkspaceStatus{}, err
	}
	return e.Engine.WorkspaceStatus(ctx, id)
}

// UpdateWorkspace implements api.WorkspaceManager.
func (e *Elsewhere) UpdateWorkspace(ctx context.Context, id string, req wire.UpdateRequest) (wire.UpdateResult, error) {
	if err := e.misdirected(id); err != nil {
		return wire.UpdateResult{}, err
	}
	return e.Engine.UpdateWorkspace(ctx, id, req)
}

// ResolveConflicts implements api.WorkspaceManager.
func (e *Elsewhere) ResolveConflicts(ctx context.Context, id string, req wire.ResolveRequest) ([]wire.Conflict, error) {
	if err := e.misdirected(id); err != nil {
		return nil, err
	}
	return e.Engine.ResolveConflicts(ctx, id, req)
}

// ForkWorkspace implements api.WorkspaceManager.
func (e *Elsewhere) ForkWorkspace(ctx context.Context, id string, req wire.ForkRequest) (wire.ForkResult, error) {
	if err := e.misdirected(id); err != nil {
		return wire.ForkResult{}, err
	}
	return e.Engine.ForkWorkspace(ctx, id, req)
}

// SetNetwork implements api.WorkspaceManager.
func (e *Elsewhere) SetNetwork(ctx context.Context, id string, change wire.NetworkChange) (wire.Workspace, error) {
	if err := e.misdirected(id); err != nil {
		return wire.Workspace{}, err
	}
	return e.Engine.SetNetwork(ctx, id, change)
}

// MountWorkspace implements api.WorkspaceManager.
func (e *Elsewhere) MountWorkspace(ctx context.Context, id string) (wire.Workspace, error) {
	if err := e.misdirected(id); err != nil {
		return wire.Workspace{}, err
	}
	return e.Engine.MountWorkspace(ctx, id)
}

// CommitWorkspace implements api.WorkspaceManager.
func (e *Elsewhere) CommitWorkspace(ctx context.Context, id string, req wire.CommitRequest) (wire.CommitResult, error) {
	if err := e.misdirected(id); err != nil {
		return wire.CommitResult{}, err
	}
	return e.Engine.CommitWorkspace(ctx, id, req)
}

// EndWorkspace implements api.WorkspaceManager.
func (e *Elsewhere) EndWorkspace(ctx context.Context, id string, discard bool) error {
	if err := e.misdirected(id); err != nil {
		return err
	}
	return e.Engine.EndWorkspace(ctx, id, discard)
}

// Exec implements api.Executor.
func (e *Elsewhere) Exec(ctx context.Context, id string, req wire.ExecRequest, stdout, stderr io.Writer) (wire.ExecResult, error) {
	if err := e.misdirected(id); err != nil {
		return wire.ExecResult{}, err
	}
	return e.Engine.Exec(ctx, id, req, stdout, stderr)
}

// Attach implements api.Executor.
func (e *Elsewhere) Attach(ctx context.Context, id string, req wire.ExecRequest, stdin io.Reader, stdout, stderr io.Writer, resize <-chan wire.TerminalSize) (wire.ExecResult, error) {
	if err := e.misdirected(id); err != nil {
		return wire.ExecResult{}, err
	}
	return e.Engine.Attach(ctx, id, req, stdin, stdout, stderr, resize)
}

// WriteFile implements api.Files.
func (e *Elsewhere) WriteFile(ctx context.Context, id, path string, mode fs.FileMode, r io.Reader) error {
	if err := e.misdirected(id); err != nil {
		return err
	}
	return e.Engine.WriteFile(ctx, id, path, mode, r)
}

// ReadFile implements api.Files.
func (e *Elsewhere) ReadFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	if err := e.misdirected(id); err != nil {
		return 0, err
	}
	return e.Engine.ReadFile(ctx, id, path, w)
}

// PutTar implements api.Files.
func (e *Elsewhere) PutTar(ctx context.Context, id, dir string, r io.Reader) error {
	if err := e.misdirected(id); err != nil {
		return err
	}
	return e.Engine.PutTar(ctx, id, dir, r)
}

// GetTar implements api.Files.
func (e *Elsewhere) GetTar(ctx context.Context, id, path string, w io.Writer) error {
	if err := e.misdirected(id); err != nil {
		return err
	}
	return e.Engine.GetTar(ctx, id, path, w)
}

// Stat implements api.Files.
func (e *Elsewhere) Stat(ctx context.Context, id, path string) (wire.FileInfo, error) {
	if err := e.misdirected(id); err != nil {
		return wire.FileInfo{}, err
	}
	return e.Engine.Stat(ctx, id, path)
}

// List implements api.Files.
func (e *Elsewhere) List(ctx context.Context, id, path string, recursive bool, cursor string, limit int) (wire.DirPage, error) {
	if err := e.misdirected(id); err != nil {
		return wire.DirPage{}, err
	}
	return e.Engine.List(ctx, id, path, recursive, cursor, limit)
}

// WatchWorkspace implements api.Watcher.
func (e *Elsewhere) WatchWorkspace(ctx context.Context, id, prefix string, emit func([]wire.FileEvent) error) error {
	if err := e.misdirected(id); err != nil {
		return err
	}
	return e.Engine.WatchWorkspace(ctx, id, prefix, emit)
}

// CommitImage implements api.ImageManager.
func (e *Elsewhere) CommitImage(ctx context.Context, id string, req wire.ImageCommit) (wire.ImageResult, error) {
	if err := e.misdirected(id); err != nil {
		return wire.ImageResult{}, err
	}
	return e.Engine.CommitImage(ctx, id, req)
}

// DialPort implements api.Ports.
func (e *Elsewhere) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if err := e.misdirected(id); err != nil {
		return nil, err
	}
	return e.Engine.DialPort(ctx, id, port)
}

// SharePort implements api.Ports.
func (e *Elsewhere) SharePort(ctx context.Context, id string, req wire.ShareRequest) (wire.PortShare, error) {
	if err := e.misdirected(id); err != nil {
		return wire.PortShare{}, err
	}
	return e.Engine.SharePort(ctx, id, req)
}

// PortShares implements api.Ports.
func (e *Elsewhere) PortShares(ctx context.Context, id string) ([]wire.PortShare, error) {
	if err := e.misdirected(id); err != nil {
		return nil, err
	}
	return e.Engine.PortShares(ctx, id)
}

// UnsharePort implements api.Ports.
func (e *Elsewhere) UnsharePort(ctx context.Context, id string, port int) error {
	if err := e.misdirected(id); err != nil {
		return err
	}
	return e.Engine.UnsharePort(ctx, id, port)
}
