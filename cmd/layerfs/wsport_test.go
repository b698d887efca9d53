package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
)

// TestWsPort: ws port forwards a local port to a server in the sandbox;
// a bad port is a usage error; a share is listed and revoked by ws
// unshare.
func TestWsPort(t *testing.T) {
	c := newCLI(t)
	c.ok("project", "create", "ports")
	var ws wire.Workspace
	c.json(&ws, "ws", "create", "ports", "main")
	src, err := os.ReadFile(filepath.Join("..", "..", "client", "testdata", "portserver.py"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws.MountPath, "server.py"), src, 0o644))

	srvCtx, stopServer := context.WithCancel(t.Context())
	served := make(chan int, 1)
	go func() {
		served <- run(srvCtx, []string{"--store", c.store, "ws", "exec", ws.ID, "--timeout", "5m", "--", "python3", "server.py", "8000"}, io.Discard, io.Discard)
	}()
	defer func() { stopServer(); <-served }()

	fwdCtx, stopFwd := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	forwarded := make(chan int, 1)
	go func() {
		forwarded <- run(fwdCtx, []string{"--store", c.store, "--json", "ws", "port", ws.ID, "8000"}, pw, io.Discard)
		pw.Close()
	}()
	var fwd forward
	require.NoError(t, json.NewDecoder(bufio.NewReader(pr)).Decode(&fwd))
	go io.Copy(io.Discard, pr)
	assert.Equal(t, 8000, fwd.Port)
	var body []byte
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + fwd.Listen + "/via-cli")
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			break
		}
		require.False(t, time.Now().After(deadline), "the forward never answered: %v", err)
	}
	assert.Contains(t, string(body), "path=/via-cli ")
	stopFwd()
	assert.Equal(t, 0, <-forwarded)

	c.fail(2, "a TCP port is 1 to 65535", "ws", "port", ws.ID, "0")
	c.fail(2, "a TCP port is 1 to 65535", "ws", "share", ws.ID, "http")

	var sh wire.PortShare
	c.json(&sh, "ws", "share", ws.ID, "8000")
	assert.Equal(t, "/share/"+sh.Token+"/", sh.Path)
	var list []wire.PortShare
	c.json(&list, "ws", "shares", ws.ID)
	require.Len(t, list, 1)
	assert.Equal(t, sh.Token, list[0].Token)
	c.ok("ws", "unshare", ws.ID, "8000")
	c.fail(3, "port 8000 of "+ws.ID+" is not shared", "ws", "unshare", ws.ID, "8000")
	stopServer()
	<-served
	served <- 0 // for the deferred wait
	c.ok("ws", "end", ws.ID, "--discard")
}
