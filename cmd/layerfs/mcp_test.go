package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMCPUsage: the HTTP transport never runs without a token. (The stdio
// session runs end to end in mcpserver's TestTypeScriptClient.)
func TestMCPUsage(t *testing.T) {
	c := newCLI(t)
	c.fail(2, "--http needs --token-file", "mcp", "--http", "127.0.0.1:0")
	c.fail(2, "--token-file goes with --http", "mcp", "--token-file", "x")
	empty := filepath.Join(t.TempDir(), "token")
	os.WriteFile(empty, []byte("\n"), 0o600)
	c.fail(1, "want one non-empty token", "mcp", "--http", "127.0.0.1:0", "--token-file", empty)
}
