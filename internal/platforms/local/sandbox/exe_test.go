package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/testenv"
)

func TestInitBinary(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	p := filepath.Join(filepath.Dir(exe), sandbox.InitBinaryName)
	if _, err := os.Stat(p); err == nil {
		t.Skipf("%s exists already", p)
	}
	if got := sandbox.InitBinary(); got != "" {
		t.Fatalf("no init binary: got %q", got)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Skipf("cannot write next to the test binary: %v", err)
	}
	defer os.Remove(p)
	if got := sandbox.InitBinary(); got != p {
		t.Errorf("got %q, want %q", got, p)
	}
	require.NoError(t, os.Chmod(p, 0o757))
	if got := sandbox.InitBinary(); got != "" {
		t.Errorf("world-writable init binary accepted: %q", got)
	}
}

// TestDedicatedInit builds cmd/layerfs-sandbox-init and runs an exec
// through it.
func TestDedicatedInit(t *testing.T) {
	testenv.RequireRoot(t)
	if testing.Short() {
		t.Skip("builds a binary")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain to build the init binary")
	}
	bin := filepath.Join(t.TempDir(), sandbox.InitBinaryName)
	build := exec.Command(gobin, "build", "-o", bin, "layerfs.dev/layerfs/cmd/layerfs-sandbox-init")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build: %s", out)
	l := sandbox.Launcher{Exe: bin}
	o := run(t, &l, shell(t.TempDir(), "echo via $(cat /proc/1/comm)"))
	if o.stdout != "via layerfs-sandbox\n" || o.res.ExitCode != 0 {
		t.Errorf("got %q (stderr %q), want the init to be the dedicated binary", o.stdout, o.stderr)
	}
}
