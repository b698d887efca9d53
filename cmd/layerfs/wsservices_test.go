package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
)

// TestWsServices: ws run, services, logs, stop and wait, and their errors
// with the classes' exit codes.
func TestWsServices(t *testing.T) {
	p := newProc(t)
	p.ok("init")
	p.ok("project", "create", "demo")
	var ws wire.Workspace
	p.json(&ws, "ws", "create", "demo", "main")

	var sv wire.Service
	p.json(&sv, "ws", "run", ws.ID, "--name", "ticker", "-c", "echo tick; exec sleep 1000")
	assert.Equal(t, "ticker", sv.Name)
	assert.Greater(t, sv.Pid, 1)
	out := p.ok("ws", "exec", ws.ID, "--", "pgrep", "-cf", "sleep 1000")
	assert.Equal(t, "1\n", out, "an exec sees the service")

	out = p.ok("ws", "services", ws.ID)
	assert.Contains(t, out, "ticker")
	assert.Contains(t, out, "running")
	for i := 0; p.ok("ws", "logs", ws.ID, "ticker") != "tick\n"; i++ {
		require.Less(t, i, 100, "the service's log never showed its output")
		time.Sleep(20 * time.Millisecond)
	}

	// Errors: a taken name (exists: 4), a command that cannot start
	// (invalid: 2), an unknown service (not found: 3), bad usage (2).
	r := p.run("ws", "run", ws.ID, "--name", "ticker", "--", "sleep", "1")
	assert.Equal(t, 4, r.code, "%+v", r)
	r = p.run("ws", "run", ws.ID, "--", "no-such-command")
	assert.Equal(t, 2, r.code, "%+v", r)
	assert.Contains(t, r.stderr, "no-such-command")
	r = p.run("ws", "logs", ws.ID, "nope")
	assert.Equal(t, 3, r.code, "%+v", r)
	r = p.run("ws", "run", ws.ID)
	assert.Equal(t, 2, r.code, "%+v", r)

	p.json(&sv, "ws", "stop", ws.ID, "ticker", "--grace", "2s")
	assert.Equal(t, wire.ServiceStopped, sv.Reason)
	p.json(&sv, "ws", "run", ws.ID, "--name", "fails", "-c", "exit 7")
	r = p.run("ws", "wait", ws.ID, "fails")
	assert.Equal(t, 7, r.code, "ws wait passes the exit code on: %+v", r)
	// Following an ended service's log returns at once.
	require.Equal(t, "tick\n", p.ok("ws", "logs", ws.ID, "ticker", "-f"))
	p.ok("ws", "end", ws.ID, "--discard")
	assert.False(t, strings.Contains(p.ok("ws", "list"), ws.ID))
}
