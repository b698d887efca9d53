package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"layerfs.dev/layerfs/internal/api"
	"layerfs.dev/layerfs/internal/daemontest"
	"layerfs.dev/layerfs/internal/enginetest"
	"layerfs.dev/layerfs/internal/testenv"
)

// The examples and tests talk to localEngine, the real engine on a Store in
// a temporary directory, served by the API over a unix socket at
// daemonAddr, as layerfsd serves it. Each test keeps to a project of its
// own.
var (
	localEngine *enginetest.Engine
	daemonAddr  string
)

func TestMain(m *testing.M) {
	if enginetest.InitMain() {
		return
	}
	os.Exit(serveAndRun(m))
}

// serveAndRun starts the engine and its API, runs the tests and stops
// both. Without root and /dev/fuse it runs nothing (an example cannot
// skip), and fails under LAYERFS_TEST_STRICT=1.
func serveAndRun(m *testing.M) int {
	if why := testenv.MissingFUSE(); why != "" {
		if testenv.Strict() {
			fmt.Fprintln(os.Stderr, "LAYERFS_TEST_STRICT=1 and a prerequisite is missing:", why)
			return 1
		}
		fmt.Println("the client's tests run against the real engine, which", why, "- skipped")
		return 0
	}
	dir, err := os.MkdirTemp("", "layerfs-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	if localEngine, err = enginetest.Start(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sock := filepath.Join(dir, "layerfsd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, errors.Join(err, localEngine.Close(ctx)))
		return 1
	}
	srv := &http.Server{Handler: api.NewServer(localEngine, api.Options{}).Handler(api.ListenerOptions{})}
	go srv.Serve(l)
	daemonAddr = "unix://" + sock
	code := m.Run()
	daemontest.RemoveBinaries()
	srv.Close()
	if err := localEngine.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	return code
}
