// Package apitest provides Engine, an in-memory double of api.Engine for
// tests of HTTP behaviour (status codes, JSON errors, streaming, limits,
// auth) and of the Go SDK. It keeps real state (projects, branches with
// compare-and-swap heads, commits as file snapshots, workspaces as file
// maps) but runs no sandbox: Exec interprets a handful of words (echo, cat,
// write, sleep, exit, stream) so that tests can drive output and timing.
// End-to-end behaviour is tested against the real engine elsewhere.
package apitest

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

type file struct {
	mode fs.FileMode // type bits and permissions
	data []byte
	link string
}

type tree map[string]file

func (t tree) clone() tree {
	c := make(tree, len(t))
	for k, v := range t {
		c[k] = v
	}
	return c
}

type project struct {
	info     wire.Project
	layers   []wire.Layer
	branches map[string]*wire.Branch
	commits  map[string]wire.Commit
	trees    map[string]tree
}

type workspace struct {
	info  wire.Workspace
	files tree
	// watchers receive the double's own writes as events; ended closes
	// when the workspace ends.
	watchers []chan wire.FileEvent
	ended    chan struct{}
}

// Engine is the double. The zero value is not usable; call New.
type Engine struct {
	mu         sync.Mutex
	projects   map[string]*project
	workspaces map[string]*workspace
	seq        int
	now        func() time.Time

	// Mutations counts calls that changed state; tests of bad input check
	// that it did not move.
	Mutations atomic.Int64
	// Running counts execs in progress.
	Running atomic.Int64

	// elsewhere are workspaces another host serves (ServeElsewhere).
	elsewhere map[string]wire.Node
}

// New returns an empty engine.
func New() *Engine {
	return &Engine{projects: map[string]*project{}, workspaces: map[string]*workspace{}, now: time.Now,
		elsewhere: map[string]wire.Node{}}
}

// ServeElsewhere makes requests for workspace id fail as misdirected,
// naming n as the host that serves it, as a fleet's daemon answers for a
// workspace of another host.
func (e *Engine) ServeElsewhere(id string, n wire.Node) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.elsewhere[id] = n
}

func (e *Engine) id(prefix string) string {
	e.seq++
	return fmt.Sprintf("%s%04x", prefix, e.seq)
}

func notFound(what string) error { return fmt.Errorf("%s: %w", what, errclass.NotFound) }

func (e *Engine) project(name string) (*project, error) {
	p := e.projects[name]
	if p == nil {
		return nil, notFound("project " + name)
	}
	return p, nil
}

// branch returns a project and one of its branches. Needs e.mu.
func (e *Engine) branch(project, name string) (*project, *wire.Branch, error) {
	p, err := e.project(project)
	if err != nil {
		return nil, nil, err
	}
	b := p.branches[name]
	if b == nil {
		return nil, nil, notFound("branch " + name)
	}
	return p, b, nil
}

// resolve returns a project and the commit id a ref names in it. Needs
// e.mu.
func (e *Engine) resolve(project, ref string) (*project, string, error) {
	p, err := e.project(project)
	if err != nil {
		return nil, "", err
	}
	id, err := p.resolve(ref)
	if err != nil {
		return nil, "", err
	}
	return p, id, nil
}

// inKeyOrder returns f of each value of m in the order of their keys (nil
// for an empty map).
func inKeyOrder[V, T any](m map[string]V, f func(V) T) []T {
	var out []T
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, f(m[k]))
	}
	return out
}

// resolve returns the commit id a ref names.
func (p *project) resolve(ref string) (string, error) {
	if n, ok := strings.CutPrefix(ref, "layer:"); ok {
		i, err := strconv.Atoi(n)
		if err != nil || i < 1 || i > len(p.layers) {
			return "", notFound("layer " + n)
		}
		return p.layers[i-1].Commit, nil
	}
	if b := p.branches[ref]; b != nil {
		return b.Head, nil
	}
	var hit string
	for id := range p.commits {
		if strings.HasPrefix(id, ref) {
			if hit != "" {
				return "", fmt.Errorf("ref %s is ambiguous: %w", ref, errclass.Invalid)
			}
			hit = id
		}
	}
	if hit == "" {
		return "", notFound("ref " + ref)
	}
	return hit, nil
}

