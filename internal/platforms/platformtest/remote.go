package platformtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// remoteEnv is a workspace in the guest's daemon, reached through the SDK.
type remoteEnv struct {
	ctx context.Context
	ws  *client.Workspace
}

func (e *remoteEnv) sh(t *testing.T, body string, o client.ExecOptions) *client.ExecResult {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = execTimeout
	}
	res, err := e.ws.Exec(e.ctx, body, o)
	if err != nil {
		t.Fatalf("exec %q: %v", body, err)
	}
	return res
}

// runRemoteExec makes through the API of the guest's daemon (p is up) the
// checks runHostMounts makes through SandboxHost: exit codes and signals,
// output, stdin, timeouts, files both ways, concurrency and the network
// being off.
func runRemoteExec(t *testing.T, p platforms.Platform) {
	ctx := ctxFor(t, upTimeout)
	addr, tok, err := p.(platforms.Remote).Endpoint(ctx)
	if err != nil {
		t.Fatalf("Endpoint: %v", err)
	}
	c, err := client.Dial(ctx, addr, client.WithToken(tok))
	if err != nil {
		t.Fatalf("dial the guest's daemon at %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	if tok != "" {
		if _, err := client.Dial(ctx, addr, client.WithToken("wrong-"+tok)); !client.IsUnauthorized(err) {
			t.Errorf("the guest's daemon at %s must refuse a wrong token: %v", addr, err)
		}
	}
	var b [4]byte
	rand.Read(b[:])
	project := "conformance-" + hex.EncodeToString(b[:])
	if _, err := c.CreateProject(ctx, wire.CreateProject{Name: project}); err != nil {
		t.Fatalf("create project: %v", err)
	}
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: project, Branch: "main"})
	if err != nil {
		t.Fatalf("create workspace: %v", err)
	}
	t.Cleanup(func() {
		if err := ws.End(context.Background(), client.EndOptions{Discard: true}); err != nil {
			t.Errorf("end workspace: %v", err)
		}
	})
	e := &remoteEnv{ctx: ctx, ws: ws}

	t.Run("Isolation", func(t *testing.T) {
		res, err := ws.ExecArgv(ctx, []string{"cat", "/proc/self/uid_map"}, client.ExecOptions{})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("cat /proc/self/uid_map: %v, exit %d", err, res.ExitCode)
		}
		checkIsolation(t, p, string(res.Stdout), res.Receipt.UserNamespace)
	})

	t.Run("Contract", func(t *testing.T) { testRemoteContract(t, ctx, ws) })
	t.Run("ExitCodes", func(t *testing.T) {
		for body, want := range map[string]int{"true": 0, "exit 3": 3, "kill -9 $$": 137, "false | true": 1} {
			if res := e.sh(t, body, client.ExecOptions{}); res.ExitCode != want {
				t.Errorf("%q: exit %d, want %d", body, res.ExitCode, want)
			}
		}
		res, err := ws.ExecArgv(ctx, []string{"printf", "%s|", "a b", "$HOME"}, client.ExecOptions{})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "a b|$HOME|" {
			t.Errorf("argv exec: %+v %v, want argv passed as given", res, err)
		}
	})
	t.Run("Output", func(t *testing.T) {
		res := e.sh(t, "echo out; echo err >&2", client.ExecOptions{})
		if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
			t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		var out bytes.Buffer
		e.sh(t, "for i in 1 2 3; do echo $i; done", client.ExecOptions{Stdout: &out})
		if out.String() != "1\n2\n3\n" {
			t.Errorf("streamed stdout %q", out.String())
		}
	})
	t.Run("Stdin", func(t *testing.T) {
		if res := e.sh(t, "tr a-z A-Z", client.ExecOptions{Stdin: []byte("shout\n")}); string(res.Stdout) != "SHOUT\n" {
			t.Errorf("stdin echoed as %q", res.Stdout)
		}
	})
	t.Run("Timeout", func(t *testing.T) {
		t0 := time.Now()
		res := e.sh(t, "sleep 100 & sleep 100; wait", client.ExecOptions{Timeout: time.Second})
		if !res.TimedOut || time.Since(t0) > time.Second+killSlack {
			t.Errorf("timed out %v after %v", res.TimedOut, time.Since(t0))
		}
		if res := e.sh(t, "pgrep -x sleep || true", client.ExecOptions{}); strings.TrimSpace(string(res.Stdout)) != "" {
			t.Errorf("a timed-out exec left processes: %q", res.Stdout)
		}
	})
	t.Run("Workspace", func(t *testing.T) {
		if err := ws.WriteFile(ctx, "from-host", []byte("hello\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if res := e.sh(t, "cat from-host && pwd && echo back > from-sandbox", client.ExecOptions{}); string(res.Stdout) != "hello\n/workspace\n" {
			t.Errorf("sandbox read %q", res.Stdout)
		}
		got, err := ws.ReadFile(ctx, "from-sandbox")
		if err != nil || string(got) != "back\n" {
			t.Errorf("read back %q %v", got, err)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				want := fmt.Sprintf("c%d", i)
				res, err := ws.Exec(ctx, "echo "+want+" > "+want+" && cat "+want, client.ExecOptions{Timeout: execTimeout})
				if err != nil || strings.TrimSpace(string(res.Stdout)) != want {
					t.Errorf("concurrent exec %d: %v %v", i, res, err)
				}
			}()
		}
		wg.Wait()
	})
	t.Run("NetworkOff", func(t *testing.T) {
		res := e.sh(t, "tail -n +3 /proc/net/dev | cut -d: -f1", client.ExecOptions{})
		if got := strings.Fields(string(res.Stdout)); len(got) != 1 || got[0] != "lo" {
			t.Errorf("interfaces %v, want only lo", got)
		}
	})
}

// testRemoteContract sends every BadRequest that the SDK can express to
// the guest's daemon: each is refused as invalid, naming its field, and
// nothing ran.
func testRemoteContract(t *testing.T, ctx context.Context, ws *client.Workspace) {
	for _, bad := range BadRequests() {
		r := bad.Req
		if len(r.Argv) > 0 && r.Body != "" {
			continue // the SDK sends one of the two
		}
		o := client.ExecOptions{Env: r.Env, Dir: r.Dir, OutputLimit: r.OutputLimit, MemoryBytes: r.MemoryBytes,
			Pids: r.Pids, MilliCPUs: r.MilliCPUs, OpenFiles: r.OpenFiles, UID: r.UID, GID: r.GID,
			Timeout: time.Duration(r.TimeoutMs) * time.Millisecond}
		var err error
		if r.Body != "" {
			_, err = ws.Exec(ctx, r.Body, o)
		} else {
			_, err = ws.ExecArgv(ctx, r.Argv, o)
		}
		switch {
		case !errors.Is(err, errclass.Invalid):
			t.Errorf("%s: %v, want errclass.Invalid", bad.Name, err)
		case !strings.Contains(err.Error(), bad.Field+":"):
			t.Errorf("%s: %v, want the error to name %s", bad.Name, err, bad.Field)
		}
	}
	if _, err := ws.ReadFile(ctx, ranMarker); !errors.Is(err, errclass.NotFound) {
		t.Errorf("a refused exec ran (%s in the workspace: %v)", ranMarker, err)
	}
}
