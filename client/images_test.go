package client_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/enginetest"
	"layerfs.dev/layerfs/wire"
)

// TestImages: through the API, an image imported from a directory is a
// workspace's root, its root's changes a new image, and images are
// listed, inspected and removed.
func TestImages(t *testing.T) {
	ctx := t.Context()
	c := dial(t)
	p := project(t, c)
	name := "sdk/" + p + ":1"
	res, err := c.ImportImage(ctx, wire.ImageImport{Name: name, Kind: wire.ImageFromDir, Source: enginetest.MinimalRoot(t)})
	require.NoError(t, err)
	img, err := c.Image(ctx, name+"@"+res.Image.Digest)
	require.NoError(t, err)
	require.Equal(t, res.Image.Digest, img.Digest)

	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main", Image: name})
	require.NoError(t, err)
	require.Equal(t, name+"@"+img.Digest, ws.Info().Image)
	r, err := ws.Exec(ctx, "cat /etc/os-release && echo tool > /usr/tool", client.ExecOptions{})
	require.NoError(t, err)
	require.Equal(t, "ID=minimal\n", string(r.Stdout))
	require.Equal(t, ws.Info().Image, r.Receipt.Image)
	next, err := ws.CommitImage(ctx, "sdk/"+p+":2")
	require.NoError(t, err)
	require.Len(t, next.Image.Layers, 2)
	require.NoError(t, ws.End(ctx, client.EndOptions{Discard: true}))

	proj, err := c.SetProjectImage(ctx, p, "sdk/"+p+":2")
	require.NoError(t, err)
	require.Equal(t, "sdk/"+p+":2", proj.Image)
	ws2, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main"})
	require.NoError(t, err)
	r, err = ws2.Exec(ctx, "cat /usr/tool", client.ExecOptions{})
	require.NoError(t, err)
	require.Equal(t, "tool\n", string(r.Stdout))
	require.NoError(t, ws2.End(ctx, client.EndOptions{Discard: true}))

	imgs, err := c.Images(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(imgs), 2)
	require.NoError(t, c.RemoveImage(ctx, name))
	_, err = c.Image(ctx, name)
	require.Equal(t, wire.CodeNotFound, client.Code(err))
}
