package mcpserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// Bounds on what one result carries into a model's context.
const (
	defaultReadBytes = 256 << 10
	maxReadBytes     = 4 << 20
	defaultListLimit = 200
	defaultDiffLimit = 500
	maxDiffLimit     = 10000
	defaultLogLimit  = 20
	maxLogLimit      = 200
)

// addTool registers a tool whose handler is given the daemon's client; an
// error becomes a tool result with isError set.
func addTool[In, Out any](s *Server, t *mcp.Tool, fn func(ctx context.Context, req *mcp.CallToolRequest, c *client.Client, in In) (Out, error)) {
	mcp.AddTool(s.mcp, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		s.reapWatches()
		c, err := s.client(ctx)
		if err != nil {
			return nil, zero, err
		}
		out, err := fn(ctx, req, c, in)
		if err != nil {
			s.failed(c, err)
			return nil, zero, err
		}
		return nil, out, nil
	})
}

func readOnly(title string) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, OpenWorldHint: new(false)}
}

func mutating(title string, destructive, idempotent bool) *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{Title: title, DestructiveHint: new(destructive), IdempotentHint: idempotent, OpenWorldHint: new(false)}
}

func (s *Server) addTools() error {
	addTool(s, &mcp.Tool{Name: "project_create", Annotations: mutating("Create a project", false, false),
		Description: "Create a project: a named history of commits with a first branch \"main\". It starts empty, or from a directory on the daemon's host (from_path). Create one project per code base, once; then open workspaces on it with workspace_create."},
		s.projectCreate)
	addTool(s, &mcp.Tool{Name: "project_list", Annotations: readOnly("List projects"),
		Description: "List the projects in the Store with their number of layers and branches."},
		s.projectList)
	addTool(s, &mcp.Tool{Name: "workspace_create", Annotations: mutating("Open a workspace", false, false),
		Description: "Open a workspace: a private copy-on-write directory over a branch's head (or over the commit `at` names), where exec runs commands and the file tools read and write. Returns its id, which every workspace tool takes as `workspace`. Commits from it go to `branch`. End it with workspace_end when done."},
		s.workspaceCreate)
	addTool(s, &mcp.Tool{Name: "workspace_list", Annotations: readOnly("List workspaces"),
		Description: "List the open workspaces with their project, branch, base and head commits."},
		s.workspaceList)
	addTool(s, &mcp.Tool{Name: "checkout", Annotations: mutating("Open a workspace at a ref", false, false),
		Description: "Open a workspace at any ref (\"layer:N\", a branch, or a commit id or prefix) to look at or run an old state. Commits from it go to `branch` (default: the ref itself when it is a branch, else \"main\"); when that branch has moved past the ref, commit answers head-moved, so to build on an old state fork a branch at it first and check that branch out."},
		s.checkout)
	addTool(s, &mcp.Tool{Name: "exec", Annotations: mutating("Run a command in a workspace", true, false),
		Description: "Run a command in a fresh sandbox whose /workspace (also its working directory) is the workspace. Give `command` (a bash command line, run with bash -o pipefail -c) or `argv` (no shell). Returns the exit code, stdout and stderr (each cut in the middle past " + strconv.Itoa(s.cfg.MaxOutput>>10) + " KiB, with *_truncated set), whether it timed out, and the receipt (wall and command time in ms, FUSE requests). A non-zero exit is a normal result, not an error. Files the command writes stay in the workspace for the next exec; nothing is committed until you call commit."},
		s.exec)
	addTool(s, &mcp.Tool{Name: "read_file", Annotations: readOnly("Read a file"),
		Description: "Read a file of a workspace. Text comes back as is (encoding \"utf-8\"), anything else as base64 (encoding \"base64\"). At most max_bytes are returned (truncated is set past it; size is the whole file's size)."},
		s.readFile)
	addTool(s, &mcp.Tool{Name: "write_file", Annotations: mutating("Write a file", true, true),
		Description: "Create or replace a file of a workspace with `content` (text, or base64 when encoding is \"base64\"), creating missing parent directories. The file is replaced whole and atomically."},
		s.writeFile)
	addTool(s, &mcp.Tool{Name: "list_dir", Annotations: readOnly("List a directory"),
		Description: "List the entries below a directory of a workspace (\".\" for the root) in name order: path, type (file, dir, symlink...), size. With recursive, the whole tree depth first. A page holds at most `limit` entries; pass `next` back as `cursor` for the following page."},
		s.listDir)
	addTool(s, &mcp.Tool{Name: "stat", Annotations: readOnly("Describe a path"),
		Description: "Describe one path of a workspace: type, size, permissions (octal), modification time, and a symlink's target (symlinks are never followed). Answers not_found when nothing is there."},
		s.stat)
	addTool(s, &mcp.Tool{Name: "diff", Annotations: readOnly("Show changes"),
		Description: "List changed paths (added, removed, modified, type-changed). With `workspace`: its uncommitted changes (what commit would record). With `project`, `from` and `to`: the changes between two refs."},
		s.diff)
	addTool(s, &mcp.Tool{Name: "commit", Annotations: mutating("Commit a workspace", false, false),
		Description: "Record the workspace's changes as a commit on its branch (compare-and-swap on the branch head). result is \"created\", \"up-to-date\" (nothing changed), or \"merged\": another commit reached the branch first, so your commit was merged with it (line by line where you changed different lines) and the merge published; the workspace now holds the merge, other agents' files included. When the merge conflicts (you and another commit changed the same lines, or one deleted what the other changed) nothing is published, the workspace keeps your changes, and the error lists the paths: call update with conflict_markers true, edit each listed file to replace the <<<<<<< ... ======= ... >>>>>>> blocks with what should stay, and commit again. With merge false, a moved head answers \"head-moved\" instead (your commit stored but not on the branch)."},
		s.commit)
	addTool(s, &mcp.Tool{Name: "update", Annotations: mutating("Bring a branch's new commits into a workspace", false, false),
		Description: "Bring the new commits of the workspace's branch (or of `ref`) into the workspace, keeping your uncommitted changes: other agents' work appears in your files, and your changes stay uncommitted on top. Refused (busy) while an exec runs in the workspace. When your changes conflict with theirs, the conflicted files get git-style markers (<<<<<<< workspace ... ======= ... >>>>>>> branch) and are listed as conflicts (also in status): edit each to keep what should stay and remove the markers (or call resolve for a file to keep as it is, such as a binary one where your version was kept); commit is refused until they are resolved. With conflict_markers false, a conflict changes nothing and the error lists the paths."},
		s.update)
	addTool(s, &mcp.Tool{Name: "resolve", Annotations: mutating("Mark conflicts resolved", false, true),
		Description: "Mark conflicts that update left in a workspace resolved, the files as they are now: `paths`, or all when empty. A text conflict is also resolved by removing its markers. Returns the conflicts left."},
		s.resolve)
	addTool(s, &mcp.Tool{Name: "merge", Annotations: mutating("Merge a branch into another", false, false),
		Description: "Merge a ref (`source`: a branch, \"layer:N\" or a commit) into the branch `into` of a project: result \"fast-forward\" (into had no commits of its own), \"merged\" (a merge commit with both as parents) or \"up-to-date\". With dry_run nothing is published. When they conflict nothing is published and the error lists the paths: to settle them, open a workspace on `into`, call update with ref set to `source` (conflict markers land in the files), fix the files, and commit; or merge again with prefer \"ours\" (into's side) or \"theirs\" (source's) to take one side of every conflict."},
		s.merge)
	addTool(s, &mcp.Tool{Name: "fork_workspace", Annotations: mutating("Fork a workspace", false, false),
		Description: "Open `count` new workspaces (default 1, at most 64) holding everything the workspace holds now, committed or not: to try several alternatives from one state in parallel. Each is a workspace of its own on the same branch; commit merges what they commit. Returns their ids."},
		s.forkWorkspace)
	addTool(s, &mcp.Tool{Name: "fork", Annotations: mutating("Fork a branch", false, false),
		Description: "Create branch `name` in a project at any ref (\"layer:N\", a branch, or a commit id or prefix). It costs nothing (no files are copied); use it to try an alternative, then open a workspace on the new branch."},
		s.fork)
	addTool(s, &mcp.Tool{Name: "log", Annotations: readOnly("Show history"),
		Description: "List the commits reachable from a ref of a project, newest first: id, message, author, time, and counts."},
		s.commitLog)
	addTool(s, &mcp.Tool{Name: "workspace_end", Annotations: mutating("End a workspace", true, false),
		Description: "End a workspace: unmount it and drop its private copy. Refuses (uncommitted_changes) when it holds changes not committed yet, unless discard is true. Committed work stays in the project's history."},
		s.workspaceEnd)
	addTool(s, &mcp.Tool{Name: "image_list", Annotations: readOnly("List images"),
		Description: "List the container images kept in the Store: name, digest, layers, and the Env, WorkingDir and User their workspaces' commands get. Pass a name (or name@digest) as `image` to workspace_create to make it every command's root: tools and libraries the host lacks are there, and the root is the workspace's own copy, so `apt-get install` or `pip install --break-system-packages` in exec (given network host) stays for the workspace's life."},
		s.imageList)
	addTool(s, &mcp.Tool{Name: "image_pull", Annotations: &mcp.ToolAnnotations{Title: "Pull an image", DestructiveHint: new(false), OpenWorldHint: new(true)},
		Description: "Store a registry's image (`ref`, such as registry.example.com/team/python:3.12) under `name` (default: ref). Only layers the Store lacks are fetched. Credentials are the daemon's (its Docker config and credential helpers). Then open workspaces on it with workspace_create's `image`."},
		s.imagePull)
	addTool(s, &mcp.Tool{Name: "image_commit", Annotations: mutating("Save a workspace's root as an image", false, false),
		Description: "Save what commands changed in a workspace's root (packages installed with apt-get or pip, files outside /workspace) as a new image `name`: its image with one more layer, as docker commit does. Workspaces opened on it start with those changes. The workspace must have been opened with an image; /workspace is not part of the image (commit it with commit)."},
		s.imageCommit)
	addTool(s, &mcp.Tool{Name: "workspace_network", Annotations: mutating("Change a workspace's network", false, true),
		Description: "Change a workspace's network, at once: `mode` none (no network), egress (commands reach only what `allow` lists: DOMAIN, *.DOMAIN or CIDR, each with :PORTS or every port; other names do not resolve and other addresses refuse at once) or host (the host's whole network). Running commands get the new rules too: their connections the rules deny are cut. Every decision is a `net` event of watch. Returns the workspace's network."},
		s.workspaceNetwork)
	s.addWatchTool()
	s.addServiceTools()
	return nil
}

