package client_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/api/apitest"
	"layerfs.dev/layerfs/internal/daemontest"
)

// daemonAddr is an API server over a unix socket, as layerfsd serves it,
// on the engine double; the examples and tests talk to it.
var daemonAddr string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "layerfs-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sock := filepath.Join(dir, "layerfsd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: api.NewServer(apitest.New(), api.Options{}).Handler(api.ListenerOptions{})}
	go srv.Serve(l)
	daemonAddr = "unix://" + sock
	code := m.Run()
	daemontest.RemoveBinaries()
	srv.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}
