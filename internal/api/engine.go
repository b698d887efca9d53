package api

import (
	"context"
	"io"
	"io/fs"
	"net"
	"time"

	"layerfs.dev/layerfs/wire"
)

// The engine as the API uses it, one interface per service, each declaring
// only what its handlers call; *engine.Engine implements them all (layerfsd
// asserts it at compile time) and package apitest holds the contract suite
// every implementation runs.
//
// Rules every method follows:
//
//   - Errors wrap error classes (errclass.NotFound, errclass.Invalid, ...),
//     which alone decide the status the API answers.
//   - A request for a workspace another host of a shared Store serves fails
//     with a *wire.Error of code misdirected whose Node names that host; the
//     API answers it as it is (421).
//   - Workspace paths are relative to the workspace root, slash separated
//     and already cleaned ("." is the root); the engine still resolves them
//     inside the workspace (no symlink escapes).

// ProjectManager creates projects and keeps their layers: the frozen
// commits new branches start from.
type ProjectManager interface {
	// CreateProject makes a project whose first layer is empty, or holds
	// the host directory req.FromPath, with a branch main on it;
	// errclass.Exists when the name is taken.
	CreateProject(ctx context.Context, req wire.CreateProject) (wire.Project, error)
	// Projects lists every project in name order.
	Projects(ctx context.Context) ([]wire.Project, error)
	Project(ctx context.Context, name string) (wire.Project, error)
	// Layers lists a project's layers, the first (index 1) first.
	Layers(ctx context.Context, project string) ([]wire.Layer, error)
	// AddLayer makes the head of req.Branch the project's next layer.
	AddLayer(ctx context.Context, project string, req wire.AddLayer) (wire.Layer, error)
}

// BranchManager keeps a project's branches: named heads that move only by
// compare-and-swap.
type BranchManager interface {
	// Branches lists a project's branches in name order.
	Branches(ctx context.Context, project string) ([]wire.Branch, error)
	Branch(ctx context.Context, project, name string) (wire.Branch, error)
	// ForkBranch makes branch req.Name at the commit req.From names,
	// copying nothing; errclass.Exists when the name is taken.
	ForkBranch(ctx context.Context, project string, req wire.ForkBranch) (wire.Branch, error)
	// DeleteBranch removes a branch (its commits stay until GC finds them
	// unreachable); errclass.Busy when a workspace stands on it.
	DeleteBranch(ctx context.Context, project, name string) error
}

// History reads a project's commits and moves trees between them and
// directories of the daemon's host.
//
// A ref is a branch name, "layer:N", or a commit id or a prefix of one
// (errclass.Invalid when the prefix is ambiguous).
type History interface {
	Commit(ctx context.Context, project, ref string) (wire.Commit, error)
	// Log lists at most limit commits reachable from ref through every
	// parent, a commit before its ancestors, in a fixed order; after (a
	// commit id of an earlier page, or "") is where the page starts.
	Log(ctx context.Context, project, ref, after string, limit int) ([]wire.Commit, error)
	// Diff pages through the changes from one ref's tree to another's in
	// path order, after cursor (the Next of the page before), at most limit
	// changes.
	Diff(ctx context.Context, project, from, to, cursor string, limit int) (wire.DiffPage, error)
	// CommitDir commits the host directory req.FromPath as the new tree of
	// branch.
	CommitDir(ctx context.Context, project, branch string, req wire.CommitDir) (wire.CommitResult, error)
	// Checkout writes the tree req.Ref names into the host directory
	// req.Path, which must be empty or new unless req.Overwrite.
	Checkout(ctx context.Context, project string, req wire.Checkout) (wire.CheckoutResult, error)
	// MergeBranch merges the commit req.Source names into the branch
	// req.Into, publishing by compare-and-swap on its head: fast-forward,
	// merged or up-to-date. Conflicts publish nothing and fail with a
	// *wire.Error of class conflict that lists them.
	MergeBranch(ctx context.Context, project string, req wire.MergeRequest) (wire.MergeResult, error)
}

