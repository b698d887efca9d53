package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/internal/cells"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
	"layerfs.dev/layerfs/internal/testenv"
)

func TestMain(m *testing.M) {
	if sandbox.InitMain() {
		return
	}
	os.Exit(m.Run())
}

func localOnly(name string) (platforms.Platform, error) {
	if name != "local" {
		return nil, platforms.ErrUnavailable
	}
	return local.New(local.Options{}), nil
}

func TestCommandTime(t *testing.T) {
	d, err := commandTime([]byte("noise\n" + clockMark + " 1000 4000\n"))
	if err != nil || d != 3000 {
		t.Fatalf("got %v %v", d, err)
	}
	_, err = commandTime([]byte("no clock here"))
	require.Error(t, err, "missing readings must fail the sample")
}

// TestRunCells runs every twelve-cell with one sample on the local
// platform, as the README's main job does with five.
func TestRunCells(t *testing.T) {
	testenv.RequireFUSE(t)
	out := t.TempDir()
	res, err := Run(t.Context(), Config{
		Cells:       cells.Twelve(),
		Platforms:   []string{"local", "nowhere"},
		Samples:     1,
		OutDir:      out,
		NewPlatform: localOnly,
		ColdFiles:   500,
	})
	require.NoError(t, err)
	// The cold figure, beside the table: measured on local, both arms.
	require.Len(t, res.Cold, 1)
	cold := res.Cold[0]
	assert.Equal(t, "local", cold.Platform)
	assert.Empty(t, cold.NotRun)
	assert.Len(t, cold.LayerFS, 1)
	assert.Len(t, cold.Native, 1)
	// On the overlay path only a first read of a committed content reaches
	// the daemon (the metadata comes from an image, the data from the
	// Store's cache once materialized): the cells with a base read theirs
	// in the warm-up run, so their timed runs send the daemon nothing.
	based := map[string]bool{}
	for _, c := range cells.Twelve() {
		based[c.ID] = c.Base.Write != nil
	}
	for _, s := range res.Samples {
		if !s.Good() {
			t.Errorf("%s %s %s: %s", s.Cell, s.Platform, s.Arm, s.Reason())
		}
		if s.Arm == report.LayerFS && based[s.Cell] && s.TotalRequests() != 0 {
			t.Errorf("%s: %d FUSE requests, where the Store's cache should serve the base", s.Cell, s.TotalRequests())
		}
	}
	if len(res.Samples) != 24 {
		t.Fatalf("%d samples, want 24", len(res.Samples))
	}
	for _, f := range []string{report.SamplesFile, report.SummaryFile, report.TableMarkdownFile, report.ChartFile} {
		_, err := os.Stat(filepath.Join(out, f))
		assert.NoError(t, err, "output %s", f)
	}
	md, _ := os.ReadFile(filepath.Join(out, report.TableMarkdownFile))
	assert.Contains(t, string(md), "not run", "an unavailable platform must appear as not run")
	assert.Contains(t, string(md), "| cold first read ms |")
	assert.Contains(t, string(md), "Cold first read: every file of a committed 500-file tree")
	t.Logf("\n%s", md)
}

// TestRunCellsSharedStore runs two cells (one over a 64 MiB base) on the
// embedded Store and on a shared one (this test binary's PostgreSQL and
// S3 server) in one run: every sample of the four arms good, and the
// notes compare the two geometric means.
func TestRunCellsSharedStore(t *testing.T) {
	testenv.RequireFUSE(t)
	cs, err := cells.Select([]string{"C01", "C11"})
	require.NoError(t, err)
	out := t.TempDir()
	res, err := Run(t.Context(), Config{
		Cells:          cs,
		Samples:        1,
		OutDir:         out,
		NewPlatform:    localOnly,
		Stores:         []string{StoreEmbedded, StoreShared},
		SharedStoreURL: testenv.StoreURL(t),
		ColdFiles:      -1,
	})
	require.NoError(t, err)
	require.Len(t, res.Platforms, 2)
	assert.Equal(t, "local"+SharedSuffix, res.Platforms[1].Name)
	arms := map[string]int{}
	for _, s := range res.Samples {
		assert.True(t, s.Good(), "%s %s %s: %s", s.Cell, s.Platform, s.Arm, s.Reason())
		arms[s.Platform+" "+string(s.Arm)]++
	}
	assert.Equal(t, map[string]int{"local layerfs": 2, "local native": 2, "local+shared layerfs": 2, "local+shared native": 2}, arms)
	md, err := os.ReadFile(filepath.Join(out, report.TableMarkdownFile))
	require.NoError(t, err)
	assert.Contains(t, string(md), "local+shared against local, geometric mean: ")
	assert.NotContains(t, string(md), "not comparable")
	t.Logf("\n%s", md)
}

