package mcpserver_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/daemontest"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestTypeScriptClient drives `layerfs mcp` over stdio with the official
// MCP TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// testdata/tsclient/package-lock.json and installed there by
// scripts/test-setup): initialize, list tools, create a workspace, write a
// file, exec cat of it, commit, fork, diff, bad input, a resource, end. The
// layerfs binary auto-starts its Store's daemon, as for a user.
func TestTypeScriptClient(t *testing.T) {
	testenv.RequireFUSE(t)
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "needs Node.js (node on PATH): "+err.Error())
	}
	dir, _ := filepath.Abs(filepath.Join("testdata", "tsclient"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		testenv.Skip(t, "needs the MCP TypeScript SDK in "+dir+"/node_modules (run scripts/test-setup)")
	}
	bin := daemontest.Binaries(t)
	layerfs := filepath.Join(bin, "layerfs")
	store := filepath.Join(t.TempDir(), "store")
	env := append(os.Environ(), "LAYERFS_DAEMON=", "LAYERFS_IDLE_EXIT=2m")
	t.Cleanup(func() {
		stop := exec.Command(layerfs, "--store", store, "daemon", "stop")
		stop.Env = env
		out, err := stop.CombinedOutput()
		assert.NoError(t, err, "daemon stop\n%s", out)
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(store, "layerfsd.log")); err == nil {
				t.Logf("daemon log:\n%s", b)
			}
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "session.mjs", layerfs, store)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("transcript (%s):\n%s", strings.TrimSpace(mustOutput(t, node, "--version")), stdout.String())
	require.NoError(t, err, "session.mjs\nstderr:\n%s", stderr.String())
	assert.Contains(t, stdout.String(), `{"step":"close"}`, "the session did not reach its end")
}

func mustOutput(t *testing.T, name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	require.NoError(t, err)
	return string(out)
}