func (e *Engine) commit(p *project, parent, msg string, t tree) wire.Commit {
	c := wire.Commit{ID: fmt.Sprintf("c%015x", e.seq+1000), Root: "r", Parent: parent, Message: msg, Time: e.now()}
	e.seq++
	for _, f := range t {
		if f.mode.IsRegular() {
			c.Stats.Files++
			c.Stats.Bytes += int64(len(f.data))
		}
	}
	p.commits[c.ID] = c
	p.trees[c.ID] = t.clone()
	return c
}

// CreateProject implements api.Engine.
func (e *Engine) CreateProject(ctx context.Context, req wire.CreateProject) (wire.Project, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.projects[req.Name] != nil {
		return wire.Project{}, fmt.Errorf("project %s: %w", req.Name, errclass.Exists)
	}
	e.Mutations.Add(1)
	p := &project{info: wire.Project{Name: req.Name, Created: e.now(), Layers: 1, Branches: 1},
		branches: map[string]*wire.Branch{}, commits: map[string]wire.Commit{}, trees: map[string]tree{}}
	c := e.commit(p, "", "first layer", tree{})
	p.layers = append(p.layers, wire.Layer{Project: req.Name, Index: 1, Commit: c.ID, Created: e.now()})
	p.branches["main"] = &wire.Branch{Project: req.Name, Name: "main", Head: c.ID, Created: e.now(), Updated: e.now()}
	e.projects[req.Name] = p
	return p.info, nil
}

// Projects implements api.Engine.
func (e *Engine) Projects(ctx context.Context) ([]wire.Project, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return inKeyOrder(e.projects, func(p *project) wire.Project { return p.info }), nil
}

// Project implements api.Engine.
func (e *Engine) Project(ctx context.Context, name string) (wire.Project, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, err := e.project(name)
	if err != nil {
		return wire.Project{}, err
	}
	return p.info, nil
}

// Layers implements api.Engine.
func (e *Engine) Layers(ctx context.Context, project string) ([]wire.Layer, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, err := e.project(project)
	if err != nil {
		return nil, err
	}
	return slices.Clone(p.layers), nil
}

// AddLayer implements api.Engine.
func (e *Engine) AddLayer(ctx context.Context, project string, req wire.AddLayer) (wire.Layer, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, b, err := e.branch(project, req.Branch)
	if err != nil {
		return wire.Layer{}, err
	}
	e.Mutations.Add(1)
	l := wire.Layer{Project: project, Index: len(p.layers) + 1, Commit: b.Head, Created: e.now()}
	p.layers = append(p.layers, l)
	p.info.Layers++
	return l, nil
}

// Branches implements api.Engine.
func (e *Engine) Branches(ctx context.Context, project string) ([]wire.Branch, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, err := e.project(project)
	if err != nil {
		return nil, err
	}
	return inKeyOrder(p.branches, func(b *wire.Branch) wire.Branch { return *b }), nil
}

// Branch implements api.Engine.
func (e *Engine) Branch(ctx context.Context, project, name string) (wire.Branch, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, b, err := e.branch(project, name)
	if err != nil {
		return wire.Branch{}, err
	}
	return *b, nil
}

// ForkBranch implements api.Engine.
func (e *Engine) ForkBranch(ctx context.Context, project string, req wire.ForkBranch) (wire.Branch, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, err := e.project(project)
	if err != nil {
		return wire.Branch{}, err
	}
	if p.branches[req.Name] != nil {
		return wire.Branch{}, fmt.Errorf("branch %s: %w", req.Name, errclass.Exists)
	}
	head, err := p.resolve(req.From)
	if err != nil {
		return wire.Branch{}, err
	}
	e.Mutations.Add(1)
	b := &wire.Branch{Project: project, Name: req.Name, Head: head, Created: e.now(), Updated: e.now()}
	p.branches[req.Name] = b
	p.info.Branches++
	return *b, nil
}