// Inputs and outputs. Fields without omitempty are required by the schema.

type projectCreateIn struct {
	Name     string `json:"name" jsonschema:"the project name: 1-63 of a-z 0-9 . _ - starting with a letter or digit"`
	FromPath string `json:"from_path,omitempty" jsonschema:"an absolute directory on the daemon's host to import as the first layer (default: start empty)"`
}

type projectOut struct {
	Name     string `json:"name"`
	Layers   int    `json:"layers"`
	Branches int    `json:"branches"`
}

type projectListOut struct {
	Projects []projectOut `json:"projects"`
}

type workspaceCreateIn struct {
	Project  string   `json:"project" jsonschema:"the project to open"`
	Branch   string   `json:"branch,omitempty" jsonschema:"the branch to open and commit to (default main)"`
	At       string   `json:"at,omitempty" jsonschema:"a ref to open instead of the branch head (commits still go to branch)"`
	Platform string   `json:"platform,omitempty" jsonschema:"the sandbox platform, such as local or docker (default: the daemon's default)"`
	Network  string   `json:"network,omitempty" jsonschema:"none (default: no network in the sandbox), egress (only what allow allows) or host (the host's whole network)"`
	Allow    []string `json:"allow,omitempty" jsonschema:"with network egress: what commands may reach, each DOMAIN (pypi.org), *.DOMAIN (its subdomains) or CIDR (203.0.113.0/24), with :PORTS (443, or 8000-8100) or every port"`
	Image    string   `json:"image,omitempty" jsonschema:"an image (name or name@digest, see image_list) whose tree is every command's root, the workspace's own copy (default: the project's default image, else the host's runtime)"`
}

