package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/platforms/escapetest"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// privateInstall builds layerfsd and the sandbox init into a directory
// only root may enter, as a checkout under /root has them, and returns the
// daemon's path.
func privateInstall(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "bin")
	require.NoError(t, os.Mkdir(dir, 0o700))
	bin := filepath.Join(dir, "layerfsd")
	b, err := os.ReadFile(daemonBinary(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	out, err := exec.Command(testenv.GoTool(), "build", "-o", filepath.Join(dir, sandbox.InitBinaryName), "../layerfs-sandbox-init").CombinedOutput()
	require.NoError(t, err, "build the sandbox init: %s", out)
	return bin
}

// TestIsolation: a daemon installed where the sandboxes' root may not go
// gives them their user namespace, says so in its status, and holds each
// receipt to it; with --no-user-namespace it says that instead.
func TestIsolation(t *testing.T) {
	bin := privateInstall(t)
	for _, off := range []bool{false, true} {
		t.Run(map[bool]string{false: "user namespace", true: "no user namespace"}[off], func(t *testing.T) {
			var extra []string
			if off {
				extra = append(extra, "--no-user-namespace")
			}
			d := startDaemonBinary(t, bin, "", extra...)
			ctx := t.Context()
			c := d.client(t)
			st, err := c.Daemon(ctx)
			require.NoError(t, err)
			require.Len(t, st.Isolation, 1, "isolation %+v", st.Isolation)
			iso := st.Isolation[0]
			t.Logf("isolation: %+v", iso)
			_, err = c.CreateProject(ctx, wire.CreateProject{Name: "p"})
			require.NoError(t, err)
			ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
			require.NoError(t, err)
			res, err := ws.ExecArgv(ctx, []string{"cat", "/proc/self/uid_map"}, client.ExecOptions{})
			require.NoError(t, err)
			uidMap := strings.Join(strings.Fields(string(res.Stdout)), " ")
			t.Logf("uid_map %q, receipt %q", uidMap, res.Receipt.UserNamespace)
			switch {
			case !off && (iso.UserNamespace != "0 2000000000 65536" || uidMap != iso.UserNamespace || res.Receipt.UserNamespace != iso.UserNamespace):
				t.Errorf("uid_map %q, receipt %q, isolation %q: want the isolation's range in all three", uidMap, res.Receipt.UserNamespace, iso.UserNamespace)
			case off && (iso.UserNamespace != "" || !strings.Contains(iso.NoUserNamespace, "--no-user-namespace") ||
				uidMap != "0 0 4294967295" || !strings.Contains(res.Receipt.UserNamespace, "--no-user-namespace")):
				t.Errorf("off: uid_map %q, receipt %q, isolation %+v", uidMap, res.Receipt.UserNamespace, iso)
			}
			if iso.Seccomp == "" || iso.Network == "" || iso.Limits.Memory == "" || iso.Boundary == "" {
				t.Errorf("isolation leaves something unsaid: %+v", iso)
			}
		})
	}
}

// TestRefusesWithoutUserNamespace: a daemon on a host where no user
// namespace can be made (a scratch one with user.max_user_namespaces=0)
// does not start, and says why and what to do.
func TestRefusesWithoutUserNamespace(t *testing.T) {
	testenv.RequireFUSE(t)
	bin := privateInstall(t)
	cmd := exec.Command(escapetest.ScratchNS(t), bin, "serve", "--store", filepath.Join(t.TempDir(), "store"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Logf("layerfsd said:\n%s", out.String())
		if err == nil {
			t.Fatalf("layerfsd exited 0")
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatalf("layerfsd still runs where no user namespace can be made:\n%s", out.String())
	}
	last := lastLine(out.String())
	for _, want := range []string{"platform local", "user namespace", "user.max_user_namespaces", "--no-user-namespace"} {
		if !strings.Contains(last, want) {
			t.Errorf("its last words do not name %q: %s", want, last)
		}
	}
}

// lastLine is s's last non-empty line.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
