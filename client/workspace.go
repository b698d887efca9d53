package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"layerfs.dev/layerfs/wire"
)

// WorkspaceSpec says where a workspace starts: a project's branch head, or
// the commit At names (commits still go to Branch).
type WorkspaceSpec = wire.WorkspaceSpec

// ExecResult is what an exec returned: ExitCode, Stdout and Stderr (when
// collected whole), and the Receipt of what it cost.
type ExecResult = wire.ExecResult

// Workspace is a handle on one workspace of the daemon. Its lifecycle is
//
//	CreateWorkspace -> Exec, files ... -> Commit (any number of times) -> End
//
// A workspace never commits implicitly: End refuses to drop uncommitted
// changes unless EndOptions.Discard is set.
//
// On a fleet, the handle sends its requests to the daemon that serves the
// workspace: the one that created it, or the one a misdirected answer
// named (followed once per request).
type Workspace struct {
	c    *Client // the client it was made from
	info wire.Workspace

	at      atomic.Pointer[Client] // the daemon that serves it (c until an answer names another)
	located atomic.Bool            // a request reached that daemon
}

func newWorkspace(c *Client, info wire.Workspace, located bool) *Workspace {
	ws := &Workspace{c: c, info: info}
	ws.at.Store(c)
	ws.located.Store(located)
	return ws
}

// CreateWorkspace creates and mounts a workspace.
func (c *Client) CreateWorkspace(ctx context.Context, spec WorkspaceSpec) (*Workspace, error) {
	var info wire.Workspace
	if err := c.doJSON(ctx, http.MethodPost, "/v1/workspaces", nil, spec, &info); err != nil {
		return nil, err
	}
	return newWorkspace(c, info, true), nil
}

// Workspaces lists the daemon's workspaces.
func (c *Client) Workspaces(ctx context.Context) ([]wire.Workspace, error) {
	var wss []wire.Workspace
	return wss, c.get(ctx, "/v1/workspaces", nil, &wss)
}

// FleetWorkspaces lists every host's workspaces on a shared Store, each
// with its host (Node) and that host's address (NodeAddress); on an
// embedded Store, the daemon's workspaces.
func (c *Client) FleetWorkspaces(ctx context.Context) ([]wire.Workspace, error) {
	var wss []wire.Workspace
	return wss, c.get(ctx, "/v1/workspaces", url.Values{"all": {"true"}}, &wss)
}

// send sends k to the daemon that serves the workspace. A misdirected
// answer naming a live host with an address is followed once: k goes
// there, and so do the handle's later requests. A body read from a stream
// cannot be sent twice, so before the first such request of a handle
// whose host is not known yet, a Stat finds the host.
func (ws *Workspace) send(ctx context.Context, k call) (*http.Response, error) {
	if k.body != nil && !ws.located.Load() {
		if _, err := ws.Stat(ctx, "."); err != nil {
			return nil, err
		}
	}
	resp, err := ws.at.Load().send(ctx, k)
	n, elsewhere := ServedBy(err)
	if !elsewhere || n.Address == "" || !n.Live || k.body != nil {
		// The error says why it is not followed: no address, a host
		// that is down, or a stream already spent.
		if err == nil {
			ws.located.Store(true)
		}
		return resp, err
	}
	peer, perr := ws.c.peer(ctx, n.Address)
	if perr != nil {
		return nil, fmt.Errorf("%w; following it: %w", err, perr)
	}
	ws.at.Store(peer)
	if resp, err = peer.send(ctx, k); err == nil {
		ws.located.Store(true)
	}
	return resp, err
}

func (ws *Workspace) get(ctx context.Context, path string, q url.Values, out any) error {
	return doJSON(ctx, ws, http.MethodGet, path, q, nil, out)
}

func (ws *Workspace) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) error {
	return doJSON(ctx, ws, method, path, q, in, out)
}

// Address is the address of the daemon the handle sends its requests to:
// the client's, or another host's once an answer named it.
func (ws *Workspace) Address() string { return ws.at.Load().addr }

// Workspace returns a handle on an existing workspace.
func (c *Client) Workspace(ctx context.Context, id string) (*Workspace, error) {
	ws := c.Attach(id)
	st, err := ws.Status(ctx)
	if err != nil {
		return nil, err
	}
	ws.info = st.Workspace
	return ws, nil
}