type workspaceOut struct {
	ID        string `json:"id" jsonschema:"the workspace id: pass it as workspace to the other tools"`
	Project   string `json:"project"`
	Branch    string `json:"branch" jsonschema:"the branch commits go to"`
	Base      string `json:"base" jsonschema:"the commit the workspace was opened at"`
	Head      string `json:"head" jsonschema:"the last commit made from it, or base"`
	Platform  string `json:"platform"`
	State     string `json:"state"`
	MountPath string `json:"mount_path" jsonschema:"where it is mounted on the daemon's host"`
	Image     string `json:"image,omitempty" jsonschema:"name@digest of the image its root is"`
}

type workspaceListOut struct {
	Workspaces []workspaceOut `json:"workspaces"`
}

type checkoutIn struct {
	Project string `json:"project"`
	Ref     string `json:"ref" jsonschema:"layer:N, a branch, or a commit id or unique prefix"`
	Branch  string `json:"branch,omitempty" jsonschema:"the branch commits go to (default: ref when it is a branch, else main)"`
}

type fileIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace id"`
	Path      string `json:"path" jsonschema:"relative to the workspace root, such as src/main.go"`
}

type readIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace id"`
	Path      string `json:"path" jsonschema:"relative to the workspace root"`
	MaxBytes  int    `json:"max_bytes,omitempty" jsonschema:"return at most this many bytes (default 262144, at most 4194304)"`
}

type readOut struct {
	Path      string `json:"path"`
	Size      int64  `json:"size" jsonschema:"the whole file's size in bytes"`
	Encoding  string `json:"encoding" jsonschema:"utf-8 or base64"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated" jsonschema:"true when only the first max_bytes are returned"`
}

type writeIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace id"`
	Path      string `json:"path" jsonschema:"relative to the workspace root"`
	Content   string `json:"content" jsonschema:"the whole new content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	Mode      string `json:"mode,omitempty" jsonschema:"octal permissions such as 0755 (default 0644)"`
}

type writeOut struct {
	Path string `json:"path"`
	Size int    `json:"size"`
}

type listIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace id"`
	Path      string `json:"path,omitempty" jsonschema:"a directory relative to the workspace root (default: the root)"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"list the whole tree below path"`
	Cursor    string `json:"cursor,omitempty" jsonschema:"next of the previous page"`
	Limit     int    `json:"limit,omitempty" jsonschema:"entries per page (default 200, at most 10000)"`
}

