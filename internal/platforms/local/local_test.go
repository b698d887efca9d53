package local_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/egress"
	"layerfs.dev/layerfs/internal/egress/egresstest"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/escapetest"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/platforms/platformtest"
	"layerfs.dev/layerfs/internal/testenv"
)

// The test binary is the sandbox init too.
func TestMain(m *testing.M) {
	if sandbox.InitMain() {
		return
	}
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	testenv.RequireRoot(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform { return local.New(local.Options{}) })
}

func TestConformanceCold(t *testing.T) {
	testenv.RequireRoot(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform { return local.New(local.Options{Warm: -1}) })
}

func TestConformanceWithoutCgroups(t *testing.T) {
	testenv.RequireRoot(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform { return local.New(local.Options{NoCgroups: true, Warm: 1}) })
}

func TestEscapes(t *testing.T) {
	testenv.RequireRoot(t)
	escapetest.Run(t, local.New(local.Options{}))
}

// TestFailClosed: the init binary in a directory only root may enter
// still gives sandboxes their user namespace, and where none can be made
// Up refuses rather than run them in the host's.
func TestFailClosed(t *testing.T) {
	escapetest.FailClosed(t, func(t *testing.T, dir string) platforms.Platform {
		self, err := os.Executable()
		require.NoError(t, err)
		exe := filepath.Join(dir, "layerfs-sandbox-init")
		require.NoError(t, copyExecutable(self, exe))
		return local.New(local.Options{Exe: exe})
	})
}

// copyExecutable copies the binary from to a new file to, mode 0755.
func copyExecutable(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// TestUserNamespace: by default a local sandbox's uid 0 is an unprivileged
// host uid, the identity and every result say which, and a platform asked
// for none says so too. A host where user namespaces cannot be made skips
// (and fails under LAYERFS_TEST_STRICT=1).
func TestUserNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	want := local.DefaultIDRange(nil).String()
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("off %v", off), func(t *testing.T) {
			ctx := t.Context()
			p := local.New(local.Options{NoUserNamespace: off, Warm: -1})
			require.NoError(t, p.Up(ctx))
			defer p.Down(ctx)
			id, err := p.Identity(ctx)
			require.NoError(t, err)
			_, details, _ := strings.Cut(id.Details, "user namespace: ")
			if !off && !strings.HasPrefix(details, fmt.Sprintf("uid_map %q", want)) {
				testenv.Skip(t, "no user namespace here: "+details)
			}
			if off && !strings.HasPrefix(details, "none") {
				t.Errorf("identity says %q with user namespaces off", details)
			}
			sb, err := p.Attach(ctx, platforms.Workspace{ID: "userns", HostPath: t.TempDir()})
			require.NoError(t, err)
			defer sb.Close(ctx)
			var out, errb bytes.Buffer
			res, err := sb.Exec(ctx, platforms.ExecSpec{Argv: []string{"cat", "/proc/self/uid_map"}}, &out, &errb)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exec: %v, exit %d, %s", err, res.ExitCode, errb.String())
			}
			got := strings.Join(strings.Fields(out.String()), " ")
			switch {
			case off && (got != "0 0 4294967295" || !strings.HasPrefix(res.UserNamespace, "none: ")):
				t.Errorf("off: uid_map %q, result %q", got, res.UserNamespace)
			case !off && (got != want || res.UserNamespace != want):
				t.Errorf("uid_map %q, result %q, want %q", got, res.UserNamespace, want)
			}
		})
	}
}

// TestEgress: the escape suite's egress cases on this host's sandboxes.
func TestEgress(t *testing.T) {
	egresstest.Require(t)
	escapetest.Egress(t, func(cfg egress.Config) platforms.Platform { return local.New(local.Options{Egress: cfg}) })
}