// DeleteBranch implements api.Engine.
func (e *Engine) DeleteBranch(ctx context.Context, project, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, _, err := e.branch(project, name)
	if err != nil {
		return err
	}
	e.Mutations.Add(1)
	delete(p.branches, name)
	p.info.Branches--
	return nil
}

// Commit implements api.Engine.
func (e *Engine) Commit(ctx context.Context, project, ref string) (wire.Commit, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, id, err := e.resolve(project, ref)
	if err != nil {
		return wire.Commit{}, err
	}
	return p.commits[id], nil
}

// Log implements api.Engine.
func (e *Engine) Log(ctx context.Context, project, ref string, limit int) ([]wire.Commit, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, id, err := e.resolve(project, ref)
	if err != nil {
		return nil, err
	}
	var cs []wire.Commit
	for id != "" && len(cs) < limit {
		c := p.commits[id]
		cs = append(cs, c)
		id = c.Parent
	}
	return cs, nil
}

// Diff implements api.Engine; the cursor is the index of the next change.
func (e *Engine) Diff(ctx context.Context, project, from, to, cursor string, limit int) (wire.DiffPage, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, a, err := e.resolve(project, from)
	if err != nil {
		return wire.DiffPage{}, err
	}
	b, err := p.resolve(to)
	if err != nil {
		return wire.DiffPage{}, err
	}
	all := diff(p.trees[a], p.trees[b])
	start := 0
	if cursor != "" {
		if start, err = strconv.Atoi(cursor); err != nil || start < 0 || start > len(all) {
			return wire.DiffPage{}, fmt.Errorf("cursor %q: %w", cursor, errclass.Invalid)
		}
	}
	end := min(start+limit, len(all))
	page := wire.DiffPage{Changes: all[start:end]}
	if end < len(all) {
		page.Next = strconv.Itoa(end)
	}
	return page, nil
}

func diff(a, b tree) []wire.Change {
	var cs []wire.Change
	for p, f := range b {
		g, ok := a[p]
		switch {
		case !ok:
			cs = append(cs, wire.Change{Path: p, Kind: wire.Added})
		case !bytes.Equal(f.data, g.data) || f.mode != g.mode || f.link != g.link:
			cs = append(cs, wire.Change{Path: p, Kind: wire.Modified})
		}
	}
	for p := range a {
		if _, ok := b[p]; !ok {
			cs = append(cs, wire.Change{Path: p, Kind: wire.Removed})
		}
	}
	slices.SortFunc(cs, func(x, y wire.Change) int { return strings.Compare(x.Path, y.Path) })
	return cs
}

// CommitDir implements api.Engine; the double has no host directories.
func (e *Engine) CommitDir(ctx context.Context, project, branch string, req wire.CommitDir) (wire.CommitResult, error) {
	return wire.CommitResult{}, fmt.Errorf("commit %s: the test engine reads no host directories: %w", req.FromPath, errclass.Unavailable)
}

// Checkout implements api.Engine; the double has no host directories.
func (e *Engine) Checkout(ctx context.Context, project string, req wire.Checkout) (wire.CheckoutResult, error) {
	return wire.CheckoutResult{}, fmt.Errorf("checkout to %s: the test engine writes no host directories: %w", req.Path, errclass.Unavailable)
}