type entryOut struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Target string `json:"target,omitempty"`
}

type listOut struct {
	Entries []entryOut `json:"entries"`
	Next    string     `json:"next,omitempty" jsonschema:"pass as cursor for the next page; absent at the end"`
}

type statOut struct {
	Path    string `json:"path"`
	Type    string `json:"type" jsonschema:"file, dir, symlink, fifo, socket, char or block"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode" jsonschema:"octal permissions"`
	ModTime string `json:"mtime" jsonschema:"RFC 3339"`
	Target  string `json:"target,omitempty" jsonschema:"a symlink's target"`
}

type diffIn struct {
	Workspace string `json:"workspace,omitempty" jsonschema:"a workspace id: show its uncommitted changes"`
	Project   string `json:"project,omitempty" jsonschema:"with from and to: the project whose refs to compare"`
	From      string `json:"from,omitempty" jsonschema:"the older ref"`
	To        string `json:"to,omitempty" jsonschema:"the newer ref"`
	Limit     int    `json:"limit,omitempty" jsonschema:"at most this many changes (default 500)"`
}

type changeOut struct {
	Path    string `json:"path"`
	Kind    string `json:"kind" jsonschema:"added, removed, modified or type-changed"`
	OldType string `json:"old_type,omitempty"`
	NewType string `json:"new_type,omitempty"`
}

type diffOut struct {
	Changes   []changeOut `json:"changes"`
	Truncated bool        `json:"truncated" jsonschema:"true when there are more than limit changes"`
}

type commitIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace id"`
	Message   string `json:"message" jsonschema:"the commit message"`
	Author    string `json:"author,omitempty"`
	Merge     *bool  `json:"merge,omitempty" jsonschema:"when another commit reached the branch first, merge with it (default true); false answers head-moved instead"`
}

type commitOut struct {
	Result string  `json:"result" jsonschema:"created, up-to-date, merged or head-moved"`
	Commit string  `json:"commit" jsonschema:"the commit id (merged: the merge commit)"`
	Head   string  `json:"head" jsonschema:"the branch head after the call"`
	Own    string  `json:"own,omitempty" jsonschema:"merged: your commit, merged into the branch"`
	Note   string  `json:"note,omitempty"`
	WallMs float64 `json:"wall_ms"`
}

type conflictOut struct {
	Path    string `json:"path"`
	Kind    string `json:"kind" jsonschema:"content, binary, add/add, modify/delete, file/directory, type, symlink, metadata, rename/rename or rename/delete"`
	Markers bool   `json:"markers,omitempty" jsonschema:"the file holds conflict markers to edit away"`
	Moved   string `json:"moved,omitempty" jsonschema:"file/directory: where your file was moved"`
}

type updateIn struct {
	Workspace       string `json:"workspace" jsonschema:"the workspace id"`
	Ref             string `json:"ref,omitempty" jsonschema:"the branch or commit to bring in (default the workspace's branch)"`
	ConflictMarkers *bool  `json:"conflict_markers,omitempty" jsonschema:"on a conflict, write markers into the files and list them (default true); false changes nothing on a conflict"`
}

type updateOut struct {
	Result    string        `json:"result" jsonschema:"updated or up-to-date"`
	Head      string        `json:"head" jsonschema:"the commit the workspace now stands on"`
	Changed   int64         `json:"changed" jsonschema:"paths written into the workspace"`
	Conflicts []conflictOut `json:"conflicts" jsonschema:"conflicts to resolve before a commit"`
	Note      string        `json:"note,omitempty"`
}

type resolveIn struct {
	Workspace string   `json:"workspace" jsonschema:"the workspace id"`
	Paths     []string `json:"paths,omitempty" jsonschema:"the conflicted paths to mark resolved (default all)"`
}

type resolveOut struct {
	Conflicts []conflictOut `json:"conflicts" jsonschema:"the conflicts left"`
}

type mergeIn struct {
	Project string `json:"project"`
	Source  string `json:"source" jsonschema:"the branch, layer:N or commit to merge in"`
	Into    string `json:"into,omitempty" jsonschema:"the branch to merge into (default main)"`
	Message string `json:"message,omitempty"`
	DryRun  bool   `json:"dry_run,omitempty" jsonschema:"say what would happen, publish nothing"`
	Prefer  string `json:"prefer,omitempty" jsonschema:"settle every conflict by one side: ours (into's) or theirs (source's)"`
	// Renames as git finds them: by similarity, 50% by default.
	RenameThreshold int  `json:"rename_threshold,omitempty" jsonschema:"similarity in percent from which a removed and an added file are a rename (default 50, git's; 100: exact renames only)"`
	NoRenames       bool `json:"no_renames,omitempty" jsonschema:"find no renames: a renamed file is a delete and an add"`
}

type mergeOut struct {
	Result string `json:"result" jsonschema:"fast-forward, merged or up-to-date"`
	Commit string `json:"commit,omitempty"`
	Head   string `json:"head" jsonschema:"the branch head after the call"`
	DryRun bool   `json:"dry_run,omitempty"`
}

type forkWorkspaceIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace id"`
	Count     int    `json:"count,omitempty" jsonschema:"how many workspaces to open (default 1, at most 64)"`
}

type forkWorkspaceOut struct {
	Workspaces []string `json:"workspaces" jsonschema:"the new workspaces' ids"`
}

type forkIn struct {
	Project string `json:"project"`
	Name    string `json:"name" jsonschema:"the new branch: 1-63 of a-z 0-9 . _ - starting with a letter or digit"`
	From    string `json:"from" jsonschema:"layer:N, a branch, or a commit id or prefix"`
}

type branchOut struct {
	Project string `json:"project"`
	Name    string `json:"name"`
	Head    string `json:"head"`
}

type logIn struct {
	Project string `json:"project"`
	Ref     string `json:"ref,omitempty" jsonschema:"where to start (default main)"`
	Limit   int    `json:"limit,omitempty" jsonschema:"at most this many commits (default 20, at most 200)"`
}

type commitInfo struct {
	ID      string   `json:"id"`
	Parent  string   `json:"parent,omitempty"`
	Parents []string `json:"parents,omitempty" jsonschema:"every parent, the first first: two for a merge"`
	Message string   `json:"message"`
	Author  string   `json:"author"`
	Time    string   `json:"time"`
	Files   int64    `json:"files"`
	Bytes   int64    `json:"bytes"`
	Changed int64    `json:"changed"`
}

type logOut struct {
	Commits []commitInfo `json:"commits"`
}

type endIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace id"`
	Discard   bool   `json:"discard,omitempty" jsonschema:"drop uncommitted changes (default false: refuse when there are any)"`
}

type endOut struct {
	Ended     string `json:"ended"`
	Discarded bool   `json:"discarded"`
}

// Handlers.

func (s *Server) projectCreate(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in projectCreateIn) (projectOut, error) {
	p, err := c.CreateProject(ctx, wire.CreateProject{Name: in.Name, FromPath: in.FromPath})
	return projectOut{Name: p.Name, Layers: p.Layers, Branches: p.Branches}, err
}

func (s *Server) projectList(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, _ struct{}) (projectListOut, error) {
	ps, err := c.Projects(ctx)
	out := projectListOut{Projects: []projectOut{}}
	for _, p := range ps {
		out.Projects = append(out.Projects, projectOut{Name: p.Name, Layers: p.Layers, Branches: p.Branches})
	}
	return out, err
}

func showWorkspace(w wire.Workspace) workspaceOut {
	return workspaceOut{ID: w.ID, Project: w.Project, Branch: w.Branch, Base: w.Base, Head: w.Head,
		Platform: w.Platform, State: w.State, MountPath: w.MountPath, Image: w.Image}
}

func (s *Server) workspaceCreate(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in workspaceCreateIn) (workspaceOut, error) {
	if in.Branch == "" {
		in.Branch = "main"
	}
	rules, err := allowRules(in.Allow)
	if err != nil {
		return workspaceOut{}, err
	}
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: in.Project, Branch: in.Branch, At: in.At, Platform: in.Platform,
		Network: in.Network, Egress: rules, Image: in.Image})
	if err != nil {
		return workspaceOut{}, err
	}
	return showWorkspace(ws.Info()), nil
}

func (s *Server) workspaceList(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, _ struct{}) (workspaceListOut, error) {
	wss, err := c.Workspaces(ctx)
	out := workspaceListOut{Workspaces: []workspaceOut{}}
	for _, w := range wss {
		out.Workspaces = append(out.Workspaces, showWorkspace(w))
	}
	return out, err
}

func (s *Server) checkout(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in checkoutIn) (workspaceOut, error) {
	if in.Ref == "" {
		return workspaceOut{}, badInput("ref is required")
	}
	if in.Branch == "" {
		in.Branch = "main"
		if _, err := c.Branch(ctx, in.Project, in.Ref); err == nil {
			in.Branch = in.Ref
		}
	}
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: in.Project, Branch: in.Branch, At: in.Ref})
	if err != nil {
		return workspaceOut{}, err
	}
	return showWorkspace(ws.Info()), nil
}

// handle is a workspace by id, without a round trip: the daemon checks the
// id on the call that uses it.
func handle(_ context.Context, c *client.Client, id string) (*client.Workspace, error) {
	if id == "" {
		return nil, badInput("workspace is required: the id workspace_create returned")
	}
	return c.Attach(id), nil
}

func (s *Server) readFile(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in readIn) (readOut, error) {
	max, err := bounded("max_bytes", in.MaxBytes, defaultReadBytes, maxReadBytes)
	if err != nil {
		return readOut{}, err
	}
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return readOut{}, err
	}
	fi, err := ws.Stat(ctx, in.Path)
	if err != nil {
		return readOut{}, err
	}
	if fi.Type != "file" {
		return readOut{}, badInput("%s is a %s, not a file (list_dir lists directories)", in.Path, fi.Type)
	}
	data, truncated, err := readPrefix(ctx, ws, in.Path, max)
	if err != nil {
		return readOut{}, err
	}
	out := readOut{Path: fi.Path, Size: fi.Size, Truncated: truncated || fi.Size > int64(len(data))}
	out.Content, out.Encoding = encode(data)
	return out, nil
}

