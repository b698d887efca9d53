package python

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/daemontest"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestPythonSDK runs the SDK's pytest suite (tests/), whose fixture starts
// layerfsd on a fresh Store from the binaries built here; the fleet's tests
// are TestPythonSDKFleet's.
func TestPythonSDK(t *testing.T) {
	pytest(t, nil, "tests", "--ignore", fleetTests)
}

// fleetTests need a shared Store (PostgreSQL and S3).
const fleetTests = "tests/test_fleet.py"

// TestPythonSDKFleet runs the SDK's fleet tests: two daemons on a fresh
// shared Store of this test binary's PostgreSQL and S3 server.
func TestPythonSDKFleet(t *testing.T) {
	testenv.RequireFUSE(t)
	pytest(t, []string{"LAYERFS_TEST_STORE_URL=" + testenv.StoreURL(t)}, fleetTests)
}

// pytest runs pytest on args with env added, and fails t unless every test
// it ran passed.
func pytest(t *testing.T, env []string, args ...string) {
	testenv.RequireFUSE(t)
	python := pythonWithPytest()
	if python == "" {
		testenv.Skip(t, "needs python3 with pytest (Debian's python3-pytest; run scripts/test-setup)")
	}
	bin := daemontest.Binaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider"}, args...)...)
	cmd.Env = append(os.Environ(), "LAYERFS_TEST_BIN="+bin, "PYTHONDONTWRITEBYTECODE=1", "LAYERFS_DAEMON=")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	t.Logf("%s -m pytest %v:\n%s", python, args, out)
	require.NoError(t, err, "pytest failed")
	summary := regexp.MustCompile(`(\d+) passed`).FindSubmatch(out)
	if summary == nil || regexp.MustCompile(`\d+ (skipped|failed|error)`).Match(out) {
		t.Errorf("pytest did not pass every test (want only passes)")
	}
}

// pythonWithPytest is the first python3 that imports pytest: Debian's
// (/usr/bin), where python3-pytest installs, else the one on PATH.
func pythonWithPytest() string {
	candidates := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		if exec.Command(p, "-c", "import pytest").Run() == nil {
			return p
		}
	}
	return ""
}