// CreateWorkspace implements api.Engine.
func (e *Engine) CreateWorkspace(ctx context.Context, spec wire.WorkspaceSpec) (wire.Workspace, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, b, err := e.branch(spec.Project, spec.Branch)
	if err != nil {
		return wire.Workspace{}, err
	}
	base := b.Head
	if spec.At != "" {
		if base, err = p.resolve(spec.At); err != nil {
			return wire.Workspace{}, err
		}
	}
	e.Mutations.Add(1)
	id := e.id("ws-")
	network := spec.Network
	if network == "" {
		network = wire.NetworkNone
	}
	ws := &workspace{info: wire.Workspace{ID: id, Project: spec.Project, Branch: spec.Branch, Base: base, Head: base,
		MountPath: "/nonexistent/" + id, Platform: "test", Network: network, State: wire.StateMounted, Created: e.now()},
		files: p.trees[base].clone(), ended: make(chan struct{})}
	e.workspaces[id] = ws
	return ws.info, nil
}

// Workspaces implements api.Engine.
func (e *Engine) Workspaces(ctx context.Context) ([]wire.Workspace, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return inKeyOrder(e.workspaces, func(ws *workspace) wire.Workspace { return ws.info }), nil
}

// FleetWorkspaces implements api.Engine: the double is one host.
func (e *Engine) FleetWorkspaces(ctx context.Context) ([]wire.Workspace, error) {
	return e.Workspaces(ctx)
}

func (e *Engine) workspace(id string) (*workspace, error) {
	ws := e.workspaces[id]
	if n, ok := e.elsewhere[id]; ok && ws == nil {
		return nil, &wire.Error{Code: wire.CodeMisdirected, Message: "workspace " + id + " is served by host " + n.Name, Node: &n}
	}
	if ws == nil {
		return nil, notFound("workspace " + id)
	}
	return ws, nil
}

// changes lists what ws changed since its head commit. Needs e.mu.
func (e *Engine) changes(ws *workspace) []wire.Change {
	return diff(e.projects[ws.info.Project].trees[ws.info.Head], ws.files)
}

// WorkspaceStatus implements api.Engine.
func (e *Engine) WorkspaceStatus(ctx context.Context, id string) (wire.WorkspaceStatus, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ws, err := e.workspace(id)
	if err != nil {
		return wire.WorkspaceStatus{}, err
	}
	return wire.WorkspaceStatus{Workspace: ws.info, Changes: e.changes(ws)}, nil
}

// MountWorkspace implements api.Engine.
func (e *Engine) MountWorkspace(ctx context.Context, id string) (wire.Workspace, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ws, err := e.workspace(id)
	if err != nil {
		return wire.Workspace{}, err
	}
	return ws.info, nil
}

// CommitWorkspace implements api.Engine.
func (e *Engine) CommitWorkspace(ctx context.Context, id string, req wire.CommitRequest) (wire.CommitResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ws, err := e.workspace(id)
	if err != nil {
		return wire.CommitResult{}, err
	}
	p := e.projects[ws.info.Project]
	b := p.branches[ws.info.Branch]
	if len(e.changes(ws)) == 0 {
		return wire.CommitResult{Commit: ws.info.Head, Result: wire.UpToDate, Head: b.Head}, nil
	}
	e.Mutations.Add(1)
	c := e.commit(p, ws.info.Head, req.Message, ws.files)
	if b.Head != ws.info.Head {
		return wire.CommitResult{Commit: c.ID, Result: wire.HeadMoved, Head: b.Head},
			fmt.Errorf("commit %s on %s: %w", c.ID, b.Name, errclass.HeadMoved)
	}
	b.Head, b.Updated = c.ID, e.now()
	ws.info.Head = c.ID
	return wire.CommitResult{Commit: c.ID, Result: wire.Created, Head: c.ID}, nil
}

// EndWorkspace implements api.Engine.
func (e *Engine) EndWorkspace(ctx context.Context, id string, discard bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	ws, err := e.workspace(id)
	if err != nil {
		return err
	}
	if !discard && len(e.changes(ws)) > 0 {
		return fmt.Errorf("end %s: %w", id, errclass.Uncommitted)
	}
	e.Mutations.Add(1)
	delete(e.workspaces, id)
	close(ws.ended)
	return nil
}

