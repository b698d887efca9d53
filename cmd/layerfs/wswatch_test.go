package main

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
)

// TestWsWatch: ws watch prints the changes an exec makes and exits when the
// workspace ends.
func TestWsWatch(t *testing.T) {
	p := newProc(t)
	p.ok("init")
	p.ok("project", "create", "demo")
	var ws wire.Workspace
	p.json(&ws, "ws", "create", "demo", "main")

	cmd := exec.Command(p.bin, "--store", p.store, "ws", "watch", ws.ID)
	cmd.Env = append(os.Environ(), "LAYERFS_DAEMON=")
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	if line, err := bufio.NewReader(stderr).ReadString('\n'); err != nil || line != "watching "+ws.ID+"\n" {
		t.Fatalf("ws watch stderr: %q %v", line, err)
	}
	// Lines arrive on a channel, so that a stream that stalls fails the
	// test (with the daemon's log) instead of hanging it.
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var got []string
	next := func() (string, bool) {
		select {
		case l, ok := <-lines:
			if ok {
				got = append(got, l)
			}
			return l, ok
		case <-time.After(time.Minute):
			t.Fatalf("no line from ws watch within a minute; so far %q", got)
		}
		return "", false
	}
	p.ok("ws", "exec", ws.ID, "-c", "mkdir -p logs && echo hi > logs/a.txt")
	// Created, then (in the same batch or a later one) its size.
	for !slices.Contains(got, "created\tlogs/a.txt\tfile\t3") && !slices.Contains(got, "modified\tlogs/a.txt\tfile\t3") {
		if _, ok := next(); !ok {
			t.Fatalf("ws watch ended early: %q", got)
		}
	}
	p.ok("ws", "end", ws.ID, "--discard")
	for {
		if _, ok := next(); !ok {
			break
		}
	}
	if got[len(got)-1] != "ended" {
		t.Errorf("last line %q, want ended (all: %q)", got[len(got)-1], got)
	}
	assert.NoError(t, cmd.Wait(), "ws watch")
}
