package client

import (
	"context"
	"net/http"
	"strings"

	"layerfs.dev/layerfs/wire"
)

// imagePath is the API path of an image (NAME or NAME@DIGEST), its
// slashes kept as separators.
func imagePath(ref string) string {
	parts := strings.Split(ref, "/")
	for i, p := range parts {
		parts[i] = seg(p)
	}
	return "/v1/images/" + strings.Join(parts, "/")
}

// Images lists the Store's images by name.
func (c *Client) Images(ctx context.Context) ([]wire.Image, error) {
	var out []wire.Image
	return out, c.get(ctx, "/v1/images", nil, &out)
}

// Image describes an image, NAME or NAME@DIGEST.
func (c *Client) Image(ctx context.Context, ref string) (wire.Image, error) {
	var out wire.Image
	return out, c.get(ctx, imagePath(ref), nil, &out)
}

// ImportImage stores the image at req.Source (of req.Kind: an OCI layout
// or an archive on the daemon's host, an image of its Docker engine, a
// registry's, a directory) as req.Name. Only the layers the Store lacks
// are read; a bad layer is refused whole.
func (c *Client) ImportImage(ctx context.Context, req wire.ImageImport) (wire.ImageResult, error) {
	var out wire.ImageResult
	return out, c.doJSON(ctx, http.MethodPost, "/v1/images", nil, req, &out)
}

// PullImage imports a registry's image ref as name ("" names it ref).
func (c *Client) PullImage(ctx context.Context, ref, name string) (wire.ImageResult, error) {
	if name == "" {
		name = ref
	}
	return c.ImportImage(ctx, wire.ImageImport{Name: name, Kind: wire.ImageFromRegistry, Source: ref})
}

// PushImage writes an image to a registry as req.Ref.
func (c *Client) PushImage(ctx context.Context, req wire.ImagePush) (wire.ImageResult, error) {
	var out wire.ImageResult
	return out, c.doJSON(ctx, http.MethodPost, "/v1/images/push", nil, req, &out)
}

// RemoveImage removes an image's name; GC collects what nothing else
// reaches, and workspaces on it keep their root.
func (c *Client) RemoveImage(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, imagePath(name), nil, nil, nil)
}

// SetProjectImage names the image a project's workspaces get when they
// name none ("" for none).
func (c *Client) SetProjectImage(ctx context.Context, project, image string) (wire.Project, error) {
	var out wire.Project
	return out, c.doJSON(ctx, http.MethodPut, "/v1/projects/"+seg(project)+"/image", nil, wire.ProjectImage{Image: image}, &out)
}

// CommitImage makes the changes the workspace's execs made to its root
// (it must stand on an image) a new layer on that image, named name.
func (ws *Workspace) CommitImage(ctx context.Context, name string) (wire.ImageResult, error) {
	var out wire.ImageResult
	return out, ws.doJSON(ctx, http.MethodPost, ws.path("/image"), nil, wire.ImageCommit{Name: name}, &out)
}

// BuildImage builds req.File (a Dockerfile's text) with the directory
// req.Context of the daemon's host into the image req.Name; each RUN runs
// in a sandbox on the image so far, and steps are cached by their inputs.
func (c *Client) BuildImage(ctx context.Context, req wire.ImageBuild) (wire.ImageResult, error) {
	var out wire.ImageResult
	return out, c.doJSON(ctx, http.MethodPost, "/v1/images/build", nil, req, &out)
}