// Exec implements api.Engine with a tiny interpreter. Argv, or Body split
// into words, is one of:
//
//	echo WORDS...         print WORDS to stdout
//	error WORDS...        print WORDS to stderr
//	cat PATH              print a file
//	write PATH WORDS...   write WORDS to a file
//	sleep MS              sleep (ends early with the context)
//	exit CODE             exit with CODE
//	stream N MS           print N lines, one every MS milliseconds
func (e *Engine) Exec(ctx context.Context, id string, req wire.ExecRequest, stdout, stderr io.Writer) (wire.ExecResult, error) {
	start := time.Now()
	e.mu.Lock()
	_, err := e.workspace(id)
	e.mu.Unlock()
	if err != nil {
		return wire.ExecResult{}, err
	}
	e.Running.Add(1)
	defer e.Running.Add(-1)
	argv := req.Argv
	if len(argv) == 0 {
		argv = strings.Fields(req.Body)
	}
	res := wire.ExecResult{}
	arg := func(i int) string {
		if i < len(argv) {
			return argv[i]
		}
		return ""
	}
	num := func(i int) int { n, _ := strconv.Atoi(arg(i)); return n }
	if req.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	switch arg(0) {
	case "echo":
		fmt.Fprintln(stdout, strings.Join(argv[1:], " "))
	case "error":
		fmt.Fprintln(stderr, strings.Join(argv[1:], " "))
	case "cat":
		var buf bytes.Buffer
		if _, err := e.ReadFile(ctx, id, arg(1), &buf); err != nil {
			fmt.Fprintf(stderr, "cat: %s: no such file\n", arg(1))
			res.ExitCode = 1
			break
		}
		stdout.Write(buf.Bytes())
	case "write":
		data := strings.Join(argv[2:], " ") + "\n"
		if err := e.WriteFile(ctx, id, arg(1), 0o644, strings.NewReader(data)); err != nil {
			return res, err
		}
	case "sleep":
		select {
		case <-time.After(time.Duration(num(1)) * time.Millisecond):
		case <-ctx.Done():
			res.ExitCode, res.Signal, res.TimedOut = 137, "SIGKILL", ctx.Err() == context.DeadlineExceeded
		}
	case "exit":
		res.ExitCode = num(1)
	case "stream":
		for i := range num(1) {
			if _, err := fmt.Fprintf(stdout, "line %d\n", i); err != nil {
				return res, err
			}
			select {
			case <-time.After(time.Duration(num(2)) * time.Millisecond):
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
	default:
		fmt.Fprintf(stderr, "%s: command not found\n", arg(0))
		res.ExitCode = 127
	}
	res.Receipt.WallNs = time.Since(start).Nanoseconds()
	res.Receipt.Platform = "test"
	return res, nil
}

func (e *Engine) parents(ws *workspace, p string) {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if _, ok := ws.files[d]; !ok {
			ws.files[d] = file{mode: fs.ModeDir | 0o755}
		}
	}
}

// WriteFile implements api.Engine.
func (e *Engine) WriteFile(ctx context.Context, id, p string, mode fs.FileMode, r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ws, err := e.workspace(id)
	if err != nil {
		return err
	}
	e.Mutations.Add(1)
	e.parents(ws, p)
	kind := "created"
	if _, ok := ws.files[p]; ok {
		kind = wire.Modified
	}
	ws.files[p] = file{mode: mode.Perm(), data: data}
	for _, ch := range ws.watchers {
		select {
		case ch <- wire.FileEvent{Kind: kind, Path: p, Type: "file", Size: int64(len(data)), Time: e.now()}:
		default: // a full watcher misses it, as a slow reader of the real engine would
		}
	}
	return nil
}

// ReadFile implements api.Engine.
func (e *Engine) ReadFile(ctx context.Context, id, p string, w io.Writer) (int64, error) {
	e.mu.Lock()
	ws, err := e.workspace(id)
	var f file
	var ok bool
	if err == nil {
		f, ok = ws.files[p]
	}
	e.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, notFound(p)
	}
	if !f.mode.IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file: %w", p, errclass.Invalid)
	}
	n, err := w.Write(f.data)
	return int64(n), err
}

