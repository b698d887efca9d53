package apitest

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
)

// storeChecks are those of Maintenance and MetricsWriter.
var storeChecks = []check{
	{"StatsCount", checkStatsCount},
	{"GCKeepsWhatIsReached", checkGCKeepsWhatIsReached},
	{"Fsck", checkFsck},
	{"Metrics", checkMetrics},
}

// checkStatsCount: the Store's counts grow with what is made.
func checkStatsCount(f *fixture) {
	before, err := f.eng.Stats(f.ctx)
	require.NoError(f.t, err)
	p := f.project()
	ws := f.workspace(p, "main")
	f.write(ws.ID, "data.bin", strings.Repeat("stats ", 1000))
	_, err = f.eng.CommitWorkspace(f.ctx, ws.ID, wire.CommitRequest{Message: "data"})
	require.NoError(f.t, err)
	after, err := f.eng.Stats(f.ctx)
	require.NoError(f.t, err)
	assert.Greater(f.t, after.Projects, before.Projects, "projects")
	assert.Greater(f.t, after.Branches, before.Branches, "branches")
	assert.Greater(f.t, after.Layers, before.Layers, "layers")
	assert.Greater(f.t, after.Objects["commit"], before.Objects["commit"], "commits")
	assert.Greater(f.t, after.LogicalBytes, before.LogicalBytes, "logical bytes")
}

// checkGCKeepsWhatIsReached: a dry run removes nothing; a GC keeps every
// commit a branch, a layer or a workspace reaches, whole.
func checkGCKeepsWhatIsReached(f *fixture) {
	p := f.project()
	ws := f.workspace(p, "main")
	f.write(ws.ID, "kept.txt", "kept by main")
	_, err := f.eng.CommitWorkspace(f.ctx, ws.ID, wire.CommitRequest{Message: "kept"})
	require.NoError(f.t, err)
	dry, err := f.eng.GC(f.ctx, wire.GCRequest{DryRun: true})
	require.NoError(f.t, err)
	assert.True(f.t, dry.DryRun, "a dry run says so")
	_, err = f.eng.GC(f.ctx, wire.GCRequest{})
	require.NoError(f.t, err)
	fresh := f.workspace(p, "main")
	assert.Equal(f.t, "kept by main", f.read(fresh.ID, "kept.txt"), "a file main reaches, after GC")
	assert.Equal(f.t, "kept by main", f.read(ws.ID, "kept.txt"), "the workspace's file, after GC")
}

// checkFsck: a Store used only through the engine has no problems, and a
// repair of it evicts nothing.
func checkFsck(f *fixture) {
	ws := f.workspace(f.project(), "main")
	f.write(ws.ID, "f", "fsck me")
	_, err := f.eng.CommitWorkspace(f.ctx, ws.ID, wire.CommitRequest{Message: "fsck"})
	require.NoError(f.t, err)
	rep, err := f.eng.Fsck(f.ctx, wire.FsckRequest{Repair: true})
	require.NoError(f.t, err)
	assert.True(f.t, rep.OK, "fsck: %+v", rep.Problems)
	assert.Empty(f.t, rep.Problems)
	assert.Zero(f.t, rep.Repaired, "a repair of a clean Store evicted cache files")
}

// checkMetrics: the metrics are Prometheus' text format, each sample of a
// declared family.
func checkMetrics(f *fixture) {
	var buf bytes.Buffer
	require.NoError(f.t, f.eng.WriteMetrics(&buf))
	families := map[string]bool{}
	samples := 0
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, kind, _ := strings.Cut(rest, " ")
			assert.Contains(f.t, []string{"counter", "gauge", "histogram", "summary", "untyped"}, kind, "%q", line)
			families[name] = true
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !assert.True(f.t, ok, "a sample without a value: %q", line) {
			continue
		}
		name, _, _ = strings.Cut(name, "{")
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		assert.True(f.t, families[name] || families[base], "a sample of no declared family: %q", line)
		_, err := strconv.ParseFloat(value, 64)
		assert.NoError(f.t, err, "the value of %q", line)
		samples++
	}
	assert.Positive(f.t, samples, "samples")
}
