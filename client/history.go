package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"layerfs.dev/layerfs/wire"
)

// Daemon reports the daemon's status.
func (c *Client) Daemon(ctx context.Context) (wire.DaemonStatus, error) {
	var st wire.DaemonStatus
	return st, c.get(ctx, "/v1/daemon", nil, &st)
}

// StopDaemon asks the daemon to shut down gracefully; it returns once the
// daemon has accepted the request, before it has exited.
func (c *Client) StopDaemon(ctx context.Context) error {
	return c.doJSON(ctx, http.MethodPost, "/v1/daemon/stop", nil, nil, nil)
}

// CreateProject creates a project, from a directory on the daemon's host
// when req.FromPath is set.
func (c *Client) CreateProject(ctx context.Context, req wire.CreateProject) (wire.Project, error) {
	var p wire.Project
	return p, c.doJSON(ctx, http.MethodPost, "/v1/projects", nil, req, &p)
}

// Projects lists the projects.
func (c *Client) Projects(ctx context.Context) ([]wire.Project, error) {
	var ps []wire.Project
	return ps, c.get(ctx, "/v1/projects", nil, &ps)
}

// Project describes one project.
func (c *Client) Project(ctx context.Context, name string) (wire.Project, error) {
	var p wire.Project
	return p, c.get(ctx, "/v1/projects/"+seg(name), nil, &p)
}

// Layers lists a project's layers, oldest first.
func (c *Client) Layers(ctx context.Context, project string) ([]wire.Layer, error) {
	var ls []wire.Layer
	return ls, c.get(ctx, "/v1/projects/"+seg(project)+"/layers", nil, &ls)
}

// AddLayer promotes a branch head to the project's next layer.
func (c *Client) AddLayer(ctx context.Context, project, branch string) (wire.Layer, error) {
	var l wire.Layer
	return l, c.doJSON(ctx, http.MethodPost, "/v1/projects/"+seg(project)+"/layers", nil, wire.AddLayer{Branch: branch}, &l)
}

// Branches lists a project's branches.
func (c *Client) Branches(ctx context.Context, project string) ([]wire.Branch, error) {
	var bs []wire.Branch
	return bs, c.get(ctx, "/v1/projects/"+seg(project)+"/branches", nil, &bs)
}

// Branch describes one branch.
func (c *Client) Branch(ctx context.Context, project, name string) (wire.Branch, error) {
	var b wire.Branch
	return b, c.get(ctx, "/v1/projects/"+seg(project)+"/branches/"+seg(name), nil, &b)
}

// ForkBranch creates branch name at from ("layer:N", a branch, or a commit id or prefix).
func (c *Client) ForkBranch(ctx context.Context, project, name, from string) (wire.Branch, error) {
	var b wire.Branch
	return b, c.doJSON(ctx, http.MethodPost, "/v1/projects/"+seg(project)+"/branches", nil, wire.ForkBranch{Name: name, From: from}, &b)
}

// DeleteBranch deletes a branch (its commits stay until GC finds them unreachable).
func (c *Client) DeleteBranch(ctx context.Context, project, name string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/projects/"+seg(project)+"/branches/"+seg(name), nil, nil, nil)
}

// Commit resolves a ref to its commit.
func (c *Client) Commit(ctx context.Context, project, ref string) (wire.Commit, error) {
	var cm wire.Commit
	return cm, c.get(ctx, "/v1/projects/"+seg(project)+"/commits/"+seg(ref), nil, &cm)
}

// Log lists up to limit commits reachable from ref through every parent,
// newest first (a commit before its ancestors); limit 0 asks for the
// daemon's default.
func (c *Client) Log(ctx context.Context, project, ref string, limit int) ([]wire.Commit, error) {
	return c.LogAfter(ctx, project, ref, "", limit)
}

// LogAfter is the page of Log that starts after the commit after (the ID
// of the last commit of the page before; "" for the first page).
func (c *Client) LogAfter(ctx context.Context, project, ref, after string, limit int) ([]wire.Commit, error) {
	q := url.Values{"ref": {ref}}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var cs []wire.Commit
	return cs, c.get(ctx, "/v1/projects/"+seg(project)+"/log", q, &cs)
}

// Merge merges the ref req.Source into the branch req.Into: the result is
// fast-forward, merged or up-to-date. A merge that conflicts publishes
// nothing and fails with an error of class errclass.Conflict (IsConflict);
// Conflicts(err) lists the paths.
func (c *Client) Merge(ctx context.Context, project string, req wire.MergeRequest) (wire.MergeResult, error) {
	var res wire.MergeResult
	return res, c.doJSON(ctx, http.MethodPost, "/v1/projects/"+seg(project)+"/merges", nil, req, &res)
}

// DiffOptions page through a diff.
type DiffOptions struct {
	Cursor string // DiffPage.Next of the previous page; "" for the first
	Limit  int    // changes per page; 0 for the daemon's default
}

// Diff returns one page of the changes from ref from to ref to.
func (c *Client) Diff(ctx context.Context, project, from, to string, opts DiffOptions) (wire.DiffPage, error) {
	q := url.Values{"from": {from}, "to": {to}}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var page wire.DiffPage
	return page, c.get(ctx, "/v1/projects/"+seg(project)+"/diff", q, &page)
}

// DiffAll returns every change from ref from to ref to, following pages.
func (c *Client) DiffAll(ctx context.Context, project, from, to string) ([]wire.Change, error) {
	var all []wire.Change
	opts := DiffOptions{}
	for {
		page, err := c.Diff(ctx, project, from, to, opts)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Changes...)
		if page.Next == "" {
			return all, nil
		}
		opts.Cursor = page.Next
	}
}

// CommitDir captures a directory on the daemon's host as branch's next commit.
func (c *Client) CommitDir(ctx context.Context, project, branch string, req wire.CommitDir) (wire.CommitResult, error) {
	var res wire.CommitResult
	return res, c.doJSON(ctx, http.MethodPost, "/v1/projects/"+seg(project)+"/branches/"+seg(branch)+"/commits", nil, req, &res)
}

// Checkout materializes req.Ref into req.Path, a directory on the daemon's
// host (empty or absent unless req.Overwrite).
func (c *Client) Checkout(ctx context.Context, project string, req wire.Checkout) (wire.CheckoutResult, error) {
	var res wire.CheckoutResult
	return res, c.doJSON(ctx, http.MethodPost, "/v1/projects/"+seg(project)+"/checkout", nil, req, &res)
}

// GC removes what no ref, workspace or retained commit reaches (with
// req.DryRun it only counts).
func (c *Client) GC(ctx context.Context, req wire.GCRequest) (wire.GCResult, error) {
	var res wire.GCResult
	return res, c.doJSON(ctx, http.MethodPost, "/v1/gc", nil, req, &res)
}

// Fsck checks the Store's integrity, its cache of contents included.
func (c *Client) Fsck(ctx context.Context) (wire.FsckReport, error) {
	return c.FsckWith(ctx, wire.FsckRequest{})
}

// FsckWith is Fsck with req: with req.Repair, the cache files found
// damaged are evicted (made again from the packs on next use).
func (c *Client) FsckWith(ctx context.Context, req wire.FsckRequest) (wire.FsckReport, error) {
	var rep wire.FsckReport
	return rep, c.doJSON(ctx, http.MethodPost, "/v1/fsck", nil, req, &rep)
}

// Stats reports the Store's size and deduplication.
func (c *Client) Stats(ctx context.Context) (wire.StoreStats, error) {
	var st wire.StoreStats
	return st, c.get(ctx, "/v1/stats", nil, &st)
}
