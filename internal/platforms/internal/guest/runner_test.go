package guest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/platforms/internal/guest"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
)

func TestExecRunnerPassesArgvAndReportsExit(t *testing.T) {
	log := guesttest.FakeBin(t, "FAKE_TOOL_LOG")
	// Spaces, quotes and a $ must reach the tool as they are: no shell in
	// between.
	script := "echo 'a b' \"$HOME\"; exit 3"
	res, err := guest.ExecRunner{}.Run(context.Background(), []string{"faketool", "shell", "--workdir", "/", "layerfs-demo", "sh", "-c", script}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "ran: shell --workdir / layerfs-demo sh -c "+script+"\n" || string(res.Stderr) != "to stderr\n" {
		t.Errorf("Run = exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	guesttest.WantLog(t, log, "shell\n--workdir\n/\nlayerfs-demo\nsh\n-c\n"+script+"\n--\n")
}

func TestExecRunnerEnvIsTheWholeEnvironment(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "envtool"), []byte("#!/bin/sh\necho \"[$GREETING] [$HOME]\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv("HOME", "/home/someone")
	res, err := guest.ExecRunner{Env: []string{"GREETING=hi"}}.Run(context.Background(), []string{"envtool"}, nil)
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "[hi] []\n" {
		t.Errorf("Run with Env = %q, exit %d, %v; want only GREETING set", res.Stdout, res.ExitCode, err)
	}
}

func TestExecRunnerMissingTool(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := guest.ExecRunner{}.Run(context.Background(), []string{"limactl", "--version"}, nil)
	if !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("got %v, want exec.ErrNotFound", err)
	}
	if _, err := (guest.ExecRunner{}).Run(context.Background(), nil, nil); err == nil {
		t.Error("Run accepted an empty command line")
	}
}

func TestExecRunnerCanceled(t *testing.T) {
	dir := t.TempDir()
	slow := filepath.Join(dir, "limactl")
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nexec /bin/sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := guest.ExecRunner{}.Run(ctx, []string{"limactl", "start", "x"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("got %v after %s, want DeadlineExceeded soon", err, time.Since(start))
	}
}
