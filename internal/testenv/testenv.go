package testenv

import (
	"context"
	"go/build"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Strict reports whether skips for missing prerequisites must fail instead.
func Strict() bool { return os.Getenv("LAYERFS_TEST_STRICT") == "1" }

// Skip skips t with reason, or fails it when Strict.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if Strict() {
		t.Fatalf("LAYERFS_TEST_STRICT=1 and a prerequisite is missing: %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot skips unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root")
	}
}

// RequireFUSE skips unless the test runs as root and /dev/fuse can be opened.
func RequireFUSE(t testing.TB) {
	t.Helper()
	if why := MissingFUSE(); why != "" {
		Skip(t, why)
	}
}

// MissingFUSE says what RequireFUSE would skip for ("" when the process
// runs as root and can open /dev/fuse), for a TestMain that has no test to
// skip.
func MissingFUSE() string {
	if os.Geteuid() != 0 {
		return "needs root"
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return "needs /dev/fuse: " + err.Error()
	}
	f.Close()
	return ""
}

// DockerSocket is where the tests expect the Docker engine.
const DockerSocket = "/var/run/docker.sock"

// RequireDocker skips unless a Docker engine answers on DockerSocket.
// scripts/ensure-docker starts one; make test runs it first.
func RequireDocker(t testing.TB) {
	t.Helper()
	d := net.Dialer{Timeout: time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "unix", DockerSocket)
	if err != nil {
		Skip(t, "needs a Docker engine on "+DockerSocket+" (run scripts/ensure-docker): "+err.Error())
	}
	c.Close()
}

// SkipNotHere skips a test for a platform or tool that this machine kind is
// not expected to have (a VM hypervisor, macOS). Unlike Skip it never fails
// under LAYERFS_TEST_STRICT: CI is not expected to run these for real, and
// the docs say so.
func SkipNotHere(t testing.TB, reason string) {
	t.Helper()
	t.Skip("not runnable on this host: " + reason)
}

// GoTool is the go command to build test helpers with: the one on PATH,
// else the toolchain's that built the tests.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(build.Default.GOROOT, "bin", "go")
}