func (s *Server) writeFile(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in writeIn) (writeOut, error) {
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8", "utf8", "text":
	case "base64":
		b, err := base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return writeOut{}, badInput("content is not valid base64: %v", err)
		}
		data = b
	default:
		return writeOut{}, badInput("encoding %q: want utf-8 or base64", in.Encoding)
	}
	mode := uint64(0o644)
	if in.Mode != "" {
		m, err := strconv.ParseUint(in.Mode, 8, 32)
		if err != nil || m > 0o777 {
			return writeOut{}, badInput("mode %q: want octal permissions from 0 to 0777 such as 0644", in.Mode)
		}
		mode = m
	}
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return writeOut{}, err
	}
	if err := ws.WriteFile(ctx, in.Path, data, fsMode(mode)); err != nil {
		return writeOut{}, err
	}
	return writeOut{Path: in.Path, Size: len(data)}, nil
}

func (s *Server) listDir(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in listIn) (listOut, error) {
	limit, err := bounded("limit", in.Limit, defaultListLimit, wire.MaxListLimit)
	if err != nil {
		return listOut{}, err
	}
	if in.Path == "" {
		in.Path = "."
	}
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return listOut{}, err
	}
	page, err := ws.List(ctx, in.Path, client.ListOptions{Recursive: in.Recursive, Cursor: in.Cursor, Limit: limit})
	if err != nil {
		return listOut{}, err
	}
	out := listOut{Entries: []entryOut{}, Next: page.Next}
	for _, e := range page.Entries {
		out.Entries = append(out.Entries, entryOut{Path: e.Path, Type: e.Type, Size: e.Size, Target: e.Target})
	}
	return out, nil
}

func (s *Server) stat(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in fileIn) (statOut, error) {
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return statOut{}, err
	}
	fi, err := ws.Stat(ctx, in.Path)
	if err != nil {
		return statOut{}, err
	}
	return statOut{Path: fi.Path, Type: fi.Type, Size: fi.Size, Mode: fmt.Sprintf("%04o", fi.Mode),
		ModTime: fi.ModTime.Format(time.RFC3339Nano), Target: fi.Target}, nil
}

func (s *Server) diff(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in diffIn) (diffOut, error) {
	limit, err := bounded("limit", in.Limit, defaultDiffLimit, maxDiffLimit)
	if err != nil {
		return diffOut{}, err
	}
	var changes []wire.Change
	switch {
	case in.Workspace != "" && (in.Project != "" || in.From != "" || in.To != ""):
		return diffOut{}, badInput("give either workspace, or project with from and to, not both")
	case in.Workspace != "":
		ws, err := handle(ctx, c, in.Workspace)
		if err != nil {
			return diffOut{}, err
		}
		st, err := ws.Status(ctx)
		if err != nil {
			return diffOut{}, err
		}
		changes = st.Changes
	case in.Project == "" || in.From == "" || in.To == "":
		return diffOut{}, badInput("give workspace (its uncommitted changes), or project, from and to (two refs)")
	default:
		opts := client.DiffOptions{Limit: limit}
		for len(changes) <= limit {
			page, err := c.Diff(ctx, in.Project, in.From, in.To, opts)
			if err != nil {
				return diffOut{}, err
			}
			changes = append(changes, page.Changes...)
			if page.Next == "" {
				break
			}
			opts.Cursor = page.Next
		}
	}
	out := diffOut{Changes: []changeOut{}, Truncated: len(changes) > limit}
	for _, ch := range changes[:min(len(changes), limit)] {
		out.Changes = append(out.Changes, changeOut{Path: ch.Path, Kind: ch.Kind, OldType: ch.OldType, NewType: ch.NewType})
	}
	return out, nil
}

func (s *Server) commit(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in commitIn) (commitOut, error) {
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return commitOut{}, err
	}
	merge := in.Merge == nil || *in.Merge
	res, err := ws.CommitWith(ctx, wire.CommitRequest{Message: in.Message, Author: in.Author, Merge: merge})
	if err != nil {
		if client.IsConflict(err) {
			return commitOut{}, fmt.Errorf("%w\n%s\nNothing was published and the workspace keeps your changes. To settle it: call update with conflict_markers true, edit each listed file to remove the <<<<<<< ======= >>>>>>> blocks keeping what should stay, then commit again", err, conflictLines(client.Conflicts(err)))
		}
		return commitOut{}, err
	}
	out := commitOut{Result: res.Result, Commit: res.Commit, Head: res.Head}
	if r := res.Receipt; r != nil {
		out.WallMs = ms(r.WallNs)
	}
	switch res.Result {
	case wire.HeadMoved:
		out.Note = fmt.Sprintf("the branch moved on to %s: your changes are stored as commit %s, which is not on the branch; the workspace keeps them. Commit again with merge true to merge them in.", res.Head, res.Commit)
	case wire.Merged:
		if res.Merge != nil {
			out.Own = res.Merge.Own
		}
		out.Note = "another commit reached the branch first: yours was merged with it, and the workspace now holds the merge"
	}
	return out, nil
}