// WorkspaceManager runs the lifecycle of workspaces: created on a branch,
// mounted, committed back by compare-and-swap on the branch head, ended.
type WorkspaceManager interface {
	CreateWorkspace(ctx context.Context, spec wire.WorkspaceSpec) (wire.Workspace, error)
	// Workspaces lists this host's workspaces.
	Workspaces(ctx context.Context) ([]wire.Workspace, error)
	// FleetWorkspaces lists every host's workspaces of a shared Store,
	// each with its host (Workspaces on an embedded Store).
	FleetWorkspaces(ctx context.Context) ([]wire.Workspace, error)
	// WorkspaceStatus describes a workspace with its changes since its
	// head commit.
	WorkspaceStatus(ctx context.Context, id string) (wire.WorkspaceStatus, error)
	MountWorkspace(ctx context.Context, id string) (wire.Workspace, error)
	// CommitWorkspace commits the workspace's changes onto its branch by
	// compare-and-swap on its head. The result is created, up-to-date, or,
	// when another commit reached the branch first, head-moved, which is
	// not an error: the commit is stored but not published, and the
	// workspace keeps its changes.
	CommitWorkspace(ctx context.Context, id string, req wire.CommitRequest) (wire.CommitResult, error)
	// EndWorkspace unmounts and forgets a workspace; errclass.Uncommitted
	// when it has changes, unless discard.
	EndWorkspace(ctx context.Context, id string, discard bool) error
	// UpdateWorkspace brings a branch's new head into a live workspace,
	// its uncommitted changes kept; errclass.Busy while an exec runs in
	// it; a conflict changes nothing (class conflict, listed) unless
	// req.ConflictMarkers leaves it in the files to resolve.
	UpdateWorkspace(ctx context.Context, id string, req wire.UpdateRequest) (wire.UpdateResult, error)
	// ResolveConflicts marks conflicts an update left resolved and
	// returns those left; errclass.NotFound for a path with none.
	ResolveConflicts(ctx context.Context, id string, req wire.ResolveRequest) ([]wire.Conflict, error)
	// ForkWorkspace opens req.Count workspaces holding everything the
	// workspace holds now, committed or not.
	ForkWorkspace(ctx context.Context, id string, req wire.ForkRequest) (wire.ForkResult, error)
	// SetNetwork makes change the network of a live workspace, at once:
	// its next execs get the mode, and running egress sandboxes the new
	// rules, their connections the rules deny cut. A bad change
	// (errclass.Invalid) or one the platform cannot make (Unavailable)
	// leaves the network as it was. It answers the workspace.
	SetNetwork(ctx context.Context, id string, change wire.NetworkChange) (wire.Workspace, error)
}

// Executor runs commands in workspaces.
type Executor interface {
	// Exec runs one command in a sandbox with the workspace at /workspace,
	// writing its output to stdout and stderr as it comes. A command that
	// fails (a non-zero exit, its timeout) is a result; errors are for
	// requests that could not run. When ctx ends first the command is
	// killed and Exec fails with an error wrapping ctx's. The result's
	// receipt counts what this exec did, never what other requests did
	// meanwhile (docs/api.md#receipts).
	Exec(ctx context.Context, id string, req wire.ExecRequest, stdout, stderr io.Writer) (wire.ExecResult, error)
	// Attach runs one command as Exec does, its input read from stdin as
	// it comes (req.Stdin must be empty): the end of stdin is the end of
	// the command's input. With req.TTY the command runs on a terminal:
	// its output all comes to stdout, the end of stdin hangs the terminal
	// up (the command's session gets SIGHUP), and resize carries new
	// sizes. Exec refuses req.TTY as invalid; a platform without
	// terminals refuses it as unavailable.
	Attach(ctx context.Context, id string, req wire.ExecRequest, stdin io.Reader, stdout, stderr io.Writer, resize <-chan wire.TerminalSize) (wire.ExecResult, error)
}

// Ports reaches the ports inside workspaces' sandboxes, and shares them.
type Ports interface {
	// DialPort connects to port inside the workspace's sandbox, in its
	// network namespace: errclass.Unreachable, naming the port, when
	// nothing listens on it; errclass.Invalid for a port outside 1-65535
	// (or of a workspace with the host's network); errclass.NotFound for
	// a workspace that ended; errclass.Unavailable on a platform that
	// forwards no ports.
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
	// SharePort makes a share of a live workspace's port (req.Public: its
	// token is the workspace's id and the port), or returns the one the
	// port has; errclass.Exists when that one differs in Public.
	SharePort(ctx context.Context, id string, req wire.ShareRequest) (wire.PortShare, error)
	// PortShares lists a workspace's shares by port.
	PortShares(ctx context.Context, id string) ([]wire.PortShare, error)
	// UnsharePort revokes the share of a workspace's port for good;
	// errclass.NotFound when it has none.
	UnsharePort(ctx context.Context, id string, port int) error
	// SharedPort is the workspace and port a share's token reaches;
	// errclass.NotFound for a token that reaches none (revoked, or never
	// made, or its workspace ended).
	SharedPort(ctx context.Context, token string) (id string, port int, err error)
}

