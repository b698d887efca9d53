package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
)

// versionHandler answers GET /v1/version like layerfsd, wanting token when
// it is not "".
func versionHandler(token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/version" {
			http.NotFound(w, r)
			return
		}
		if got := r.Header.Get("Authorization"); token != "" && got != "Bearer "+token || token == "" && got != "" {
			http.Error(w, `{"error":{"code":"unauthorized","message":"missing or wrong token"}}`, http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(wire.Version{Version: "0.1.0-test", API: "v1"})
	})
}

// serveUnix serves h on a unix socket at path.
func serveUnix(t *testing.T, path string, h http.Handler) {
	t.Helper()
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

func TestUnixDaemonVersion(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "layerfsd.sock")
	serveUnix(t, sock, versionHandler(""))
	v, err := UnixDaemon(sock).Version(t.Context())
	if err != nil || v.Version != "0.1.0-test" || v.API != "v1" {
		t.Fatalf("Version = %+v, %v", v, err)
	}
}

func TestTCPDaemonSendsToken(t *testing.T) {
	srv := httptest.NewServer(versionHandler("s3cret"))
	defer srv.Close()
	if v, err := TCPDaemon(srv.URL, "s3cret").Version(t.Context()); err != nil || v.Version != "0.1.0-test" {
		t.Fatalf("Version with the token = %+v, %v", v, err)
	}
	_, err := TCPDaemon(srv.URL, "wrong").Version(t.Context())
	assert.ErrorIs(t, err, errNotAnswering, "Version with a wrong token")
	assert.ErrorContains(t, err, "401 Unauthorized", "Version with a wrong token: the status")
	assert.ErrorContains(t, err, "missing or wrong token", "Version with a wrong token: the body")
}

func TestDaemonVersionRejectsWhatIsNotAVersion(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "<html>a proxy page</html>")
	}))
	defer srv.Close()
	_, err := TCPDaemon(srv.URL, "").Version(t.Context())
	assert.ErrorContains(t, err, "decode", "Version of a non-JSON answer")
	assert.ErrorContains(t, err, "a proxy page", "Version of a non-JSON answer")
}

func TestWaitUntilDaemonAnswers(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "layerfsd.sock")
	srv := &http.Server{Handler: versionHandler("")}
	t.Cleanup(func() { _ = srv.Close() })
	go func() {
		time.Sleep(500 * time.Millisecond)
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Error(err)
			return
		}
		_ = srv.Serve(l)
	}()
	v, err := UnixDaemon(sock).Wait(t.Context(), 30*time.Second)
	if err != nil || v.Version != "0.1.0-test" {
		t.Fatalf("Wait = %+v, %v; want the daemon that came up late", v, err)
	}
}

func TestWaitIsBoundedAndReturnsTheLastError(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "absent.sock")
	start := time.Now()
	// 1.1 s: not a multiple of the 200 ms poll, so the deadline falls
	// between probes and the last error is a probe's own.
	_, err := UnixDaemon(sock).Wait(t.Context(), 1100*time.Millisecond)
	assert.ErrorContains(t, err, sock, "Wait on an absent socket: want the dial error naming the socket")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Wait took %s with a 1.1s timeout", d)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "store is being opened", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	_, err = TCPDaemon(srv.URL, "").Wait(t.Context(), 500*time.Millisecond)
	assert.ErrorIs(t, err, errNotAnswering, "Wait on a daemon answering 503")
	assert.ErrorContains(t, err, "503", "Wait on a daemon answering 503")
	assert.ErrorContains(t, err, "store is being opened", "Wait on a daemon answering 503")
}

func TestLogTail(t *testing.T) {
	var log strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&log, "line %d\n", i)
	}
	got := LogTail(Result{Stdout: []byte(log.String())}, nil)
	if lines := strings.Split(got, "\n"); len(lines) != 40 || lines[0] != "line 11" || lines[39] != "line 50" {
		t.Errorf("LogTail of 50 lines = %q, want lines 11 to 50", got)
	}
	assert.Equal(t, "(cannot read it: b\nc\ntail: cannot open '/var/log/layerfsd.log')",
		LogTail(Result{ExitCode: 1, Stderr: []byte("a\nb\nc\ntail: cannot open '/var/log/layerfsd.log'\n")}, nil), "LogTail of a failed tail")
	assert.Equal(t, "(cannot read it: limactl: context deadline exceeded)",
		LogTail(Result{}, errors.New("limactl: context deadline exceeded")), "LogTail of a tool that did not run")
}