func conflictsOut(cs []wire.Conflict) []conflictOut {
	out := []conflictOut{}
	for _, c := range cs {
		out = append(out, conflictOut{Path: c.Path, Kind: c.Kind, Markers: c.Markers, Moved: c.Moved})
	}
	return out
}

// conflictLines lists conflicts one per line for an error a model reads.
func conflictLines(cs []wire.Conflict) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "conflict: %s (%s)\n", c.Path, c.Kind)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (s *Server) update(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in updateIn) (updateOut, error) {
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return updateOut{}, err
	}
	markers := in.ConflictMarkers == nil || *in.ConflictMarkers
	res, err := ws.Update(ctx, wire.UpdateRequest{Ref: in.Ref, ConflictMarkers: markers})
	if err != nil {
		if client.IsConflict(err) {
			return updateOut{}, fmt.Errorf("%w\n%s\nNothing changed in the workspace; update with conflict_markers true writes the conflicts into the files to edit", err, conflictLines(client.Conflicts(err)))
		}
		return updateOut{}, err
	}
	out := updateOut{Result: res.Result, Head: res.Head, Changed: res.Changed, Conflicts: conflictsOut(res.Conflicts)}
	if len(res.Conflicts) > 0 {
		out.Note = "edit each conflicted file to keep what should stay and remove the <<<<<<< ======= >>>>>>> markers (a conflict without markers kept your version: call resolve once it is right), then commit"
	}
	return out, nil
}

func (s *Server) resolve(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in resolveIn) (resolveOut, error) {
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return resolveOut{}, err
	}
	left, err := ws.Resolve(ctx, in.Paths...)
	return resolveOut{Conflicts: conflictsOut(left)}, err
}

func (s *Server) merge(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in mergeIn) (mergeOut, error) {
	if in.Into == "" {
		in.Into = "main"
	}
	res, err := c.Merge(ctx, in.Project, wire.MergeRequest{Source: in.Source, Into: in.Into, Message: in.Message, DryRun: in.DryRun, Prefer: in.Prefer,
		RenameThreshold: in.RenameThreshold, NoRenames: in.NoRenames})
	if err != nil {
		if client.IsConflict(err) {
			return mergeOut{}, fmt.Errorf("%w\n%s\nNothing was published. To settle it, open a workspace on %s, call update with ref %q (the conflicts land in its files with markers), fix them, and commit; or merge again with prefer ours or theirs", err, conflictLines(client.Conflicts(err)), in.Into, in.Source)
		}
		return mergeOut{}, err
	}
	return mergeOut{Result: res.Result, Commit: res.Commit, Head: res.Head, DryRun: res.DryRun}, nil
}

func (s *Server) forkWorkspace(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in forkWorkspaceIn) (forkWorkspaceOut, error) {
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return forkWorkspaceOut{}, err
	}
	if in.Count == 0 {
		in.Count = 1
	}
	forks, err := ws.Fork(ctx, in.Count)
	out := forkWorkspaceOut{Workspaces: []string{}}
	for _, f := range forks {
		out.Workspaces = append(out.Workspaces, f.ID())
	}
	return out, err
}

func (s *Server) fork(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in forkIn) (branchOut, error) {
	b, err := c.ForkBranch(ctx, in.Project, in.Name, in.From)
	return branchOut{Project: b.Project, Name: b.Name, Head: b.Head}, err
}

func (s *Server) commitLog(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in logIn) (logOut, error) {
	limit, err := bounded("limit", in.Limit, defaultLogLimit, maxLogLimit)
	if err != nil {
		return logOut{}, err
	}
	if in.Ref == "" {
		in.Ref = "main"
	}
	cs, err := c.Log(ctx, in.Project, in.Ref, limit)
	out := logOut{Commits: []commitInfo{}}
	for _, cm := range cs {
		out.Commits = append(out.Commits, commitInfo{ID: cm.ID, Parent: cm.Parent, Parents: cm.Parents, Message: cm.Message, Author: cm.Author,
			Time: cm.Time.Format(time.RFC3339), Files: cm.Stats.Files, Bytes: cm.Stats.Bytes, Changed: cm.Stats.Changed})
	}
	return out, err
}

func (s *Server) workspaceEnd(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in endIn) (endOut, error) {
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return endOut{}, err
	}
	if err := ws.End(ctx, client.EndOptions{Discard: in.Discard}); err != nil {
		if client.IsUncommitted(err) {
			return endOut{}, fmt.Errorf("%w (commit them first, or call workspace_end with discard: true to drop them)", err)
		}
		return endOut{}, err
	}
	return endOut{Ended: in.Workspace, Discarded: in.Discard}, nil
}