// Attach returns a handle on the workspace id without asking the daemon:
// the id is checked by the first call that uses it, and Info holds only the
// id until Status fills it.
func (c *Client) Attach(id string) *Workspace {
	return newWorkspace(c, wire.Workspace{ID: id}, false)
}

// ID is the workspace's id.
func (ws *Workspace) ID() string { return ws.info.ID }

// Info is the workspace as last reported by the daemon.
func (ws *Workspace) Info() wire.Workspace { return ws.info }

// MountPath is where the workspace is mounted on the daemon's host.
func (ws *Workspace) MountPath() string { return ws.info.MountPath }

func (ws *Workspace) path(suffix string) string {
	return "/v1/workspaces/" + seg(ws.info.ID) + suffix
}

// Status reports the workspace's state, its changes and its FUSE counters.
func (ws *Workspace) Status(ctx context.Context) (wire.WorkspaceStatus, error) {
	var st wire.WorkspaceStatus
	if err := ws.get(ctx, ws.path(""), nil, &st); err != nil {
		return st, err
	}
	ws.info = st.Workspace
	return st, nil
}

// Mount mounts the workspace again (after a daemon crash left it unmounted).
func (ws *Workspace) Mount(ctx context.Context) error {
	var info wire.Workspace
	if err := ws.doJSON(ctx, http.MethodPost, ws.path("/mount"), nil, nil, &info); err != nil {
		return err
	}
	ws.info = info
	return nil
}

// Commit captures the workspace's changes as a commit on its branch. A
// result of wire.HeadMoved means another commit reached the branch first:
// the commit is stored (Commit) but the branch's head is another (Head),
// and the workspace keeps its changes.
func (ws *Workspace) Commit(ctx context.Context, message string) (wire.CommitResult, error) {
	return ws.CommitWith(ctx, wire.CommitRequest{Message: message})
}

// CommitWith is Commit with every field of the request.
func (ws *Workspace) CommitWith(ctx context.Context, req wire.CommitRequest) (wire.CommitResult, error) {
	var res wire.CommitResult
	if err := ws.doJSON(ctx, http.MethodPost, ws.path("/commit"), nil, req, &res); err != nil {
		return res, err
	}
	if res.Head != "" {
		ws.info.Head = res.Head
	}
	return res, nil
}

// CommitMerge is Commit that, when the branch head moved, merges the
// workspace's commit with the new head and publishes the merge (result
// wire.Merged), trying again when the head moves once more; the workspace
// then holds the merge. A conflict publishes nothing: an error of class
// errclass.Conflict whose Conflicts(err) are the paths, the changes kept.
func (ws *Workspace) CommitMerge(ctx context.Context, message string) (wire.CommitResult, error) {
	return ws.CommitWith(ctx, wire.CommitRequest{Message: message, Merge: true})
}

// Update brings a branch's new head (req.Ref; default the workspace's
// branch) into the workspace, its uncommitted changes kept. A conflict
// changes nothing (errclass.Conflict) unless req.ConflictMarkers leaves
// it in the files, listed in Status, to resolve before a commit.
func (ws *Workspace) Update(ctx context.Context, req wire.UpdateRequest) (wire.UpdateResult, error) {
	var res wire.UpdateResult
	if err := ws.doJSON(ctx, http.MethodPost, ws.path("/update"), nil, req, &res); err != nil {
		return res, err
	}
	if res.Head != "" {
		ws.info.Head = res.Head
	}
	return res, nil
}

// Resolve marks conflicts an update left resolved, the files as they are
// (no paths: all), and returns those left.
func (ws *Workspace) Resolve(ctx context.Context, paths ...string) ([]wire.Conflict, error) {
	var res wire.ResolveResult
	err := ws.doJSON(ctx, http.MethodPost, ws.path("/resolve"), nil, wire.ResolveRequest{Paths: paths}, &res)
	return res.Conflicts, err
}

