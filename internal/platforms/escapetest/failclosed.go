package escapetest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/testenv"
)

// scratchEnv tells a test binary that FailClosed re-executed it in a
// scratch user namespace.
const scratchEnv = "LAYERFS_ESCAPETEST_SCRATCH"

// FailClosed is the suite's part on boundaries that cannot be had, for a
// platform whose sandboxes get a user namespace of their own. It runs
// newPlatform twice, each time with a fresh directory dir of mode 0700
// (as a checkout under /root is) for it to install the platform's own
// binaries in:
//
//   - as the test runs: Up works, and a sandbox's uid map is the one the
//     platform's Isolation names, never the host's, though the namespace's
//     root may not enter dir;
//   - in a scratch user namespace where none can be made (scratchns:
//     user.max_user_namespaces=0): Up fails with platforms.ErrUnavailable
//     and a message that names the cause and --no-user-namespace, and no
//     sandbox runs in the host's user namespace instead.
//
// The second run re-executes the test binary with this test alone, so
// the test calling FailClosed must do nothing else before it.
func FailClosed(t *testing.T, newPlatform func(t *testing.T, dir string) platforms.Platform) {
	testenv.RequireRoot(t)
	if os.Getenv(scratchEnv) != "" {
		refusedInScratch(t, newPlatform(t, privateDir(t)))
		return
	}
	t.Run("binaries in a 0700 directory", func(t *testing.T) {
		ranInItsNamespace(t, newPlatform(t, privateDir(t)))
	})
	t.Run("no user namespace can be made", func(t *testing.T) {
		inScratch(t)
	})
}

// privateDir is a directory only root may enter.
func privateDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ranInItsNamespace brings p up and checks the uid map of one sandbox
// against p's Isolation.
func ranInItsNamespace(t *testing.T, p platforms.Platform) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := p.Up(ctx); err != nil {
		t.Fatalf("Up with its binaries in a 0700 directory: %v", err)
	}
	defer func() {
		if err := p.Down(context.Background()); err != nil {
			t.Errorf("Down: %v", err)
		}
	}()
	iso, err := p.(platforms.Isolator).Isolation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if iso.UserNamespace == "" {
		t.Fatalf("%s's isolation names no user namespace: %s", p.Name(), iso.NoUserNamespace)
	}
	sb, err := p.(platforms.SandboxHost).Attach(ctx, platforms.Workspace{ID: "failclosed", HostPath: t.TempDir()})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer func() {
		if err := sb.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	got := uidMap(t, ctx, sb)
	t.Logf("uid_map in a %s sandbox, its binaries in a 0700 directory: %q", p.Name(), got)
	if got != iso.UserNamespace {
		t.Errorf("uid_map %q, want the platform's %q", got, iso.UserNamespace)
	}
}

// inScratch runs this test again, alone, in a scratch user namespace where
// no user namespace can be made.
func inScratch(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	top, _, _ := strings.Cut(t.Name(), "/")
	cmd := exec.Command(ScratchNS(t), self, "-test.run=^"+regexp.QuoteMeta(top)+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), scratchEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("in a scratch user namespace (user.max_user_namespaces=0):\n%s", out.String())
	if err != nil {
		t.Fatalf("the test in the scratch namespace: %v", err)
	}
	if !strings.Contains(out.String(), "--- PASS: "+top) {
		t.Fatalf("the test did not pass in the scratch namespace")
	}
}

// refusedInScratch checks, in the scratch namespace, that p refuses to
// come up, and says why and what to do.
func refusedInScratch(t *testing.T, p platforms.Platform) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := p.Up(ctx)
	if err == nil {
		defer p.Down(context.Background())
		msg := "Up succeeded where no user namespace can be made"
		if sh, ok := p.(platforms.SandboxHost); ok {
			if sb, err := sh.Attach(ctx, platforms.Workspace{ID: "failclosed", HostPath: t.TempDir()}); err == nil {
				var out, errb bytes.Buffer
				_, err := sb.Exec(ctx, platforms.ExecSpec{Argv: []string{"cat", "/proc/self/uid_map"}, Timeout: time.Minute}, &out, &errb)
				msg += "; a sandbox's uid_map: " + strings.Join(strings.Fields(out.String()), " ")
				if err != nil {
					msg += " (exec: " + err.Error() + ")"
				}
				_ = sb.Close(context.Background())
			}
		}
		t.Fatal(msg)
	}
	t.Logf("%s refuses: %v", p.Name(), err)
	if !errors.Is(err, platforms.ErrUnavailable) {
		t.Errorf("Up's error is not platforms.ErrUnavailable: %v", err)
	}
	for _, want := range []string{"user namespace", "--no-user-namespace"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Up's error does not name %q: %v", want, err)
		}
	}
}

// ScratchNS builds scratchns, which runs a command in a scratch user
// namespace where no user namespace can be made, and returns its path.
func ScratchNS(t *testing.T) string { return buildTool(t, "scratchns") }