// bounded is an optional count argument: def when 0, refused outside 1..max.
func bounded(name string, v, def, max int) (int, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0 || v > max:
		return 0, badInput("%s must be from 1 to %d (got %d)", name, max, v)
	}
	return v, nil
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

type imageOut struct {
	Name       string   `json:"name"`
	Digest     string   `json:"digest" jsonschema:"the digest of its config: name@digest pins it"`
	Layers     int      `json:"layers"`
	Files      int64    `json:"files"`
	Bytes      int64    `json:"bytes"`
	Env        []string `json:"env,omitempty" jsonschema:"the environment its commands get"`
	WorkingDir string   `json:"working_dir,omitempty" jsonschema:"the working directory its commands get (default /workspace)"`
	User       string   `json:"user,omitempty" jsonschema:"the user its commands run as"`
}

func showImage(img wire.Image) imageOut {
	return imageOut{Name: img.Name, Digest: img.Digest, Layers: len(img.Layers), Files: img.Files, Bytes: img.Bytes,
		Env: img.Config.Env, WorkingDir: img.Config.WorkingDir, User: img.Config.User}
}

type imageListOut struct {
	Images []imageOut `json:"images"`
}

func (s *Server) imageList(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, _ struct{}) (imageListOut, error) {
	imgs, err := c.Images(ctx)
	out := imageListOut{Images: []imageOut{}}
	for _, img := range imgs {
		out.Images = append(out.Images, showImage(img))
	}
	return out, err
}

type imagePullIn struct {
	Ref  string `json:"ref" jsonschema:"the registry reference, such as registry.example.com/team/python:3.12"`
	Name string `json:"name,omitempty" jsonschema:"the name to store it as (default: ref)"`
}

func (s *Server) imagePull(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in imagePullIn) (imageOut, error) {
	if in.Ref == "" {
		return imageOut{}, badInput("ref is required")
	}
	res, err := c.PullImage(ctx, in.Ref, in.Name)
	if err != nil {
		return imageOut{}, err
	}
	return showImage(res.Image), nil
}

type imageCommitIn struct {
	Workspace string `json:"workspace" jsonschema:"the workspace id (opened with an image)"`
	Name      string `json:"name" jsonschema:"the new image's name, such as team/env:2"`
}

func (s *Server) imageCommit(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in imageCommitIn) (imageOut, error) {
	if in.Name == "" {
		return imageOut{}, badInput("name is required")
	}
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return imageOut{}, err
	}
	res, err := ws.CommitImage(ctx, in.Name)
	if err != nil {
		return imageOut{}, err
	}
	return showImage(res.Image), nil
}

type networkIn struct {
	Workspace string   `json:"workspace" jsonschema:"the workspace id"`
	Mode      string   `json:"mode" jsonschema:"none, egress or host"`
	Allow     []string `json:"allow,omitempty" jsonschema:"with mode egress: DOMAIN, *.DOMAIN or CIDR, each with :PORTS (443, or 8000-8100) or every port"`
}

type networkOut struct {
	Workspace string   `json:"workspace"`
	Network   string   `json:"network" jsonschema:"none, egress or host"`
	Allow     []string `json:"allow,omitempty" jsonschema:"what egress allows"`
}

func (s *Server) workspaceNetwork(ctx context.Context, _ *mcp.CallToolRequest, c *client.Client, in networkIn) (networkOut, error) {
	rules, err := allowRules(in.Allow)
	if err != nil {
		return networkOut{}, err
	}
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return networkOut{}, err
	}
	info, err := ws.SetNetwork(ctx, wire.NetworkChange{Mode: in.Mode, Egress: rules})
	if err != nil {
		return networkOut{}, err
	}
	out := networkOut{Workspace: info.ID, Network: info.Network}
	for _, r := range info.Egress {
		s := r.Domain + r.CIDR
		if len(r.Ports) > 0 {
			s += ":" + strings.Join(r.Ports, ",")
		}
		out.Allow = append(out.Allow, s)
	}
	return out, nil
}

// allowRules reads allow entries, TARGET[:PORTS]: a CIDR or address is a
// cidr rule, anything else a domain (the daemon checks both).
func allowRules(in []string) ([]wire.NetworkRule, error) {
	var out []wire.NetworkRule
	for _, a := range in {
		target, ports, _ := strings.Cut(a, ":")
		if target == "" {
			return nil, badInput("allow %q: want DOMAIN[:PORTS] or CIDR[:PORTS]", a)
		}
		r := wire.NetworkRule{Domain: target}
		if strings.Contains(target, "/") || net.ParseIP(target) != nil {
			r = wire.NetworkRule{CIDR: target}
		}
		if ports != "" {
			r.Ports = strings.Split(ports, ",")
		}
		out = append(out, r)
	}
	return out, nil
}
