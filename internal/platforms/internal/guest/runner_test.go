package guest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms/internal/guest"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
)

func TestExecRunnerPassesArgvAndReportsExit(t *testing.T) {
	log := guesttest.FakeBin(t, "FAKE_TOOL_LOG")
	// Spaces, quotes and a $ must reach the tool as they are: no shell in
	// between.
	script := "echo 'a b' \"$HOME\"; exit 3"
	res, err := guest.ExecRunner{}.Run(t.Context(), []string{"faketool", "shell", "--workdir", "/", "layerfs-demo", "sh", "-c", script}, nil)
	require.NoError(t, err)
	if res.ExitCode != 3 || string(res.Stdout) != "ran: shell --workdir / layerfs-demo sh -c "+script+"\n" || string(res.Stderr) != "to stderr\n" {
		t.Errorf("Run = exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	guesttest.WantLog(t, log, "shell\n--workdir\n/\nlayerfs-demo\nsh\n-c\n"+script+"\n--\n")
}

func TestExecRunnerEnvIsTheWholeEnvironment(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "envtool"), []byte("#!/bin/sh\necho \"[$GREETING] [$HOME]\"\n"), 0o755))
	t.Setenv("PATH", dir)
	t.Setenv("HOME", "/home/someone")
	res, err := guest.ExecRunner{Env: []string{"GREETING=hi"}}.Run(t.Context(), []string{"envtool"}, nil)
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "[hi] []\n" {
		t.Errorf("Run with Env = %q, exit %d, %v; want only GREETING set", res.Stdout, res.ExitCode, err)
	}
}

func TestExecRunnerMissingTool(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := guest.ExecRunner{}.Run(t.Context(), []string{"limactl", "--version"}, nil)
	require.ErrorIs(t, err, exec.ErrNotFound)
	_, err = guest.ExecRunner{}.Run(t.Context(), nil, nil)
	assert.Error(t, err, "Run accepted an empty command line")
}

func TestExecRunnerCanceled(t *testing.T) {
	dir := t.TempDir()
	slow := filepath.Join(dir, "limactl")
	require.NoError(t, os.WriteFile(slow, []byte("#!/bin/sh\nexec /bin/sleep 30\n"), 0o755))
	t.Setenv("PATH", dir)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := guest.ExecRunner{}.Run(ctx, []string{"limactl", "start", "x"}, nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Run took %s past a 200ms deadline", took)
	}
}
