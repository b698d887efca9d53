package client

import (
	"context"
	"net/url"
	"strconv"

	"layerfs.dev/layerfs/wire"
)

// FileInfo describes one path of a workspace (type, size, mode, mtime, a
// symlink's target).
type FileInfo = wire.FileInfo

// Stat describes the path (a file, directory or symlink, never followed;
// "." for the root) in the workspace.
func (ws *Workspace) Stat(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	return fi, ws.get(ctx, ws.path("/stat"), url.Values{"path": {path}}, &fi)
}

// ListOptions configure List.
type ListOptions struct {
	Recursive bool   // the whole tree, depth first in name order
	Cursor    string // DirPage.Next of the previous page; "" for the first
	Limit     int    // entries per page; 0 for the daemon's default (wire.DefaultListLimit)
}

// List returns one page of the entries below the directory path ("." for
// the root), in name order.
func (ws *Workspace) List(ctx context.Context, path string, opts ListOptions) (wire.DirPage, error) {
	q := url.Values{"path": {path}}
	if opts.Recursive {
		q.Set("recursive", "true")
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var page wire.DirPage
	return page, ws.get(ctx, ws.path("/list"), q, &page)
}

// ListAll returns every entry below the directory path, following pages.
func (ws *Workspace) ListAll(ctx context.Context, path string, recursive bool) ([]FileInfo, error) {
	var all []FileInfo
	opts := ListOptions{Recursive: recursive}
	for {
		page, err := ws.List(ctx, path, opts)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Entries...)
		if page.Next == "" {
			return all, nil
		}
		opts.Cursor = page.Next
	}
}
