package mcpserver

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"layerfs.dev/layerfs/client"
)

// fileURIPrefix starts every file resource's URI:
// layerfs://workspaces/{id}/files/{+path}.
const fileURIPrefix = "layerfs://workspaces/"

// maxResourceBytes bounds a file read as a resource; read_file pages
// through larger ones.
const maxResourceBytes = 4 << 20

// FileURI is the resource URI of path in workspace id.
func FileURI(id, path string) string {
	return fileURIPrefix + id + "/files/" + (&url.URL{Path: path}).EscapedPath()
}

func (s *Server) addResources() {
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		Name:        "workspace-file",
		Title:       "A file or directory of a workspace",
		URITemplate: fileURIPrefix + "{id}/files/{+path}",
		Description: "A file of a workspace (text, or a blob when it is not UTF-8), or a directory's listing (one entry per line, directories ending in /). Files larger than 4 MiB are refused: use read_file.",
	}, s.readResource)
}

func (s *Server) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, path, ok := parseFileURI(uri)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	res, err := s.readWorkspacePath(ctx, c.Attach(id), uri, path)
	if err != nil {
		s.failed(c, err)
		if client.IsNotFound(err) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return nil, err
	}
	return res, nil
}

func (s *Server) readWorkspacePath(ctx context.Context, ws *client.Workspace, uri, path string) (*mcp.ReadResourceResult, error) {
	fi, err := ws.Stat(ctx, path)
	if err != nil {
		return nil, err
	}
	contents := &mcp.ResourceContents{URI: uri}
	switch {
	case fi.Type == "dir":
		entries, err := ws.ListAll(ctx, path, false)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		for _, e := range entries {
			b.WriteString(strings.TrimPrefix(e.Path, strings.TrimSuffix(path, "/")+"/"))
			if e.Type == "dir" {
				b.WriteString("/")
			}
			b.WriteString("\n")
		}
		contents.MIMEType, contents.Text = "text/plain", b.String()
	case fi.Type != "file":
		return nil, fmt.Errorf("invalid_argument: %s is a %s, not a file or directory", path, fi.Type)
	case fi.Size > maxResourceBytes:
		return nil, fmt.Errorf("too_large: %s has %d bytes, more than a resource carries (%d); use read_file with max_bytes", path, fi.Size, maxResourceBytes)
	default:
		data, err := ws.ReadFile(ctx, path)
		if err != nil {
			return nil, err
		}
		if utf8.Valid(data) {
			contents.MIMEType, contents.Text = "text/plain", string(data)
		} else {
			contents.MIMEType, contents.Blob = "application/octet-stream", data
		}
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{contents}}, nil
}

// parseFileURI splits layerfs://workspaces/ID/files/PATH; an empty PATH is
// the root.
func parseFileURI(uri string) (id, path string, ok bool) {
	rest, ok := strings.CutPrefix(uri, fileURIPrefix)
	if !ok {
		return "", "", false
	}
	id, escaped, ok := strings.Cut(rest, "/files/")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	path, err := url.PathUnescape(escaped)
	if err != nil {
		return "", "", false
	}
	if path == "" {
		path = "."
	}
	return id, path, true
}