// Files reads and writes the files of a workspace.
//
// GetTar names every entry below the path's base name ("." for the root): a
// file is one entry, a directory its own entry followed by its tree. PutTar
// checks the whole archive before it writes anything (absolute or ".."
// names, links leaving the tree, devices) and extracts into dir, creating
// it when missing.
// Services runs a workspace's services: commands kept running in its
// sandbox beside its execs.
type Services interface {
	// StartService starts one and answers once its command runs:
	// errclass.Exists when a running service has the name,
	// errclass.Invalid for a bad request or a command that cannot start
	// (the reason in the error), errclass.Unavailable on a platform that
	// runs no services.
	StartService(ctx context.Context, id string, req wire.ServiceRequest) (wire.Service, error)
	// Services lists them, running or ended, in name order.
	Services(ctx context.Context, id string) ([]wire.Service, error)
	// ServiceLogs writes what its log holds to out and, with follow, what
	// comes until it ends for good or ctx ends; flush after each write.
	ServiceLogs(ctx context.Context, id, name string, follow bool, out io.Writer, flush func()) error
	// StopService ends it for good: SIGTERM, then SIGKILL after grace (0:
	// wire.DefaultStopGrace); it answers once its end is recorded.
	StopService(ctx context.Context, id, name string, grace time.Duration) (wire.Service, error)
	// WaitService answers once it has ended for good.
	WaitService(ctx context.Context, id, name string) (wire.Service, error)
}

type Files interface {
	WriteFile(ctx context.Context, id, path string, mode fs.FileMode, r io.Reader) error
	ReadFile(ctx context.Context, id, path string, w io.Writer) (size int64, err error)
	PutTar(ctx context.Context, id, dir string, r io.Reader) error
	GetTar(ctx context.Context, id, path string, w io.Writer) error
	// Stat describes path without following a symlink at its end.
	Stat(ctx context.Context, id, path string) (wire.FileInfo, error)
	// List pages through the directory path in name order (depth first
	// when recursive), after the path cursor, at most limit entries.
	List(ctx context.Context, id, path string, recursive bool, cursor string, limit int) (wire.DirPage, error)
}

// Watcher streams the changes of a workspace's files.
type Watcher interface {
	// WatchWorkspace emits batches of changes below the directory prefix:
	// one wire.EventReady first, wire.EventEnded last when the workspace
	// ends; it returns when ctx ends or emit fails.
	WatchWorkspace(ctx context.Context, id, prefix string, emit func([]wire.FileEvent) error) error
}

// ImageManager keeps the Store's images: trees whose layers are commits,
// which a workspace's root can be (WorkspaceSpec.Image). Image names are
// references without a digest ("team/env:3.12"); NAME@DIGEST pins one.
type ImageManager interface {
	// Images lists every image in name order.
	Images(ctx context.Context) ([]wire.Image, error)
	// Image describes NAME or NAME@DIGEST; errclass.NotFound when no
	// stored image answers it.
	Image(ctx context.Context, ref string) (wire.Image, error)
	// ImportImage stores the image at req.Source (of req.Kind) as
	// req.Name, reading only the layers the Store lacks; a bad layer is
	// refused whole (errclass.Invalid) and names nothing.
	ImportImage(ctx context.Context, req wire.ImageImport) (wire.ImageResult, error)
	// RemoveImage removes a name (errclass.NotFound if none); what nothing
	// else reaches goes at the next GC, and workspaces on it keep their
	// root.
	RemoveImage(ctx context.Context, name string) error
	// PushImage writes an image to a registry from the Store.
	PushImage(ctx context.Context, req wire.ImagePush) (wire.ImageResult, error)
	// BuildImage builds req.File (a Dockerfile's text) with the host
	// directory req.Context, each RUN in a sandbox on the image so far,
	// each step cached by its inputs; an instruction it does not build is
	// refused (errclass.Invalid) naming it and its line, and a failing
	// step fails the build (its steps so far in the result).
	BuildImage(ctx context.Context, req wire.ImageBuild) (wire.ImageResult, error)
	// CommitImage makes a workspace root's changes a layer on its image,
	// named req.Name; errclass.Invalid for a workspace with no image.
	CommitImage(ctx context.Context, id string, req wire.ImageCommit) (wire.ImageResult, error)
	// SetProjectImage names the image a project's workspaces get when
	// they name none ("" for none); errclass.NotFound for an unknown one.
	SetProjectImage(ctx context.Context, project string, req wire.ProjectImage) (wire.Project, error)
}

// Maintenance looks after the Store.
type Maintenance interface {
	// GC removes what no branch, layer or workspace reaches (counts it
	// only, with req.DryRun).
	GC(ctx context.Context, req wire.GCRequest) (wire.GCResult, error)
	// Fsck checks the Store and reports every problem it finds; with
	// req.Repair it evicts the cache files it found damaged, and counts
	// them in Repaired.
	Fsck(ctx context.Context, req wire.FsckRequest) (wire.FsckReport, error)
	Stats(ctx context.Context) (wire.StoreStats, error)
}

// MetricsWriter adds the engine's metrics to GET /metrics.
type MetricsWriter interface {
	// WriteMetrics writes them in Prometheus' text format.
	WriteMetrics(w io.Writer) error
}

// Engine is every service at once: what NewServer takes, and what a
// daemon passes.
type Engine interface {
	ProjectManager
	BranchManager
	History
	WorkspaceManager
	Executor
	Services
	Ports
	Files
	Watcher
	ImageManager
	Maintenance
	MetricsWriter
}
