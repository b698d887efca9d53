package guesttest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// GuestDaemon returns a layerfsd for a Linux guest of this host's
// architecture: $LAYERFS_GUEST_DAEMON, or one built from cmd/layerfsd.
func GuestDaemon(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LAYERFS_GUEST_DAEMON"); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), "layerfsd")
	cmd := exec.Command("go", "build", "-o", out, "layerfs.dev/layerfs/cmd/layerfsd")
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build layerfsd for the guest (or set LAYERFS_GUEST_DAEMON): %v\n%s", err, b)
	}
	return out
}

// Project is a fresh project name for a conformance run, so that runs never
// share a VM.
func Project() string {
	var b [3]byte
	rand.Read(b[:])
	return "conformance-" + hex.EncodeToString(b[:])
}