// TestRunSession runs every session and scale figure with few calls and a
// small tree, and checks that each one measured something.
func TestRunSession(t *testing.T) {
	testenv.RequireFUSE(t)
	figs, err := RunSession(t.Context(), SessionConfig{
		Platforms:   []string{"local", "nowhere"},
		Calls:       2,
		Idle:        2,
		LargeTree:   1_000,
		WorkDir:     t.TempDir(),
		NewPlatform: localOnly,
	})
	require.NoError(t, err)
	open, commit := largeFigs(1_000)
	want := map[string]bool{report.FigOpen: false, report.FigWarmExec: false, FigExecPython: false, FigCommitSmall: false,
		report.FigForkCreate: false, report.FigThroughput16: false, open: false, commit: false, report.FigIdleMemory(2): false, FigIdleMemoryHost(2): false, FigExecOverheadThink: false}
	notRun := 0
	for _, f := range figs {
		if f.Platform == "nowhere" {
			if f.NotRun == "" {
				t.Errorf("%s on an unavailable platform has no reason", f.Name)
			}
			notRun++
			continue
		}
		if len(f.Failures) > 0 || len(f.Values) == 0 {
			t.Errorf("%s: values %v, failures %v", f.Name, f.Values, f.Failures)
		}
		if _, ok := want[f.Name]; ok {
			want[f.Name] = true
		}
		if f.Name == report.FigIdleMemory(2) && len(f.Values) > 0 {
			// Each mount holds its request buffers: the live heap grows.
			assert.Positive(t, f.Values[0], "%s: a figure that can shrink measures something else", f.Name)
		}
	}
	for n, seen := range want {
		if !seen {
			t.Errorf("figure %q missing", n)
		}
	}
	if notRun == 0 {
		t.Error("the unavailable platform's figures are missing")
	}
}

// guestLike is a RemoteDaemon platform whose "guest" is a Daemon of this
// process over the local platform: the bench drives it as it drives a VM's
// daemon (a project per sample, bases held on the daemon's side), so that
// route runs where no VM boots.
type guestLike struct {
	local *local.Platform
	dir   string
	d     *Daemon
}

func (g *guestLike) Name() string { return "guest" }
func (g *guestLike) Features() platforms.Features {
	return platforms.Features{RemoteDaemon: true}
}

func (g *guestLike) Up(ctx context.Context) error {
	if err := g.local.Up(ctx); err != nil {
		return err
	}
	d, err := StartDaemon(ctx, g.dir, []platforms.Platform{g.local}, nil)
	g.d = d
	return err
}

func (g *guestLike) Down(ctx context.Context) error {
	if g.d != nil {
		g.d.Close(ctx)
		g.d = nil
	}
	return g.local.Down(ctx)
}

func (g *guestLike) Identity(ctx context.Context) (platforms.Identity, error) {
	id, err := g.local.Identity(ctx)
	id.Platform = g.Name()
	return id, err
}

func (g *guestLike) Endpoint(context.Context) (string, string, error) {
	if g.d == nil {
		return "", "", platforms.ErrNotUp
	}
	return g.d.Endpoint(), "", nil
}

// TestRunCellsOnAGuestDaemon runs a cell with a base and one without on a
// RemoteDaemon platform: every sample verifies, and the base crossed to
// the daemon once for the run (one base project there), not once per
// sample and arm. The daemon's directory is too deep for a socket.
func TestRunCellsOnAGuestDaemon(t *testing.T) {
	testenv.RequireFUSE(t)
	cs, err := cells.Select([]string{"C01", "C09"})
	require.NoError(t, err)
	// A daemon directory too deep for a unix socket (as a run's output
	// directory can be): the daemon puts its socket in a short one.
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	require.NoError(t, os.Mkdir(deep, 0o755))
	g := &guestLike{local: local.New(local.Options{}), dir: deep}
	var projects []string
	res, err := Run(t.Context(), Config{
		Cells: cs, Platforms: []string{"guest"}, Samples: 2, OutDir: t.TempDir(),
		NewPlatform: func(string) (platforms.Platform, error) { return g, nil },
		Progress: func(done, total int, _ string) {
			if done == total && g.d != nil { // before Down
				ps, err := g.d.Client.Projects(t.Context())
				assert.NoError(t, err)
				for _, p := range ps {
					projects = append(projects, p.Name)
				}
			}
		},
	})
	require.NoError(t, err)
	for _, s := range res.Samples {
		assert.True(t, s.Good(), "%s %s %s: %s", s.Cell, s.Platform, s.Arm, s.Reason())
	}
	require.Len(t, res.Samples, 8)
	var bases []string
	for _, p := range projects {
		if strings.HasPrefix(p, "base-") {
			bases = append(bases, p)
		}
	}
	assert.Len(t, bases, 1, "base projects on the daemon, want one for the run (all projects: %q)", projects)
}