// Fork opens count new workspaces holding everything this one holds now,
// committed or not, each a handle of its own.
func (ws *Workspace) Fork(ctx context.Context, count int) ([]*Workspace, error) {
	var res wire.ForkResult
	if err := ws.doJSON(ctx, http.MethodPost, ws.path("/fork"), nil, wire.ForkRequest{Count: count}, &res); err != nil {
		return nil, err
	}
	out := make([]*Workspace, 0, len(res.Workspaces))
	for _, info := range res.Workspaces {
		out = append(out, newWorkspace(ws.at.Load(), info, true))
	}
	return out, nil
}

// SetNetwork changes the workspace's network at once: its next execs get
// change.Mode (wire.NetworkNone, NetworkEgress or NetworkHost), and its
// running egress sandboxes the new rules, their connections the rules
// deny cut. A bad change (errclass.Invalid) or one the platform cannot
// make (errclass.Unavailable) leaves the network as it was.
func (ws *Workspace) SetNetwork(ctx context.Context, change wire.NetworkChange) (wire.Workspace, error) {
	var res wire.Workspace
	if err := ws.doJSON(ctx, http.MethodPut, ws.path("/network"), nil, change, &res); err != nil {
		return res, err
	}
	ws.info.Network, ws.info.Egress = res.Network, res.Egress
	return res, nil
}

// EndOptions configure End.
type EndOptions struct {
	// Discard drops uncommitted changes; without it End fails with
	// uncommitted_changes (IsUncommitted) when there are any.
	Discard bool
}

// End unmounts the workspace and removes its upper layer.
func (ws *Workspace) End(ctx context.Context, opts EndOptions) error {
	q := url.Values{"discard": {strconv.FormatBool(opts.Discard)}}
	return ws.doJSON(ctx, http.MethodDelete, ws.path(""), q, nil, nil)
}

// ExecOptions configure one exec.
type ExecOptions struct {
	Timeout time.Duration // wall-clock limit; 0 for the daemon's default
	Env     []string      // NAME=VALUE
	Dir     string        // working directory relative to /workspace
	Stdin   []byte
	// Stdout and Stderr, when set, receive the output as the command writes
	// it (streamed); the result's Stdout and Stderr then hold only the
	// streams that were not redirected.
	Stdout, Stderr io.Writer
	OutputLimit    int64 // bytes per stream; 0 for the daemon's default
	MemoryBytes    int64
	Pids           int
	MilliCPUs      int // CPU in thousandths of a CPU (500: half a CPU); 0 no limit
	OpenFiles      int // RLIMIT_NOFILE; 0 the platform's default
	UID, GID       *int
}

// Exec runs body with bash -o pipefail -c in a fresh sandbox on the
// workspace. A non-zero exit is reported in the result, not as an error.
func (ws *Workspace) Exec(ctx context.Context, body string, opts ExecOptions) (*ExecResult, error) {
	return ws.exec(ctx, wire.ExecRequest{Body: body}, opts)
}

// ExecArgv runs argv exactly as given (no shell).
func (ws *Workspace) ExecArgv(ctx context.Context, argv []string, opts ExecOptions) (*ExecResult, error) {
	return ws.exec(ctx, wire.ExecRequest{Argv: argv}, opts)
}

func (ws *Workspace) exec(ctx context.Context, req wire.ExecRequest, opts ExecOptions) (*ExecResult, error) {
	b, err := json.Marshal(opts.request(req))
	if err != nil {
		return nil, err
	}
	k := call{method: http.MethodPost, path: ws.path("/execs"), data: b, ctype: "application/json"}
	stream := opts.Stdout != nil || opts.Stderr != nil
	if stream {
		k.accept = wire.MediaNDJSON
	}
	resp, err := ws.send(ctx, k)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if !stream || !strings.HasPrefix(resp.Header.Get("Content-Type"), wire.MediaNDJSON) {
		var res ExecResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			return nil, fmt.Errorf("decode exec result: %w", lostOr(ctx, err))
		}
		if stream {
			// The daemon answered whole: hand the output to the writers.
			if err := deliver(opts.Stdout, &res.Stdout); err != nil {
				return nil, err
			}
			if err := deliver(opts.Stderr, &res.Stderr); err != nil {
				return nil, err
			}
		}
		return &res, nil
	}
	return readEvents(ctx, resp.Body, opts.Stdout, opts.Stderr)
}