// PutTar implements api.Engine: the archive is read whole and checked
// before anything changes.
func (e *Engine) PutTar(ctx context.Context, id, dir string, r io.Reader) error {
	tr := tar.NewReader(r)
	type entry struct {
		name string
		f    file
	}
	var entries []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("malformed tar: %v: %w", err, errclass.Invalid)
		}
		n := h.Name
		if strings.HasPrefix(n, "/") || slices.Contains(strings.Split(n, "/"), "..") {
			return fmt.Errorf("tar entry %q escapes: %w", n, errclass.Invalid)
		}
		f := file{mode: fs.FileMode(h.Mode).Perm()}
		switch h.Typeflag {
		case tar.TypeDir:
			f.mode |= fs.ModeDir
		case tar.TypeReg:
			if f.data, err = io.ReadAll(tr); err != nil {
				return err
			}
		case tar.TypeSymlink:
			f.mode |= fs.ModeSymlink
			f.link = h.Linkname
		default:
			return fmt.Errorf("tar entry %q has type %q: %w", n, h.Typeflag, errclass.Invalid)
		}
		entries = append(entries, entry{path.Join(dir, n), f})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	ws, err := e.workspace(id)
	if err != nil {
		return err
	}
	e.Mutations.Add(1)
	if dir != "." {
		e.parents(ws, dir+"/x")
		ws.files[dir] = file{mode: fs.ModeDir | 0o755}
	}
	for _, en := range entries {
		if en.name == "." {
			continue
		}
		e.parents(ws, en.name)
		ws.files[en.name] = en.f
	}
	return nil
}

