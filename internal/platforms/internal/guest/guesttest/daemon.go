package guesttest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/platformtest"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
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
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "build layerfsd for the guest (or set LAYERFS_GUEST_DAEMON)\n%s", b)
	return out
}

// Project is a fresh project name for a conformance run, so that runs never
// share a VM.
func Project() string {
	var b [3]byte
	rand.Read(b[:])
	return "conformance-" + hex.EncodeToString(b[:])
}

// Conformance runs the platform conformance suite (platformtest.Run) on
// platforms that newPlatform makes, each for a fresh project (Project) and
// given a layerfsd for the guest (GuestDaemon). Where tool is not on PATH
// it skips with testenv.SkipNotHere and why: only a machine with the
// platform's hypervisor runs it.
func Conformance[P platforms.Platform](t *testing.T, tool, why string, newPlatform func(t *testing.T, project, daemon string) (P, error)) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		testenv.SkipNotHere(t, why)
	}
	daemon := GuestDaemon(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform {
		p, err := newPlatform(t, Project(), daemon)
		require.NoError(t, err)
		return p
	})
}

// ServeVersion answers GET /v1/version with v on a listener at addr of
// network ("unix", "tcp") until the test ends, as the guest layerfsd does
// behind a platform's socket or port forward. With token not nil, a request
// must carry the bearer token it returns (asked at each request: the
// platform may write it after the server starts), or is refused as
// layerfsd refuses it.
func ServeVersion(t *testing.T, network, addr string, v wire.Version, token func() (string, error)) {
	t.Helper()
	l, err := net.Listen(network, addr)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != nil {
			tok, err := token()
			if err != nil || r.Header.Get("Authorization") != "Bearer "+tok {
				http.Error(w, `{"error":{"code":"unauthorized","message":"missing or wrong token"}}`, http.StatusUnauthorized)
				return
			}
		}
		if r.Method != http.MethodGet || r.URL.Path != "/v1/version" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(v)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// FakeDaemon writes a stand-in for the guest's layerfsd binary, for a
// replayed scenario to copy (it never runs), and returns its path.
func FakeDaemon(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "layerfsd")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/false\n"), 0o755))
	return path
}