// request is req with the options' fields.
func (opts ExecOptions) request(req wire.ExecRequest) wire.ExecRequest {
	req.Env, req.Dir, req.Stdin = opts.Env, opts.Dir, opts.Stdin
	req.OutputLimit, req.MemoryBytes, req.Pids, req.UID, req.GID = opts.OutputLimit, opts.MemoryBytes, opts.Pids, opts.UID, opts.GID
	req.MilliCPUs, req.OpenFiles = opts.MilliCPUs, opts.OpenFiles
	if opts.Timeout != 0 {
		// Rounded up, and a negative timeout goes through for the daemon to refuse.
		req.TimeoutMs = int64((opts.Timeout + time.Millisecond - 1) / time.Millisecond)
		if opts.Timeout < 0 {
			req.TimeoutMs = int64(opts.Timeout / time.Millisecond)
			if req.TimeoutMs == 0 {
				req.TimeoutMs = -1
			}
		}
	}
	return req
}

func deliver(w io.Writer, data *[]byte) error {
	if w == nil {
		return nil
	}
	if _, err := w.Write(*data); err != nil {
		return err
	}
	*data = nil
	return nil
}

// readEvents consumes an ExecEvent stream up to its result.
func readEvents(ctx context.Context, r io.Reader, stdout, stderr io.Writer) (*ExecResult, error) {
	dec := json.NewDecoder(r)
	var out, errb bytes.Buffer
	for {
		var ev wire.ExecEvent
		if err := dec.Decode(&ev); err != nil {
			// The daemon ends every stream with a result or an error
			// event: an end before either is a broken connection.
			return nil, fmt.Errorf("read exec stream: %w", lostOr(ctx, err))
		}
		switch {
		case ev.Error != nil:
			return nil, ev.Error
		case ev.Result != nil:
			res := ev.Result
			if stdout == nil {
				res.Stdout = out.Bytes()
			}
			if stderr == nil {
				res.Stderr = errb.Bytes()
			}
			return res, nil
		}
		w := stdout
		var buf *bytes.Buffer = &out
		if ev.Stream == "stderr" {
			w, buf = stderr, &errb
		}
		if w == nil {
			buf.Write(ev.Data)
			continue
		}
		if _, err := w.Write(ev.Data); err != nil {
			return nil, fmt.Errorf("exec output: %w", err)
		}
	}
}

// filePath is the URL path of a workspace file: the path after
// wire.WorkspacePath (a leading "/" is the workspace root), escaped segment
// by segment. A path the rule refuses is sent as given (without leading
// slashes), for the daemon to refuse with invalid_argument.
func filePath(p string) string {
	c, err := wire.WorkspacePath(p)
	if err != nil {
		c = strings.TrimLeft(p, "/")
	}
	parts := strings.Split(c, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return "/files/" + strings.Join(parts, "/")
}

// WriteFile creates or replaces the file at path (relative to the workspace
// root) with data.
func (ws *Workspace) WriteFile(ctx context.Context, path string, data []byte, perm fs.FileMode) error {
	if data == nil {
		data = []byte{} // a body of no bytes, not no body
	}
	return ws.putFile(ctx, path, perm, call{data: data})
}

// WriteFrom is WriteFile streaming from r; size is r's length, or -1 when
// unknown.
func (ws *Workspace) WriteFrom(ctx context.Context, path string, r io.Reader, size int64, perm fs.FileMode) error {
	return ws.putFile(ctx, path, perm, call{body: r, size: size})
}

// putFile sends k's body as the file at path.
func (ws *Workspace) putFile(ctx context.Context, path string, perm fs.FileMode, k call) error {
	k.method, k.path, k.ctype = http.MethodPut, ws.path(filePath(path)), "application/octet-stream"
	k.query = url.Values{"mode": {fmt.Sprintf("%04o", perm.Perm())}}
	resp, err := ws.send(ctx, k)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// ReadFile returns the contents of the file at path.
func (ws *Workspace) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := ws.ReadTo(ctx, path, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReadTo streams the file at path to w and returns its size.
func (ws *Workspace) ReadTo(ctx context.Context, path string, w io.Writer) (int64, error) {
	resp, err := ws.send(ctx, call{method: http.MethodGet, path: ws.path(filePath(path)), size: -1})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("read %s: %w", path, err)
	}
	return n, nil
}
