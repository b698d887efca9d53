package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/enginetest"
	"layerfs.dev/layerfs/wire"
)

// TestImageVerbs: through the CLI, an image imported from a directory, a
// workspace on it (ws status names it), a build on it, its root's changes
// committed as an image, a project's default, inspect, list and rm, with
// the exit code of bad input.
func TestImageVerbs(t *testing.T) {
	p := newProc(t)
	p.ok("init")
	var res wire.ImageResult
	p.json(&res, "image", "import", "team/base:1", enginetest.MinimalRoot(t))
	require.Equal(t, 1, res.Stats.LayersRead)
	p.ok("project", "create", "demo")
	var ws wire.Workspace
	p.json(&ws, "ws", "create", "demo", "main", "--image", "team/base:1")
	assert.Equal(t, "team/base:1@"+res.Image.Digest, ws.Image)
	assert.Contains(t, p.ok("ws", "status", ws.ID), "team/base:1@"+res.Image.Digest)
	p.ok("ws", "exec", ws.ID, "-c", "echo v > /etc/added")
	assert.Contains(t, p.ok("image", "commit", ws.ID, "team/base:2"), "committed team/base:2")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM team/base:2\nCOPY hello.txt /srv/\nRUN cat /etc/added /srv/hello.txt > /srv/both\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello\n"), 0o644))
	out := p.ok("image", "build", "team/app:1", "-f", filepath.Join(dir, "Dockerfile"), dir)
	assert.Contains(t, out, "built team/app:1")
	p.ok("image", "default", "demo", "team/app:1")
	var ws2 wire.Workspace
	p.json(&ws2, "ws", "create", "demo", "main")
	assert.Equal(t, "v\nhello\n", p.ok("ws", "exec", ws2.ID, "--", "cat", "/srv/both"))

	assert.Regexp(t, `layers +4\n`, p.ok("image", "inspect", "team/app:1"), "the base, the commit, COPY and RUN")
	assert.Contains(t, p.ok("image", "list"), "team/app:1")
	p.ok("image", "default", "demo", "--none")
	p.ok("image", "rm", "team/base:1")
	r := p.run("image", "inspect", "team/base:1")
	assert.Equal(t, 3, r.code, "not found: %+v", r)
	r = p.run("image", "build", "x", "-f", filepath.Join(dir, "Dockerfile"), "--build-arg", "nope", dir)
	assert.Equal(t, 2, r.code, "a bad build arg: %+v", r)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Bad"), []byte("FROM team/app:1\nVOLUME /data\n"), 0o644))
	r = p.run("image", "build", "x", "-f", filepath.Join(dir, "Bad"), dir)
	assert.Equal(t, 2, r.code, "%+v", r)
	assert.Contains(t, r.stderr, "line 2: VOLUME")
}