// GetTar implements api.Engine with the engine's layout: entries under the
// path's base name ("." for the root).
func (e *Engine) GetTar(ctx context.Context, id, p string, w io.Writer) error {
	e.mu.Lock()
	ws, err := e.workspace(id)
	var files tree
	if err == nil {
		files = ws.files.clone()
	}
	e.mu.Unlock()
	if err != nil {
		return err
	}
	top := path.Base(p)
	var names []string
	if p == "." {
		names = append(names, ".")
	} else if _, ok := files[p]; ok {
		names = append(names, p)
	} else {
		return notFound(p)
	}
	for n := range files {
		if p == "." || strings.HasPrefix(n, p+"/") {
			names = append(names, n)
		}
	}
	slices.Sort(names[1:])
	tw := tar.NewWriter(w)
	for _, n := range names {
		f := files[n]
		if n == "." {
			f = file{mode: fs.ModeDir | 0o755}
		}
		name := top
		if n != p {
			name = path.Join(top, strings.TrimPrefix(n, p+"/"))
			if p == "." {
				name = n
			}
		}
		h := &tar.Header{Name: name, Mode: int64(f.mode.Perm()), ModTime: e.now()}
		switch {
		case f.mode.IsDir():
			h.Typeflag = tar.TypeDir
		case f.mode&fs.ModeSymlink != 0:
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// GC implements api.Engine.
func (e *Engine) GC(ctx context.Context, req wire.GCRequest) (wire.GCResult, error) {
	return wire.GCResult{DryRun: req.DryRun}, nil
}

// Fsck implements api.Engine.
func (e *Engine) Fsck(ctx context.Context) (wire.FsckReport, error) {
	return wire.FsckReport{OK: true}, nil
}

// Stats implements api.Engine.
func (e *Engine) Stats(ctx context.Context) (wire.StoreStats, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := int64(0)
	for _, p := range e.projects {
		n += int64(len(p.commits))
	}
	return wire.StoreStats{Objects: map[string]int64{"commit": n}}, nil
}

// WriteMetrics implements api.Engine.
func (e *Engine) WriteMetrics(w io.Writer) error {
	_, err := fmt.Fprintf(w, "# TYPE layerfs_test_execs_running gauge\nlayerfs_test_execs_running %d\n", e.Running.Load())
	return err
}

func (f file) info(p string, mtime time.Time) wire.FileInfo {
	fi := wire.FileInfo{Path: p, Type: "file", Size: int64(len(f.data)), Mode: uint32(f.mode.Perm()), ModTime: mtime}
	switch {
	case f.mode.IsDir():
		fi.Type, fi.Size = "dir", 0
	case f.mode&fs.ModeSymlink != 0:
		fi.Type, fi.Size, fi.Target = "symlink", int64(len(f.link)), f.link
	}
	return fi
}

// Stat implements api.Engine.
func (e *Engine) Stat(ctx context.Context, id, p string) (wire.FileInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ws, err := e.workspace(id)
	if err != nil {
		return wire.FileInfo{}, err
	}
	if p == "." {
		return file{mode: fs.ModeDir | 0o755}.info(".", e.now()), nil
	}
	f, ok := ws.files[p]
	if !ok {
		return wire.FileInfo{}, notFound(p)
	}
	return f.info(p, e.now()), nil
}

// List implements api.Engine: the paths below dir in segment order, which
// is the real engine's depth-first name order.
func (e *Engine) List(ctx context.Context, id, dir string, recursive bool, cursor string, limit int) (wire.DirPage, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ws, err := e.workspace(id)
	if err != nil {
		return wire.DirPage{}, err
	}
	if f, ok := ws.files[dir]; dir != "." && (!ok || !f.mode.IsDir()) {
		if !ok {
			return wire.DirPage{}, notFound(dir)
		}
		return wire.DirPage{}, fmt.Errorf("%s is not a directory: %w", dir, errclass.Invalid)
	}
	bySegments := func(a, b string) int { return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/")) }
	var names []string
	for n := range ws.files {
		rest, ok := strings.CutPrefix(n, dir+"/")
		if dir == "." {
			rest, ok = n, true
		}
		if ok && (recursive || !strings.Contains(rest, "/")) && (cursor == "" || bySegments(n, cursor) > 0) {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, bySegments)
	var page wire.DirPage
	for i, n := range names {
		if i == limit {
			page.Next = names[i-1]
			break
		}
		page.Entries = append(page.Entries, ws.files[n].info(n, e.now()))
	}
	return page, nil
}

// WatchWorkspace implements api.Engine: the double reports its own
// WriteFile calls (below prefix) and the end of the workspace.
func (e *Engine) WatchWorkspace(ctx context.Context, id, prefix string, emit func([]wire.FileEvent) error) error {
	e.mu.Lock()
	ws, err := e.workspace(id)
	if err != nil {
		e.mu.Unlock()
		return err
	}
	if f, ok := ws.files[prefix]; prefix != "." && (!ok || !f.mode.IsDir()) {
		e.mu.Unlock()
		if !ok {
			return notFound(prefix)
		}
		return fmt.Errorf("%s is not a directory: %w", prefix, errclass.Invalid)
	}
	ch := make(chan wire.FileEvent, 64)
	ws.watchers = append(ws.watchers, ch)
	ended := ws.ended
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		ws.watchers = slices.DeleteFunc(ws.watchers, func(c chan wire.FileEvent) bool { return c == ch })
		e.mu.Unlock()
	}()
	if err := emit([]wire.FileEvent{{Kind: wire.EventReady}}); err != nil {
		return err
	}
	for {
		select {
		case ev := <-ch:
			if prefix != "." && !strings.HasPrefix(ev.Path, prefix+"/") {
				continue
			}
			if err := emit([]wire.FileEvent{ev}); err != nil {
				return err
			}
		case <-ended:
			return emit([]wire.FileEvent{{Kind: wire.EventEnded}})
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
