package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func sample(cell, plat string, arm Arm, i int, cmdMS float64) Sample {
	d := time.Duration(math.Round(cmdMS * float64(time.Millisecond)))
	s := Sample{
		Cell: cell, Platform: plat, Arm: arm, Index: i, Status: OK, Verified: true,
		Start:    time.Date(2026, 11, 30, 12, 0, i, 0, time.UTC),
		Command:  d,
		ExecWall: d + 4*time.Millisecond,
		Overhead: 4 * time.Millisecond,
	}
	if arm == LayerFS {
		s.Overhead = 5 * time.Millisecond
		s.ExecWall = d + s.Overhead
		s.Mount = 6 * time.Millisecond
		s.Unmount = 2 * time.Millisecond
		s.Commit = time.Duration(10+i) * time.Millisecond
		s.Requests = map[string]int64{"LOOKUP": 1000, "CREATE": 1000, "WRITE": int64(1000 + i)}
		s.DaemonTime = time.Duration(3000*5) * time.Microsecond // 5 µs per request
		s.SQLMount = SQLStats{Statements: 3}
		s.SQLCommit = SQLStats{Statements: 40, Transactions: 1, RowsWritten: 1003, BytesWritten: 64 << 10}
		s.OverlayBytes = 4096 * 1000
		s.StoreBytes = 3 << 20
	}
	return s
}

// fixture is a run with every kind of outcome: clean cells, an even and an
// odd number of samples, a failed sample, a cell where LayerFS always
// failed, an ineligible cell, an extended cell, and a platform that did
// not run.
func fixture(platformsToo bool) Results {
	r := Results{
		Machine: "2 vCPU, 24 GiB, Debian 12, ext4 (no journal)",
		Command: "layerfs cells run --samples 5",
		Date:    time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Platforms: []Platform{{Name: "local", Identity: &platforms.Identity{
			Platform: "local", Kernel: "6.18.44", CPUs: 2, MemoryBytes: 24 << 30, Runtime: "namespaces",
		}}},
		Cells: []Cell{
			{ID: "C01", Title: "create 1,000 files"},
			{ID: "C02", Title: "create 1,000, stat 1,000"},
			{ID: "C03", Title: "create 1,000, remove them"},
			{ID: "C12", Title: "git init, 100 files, add, commit"},
			{ID: "X06", Title: "edit, then go build", Group: "extended"},
		},
	}
	if platformsToo {
		r.Platforms = append(r.Platforms,
			Platform{Name: "docker", Identity: &platforms.Identity{Platform: "docker", Kernel: "6.18.44", CPUs: 2, MemoryBytes: 24 << 30, Runtime: "docker 28.5.2"}},
			Platform{Name: "lima", NotRun: "limactl not found"},
		)
	}
	add := func(s Sample) { r.Samples = append(r.Samples, s) }
	for _, plat := range []string{"local", "docker"} {
		if plat == "docker" && !platformsToo {
			continue
		}
		k := 1.0
		if plat == "docker" {
			k = 1.5
		}
		// C01: five clean samples each.
		for i, ms := range []float64{30, 32, 29, 31, 35} {
			add(sample("C01", plat, Native, i, ms))
			add(sample("C01", plat, LayerFS, i, k*ms*1.2))
		}
		// C02: four samples (even count); one LayerFS sample failed its verifier.
		for i, ms := range []float64{1000, 1010, 990, 1020} {
			add(sample("C02", plat, Native, i, ms))
			s := sample("C02", plat, LayerFS, i, k*(ms+100))
			if i == 2 {
				s.Status, s.Verified, s.VerifyError = Failed, false, "f17: missing"
			}
			add(s)
		}
		// C03: every LayerFS sample fails.
		for i, ms := range []float64{500, 510, 505} {
			add(sample("C03", plat, Native, i, ms))
			s := sample("C03", plat, LayerFS, i, 0)
			s.Status, s.Error = Failed, "exec: sandbox did not start"
			add(s)
		}
		// C12: three clean samples.
		for i, ms := range []float64{20, 22, 21} {
			add(sample("C12", plat, Native, i, ms))
			add(sample("C12", plat, LayerFS, i, k*ms*2))
		}
		// X06: go is not visible in the sandbox.
		for i := range 2 {
			for _, arm := range []Arm{Native, LayerFS} {
				s := sample("X06", plat, arm, i, 0)
				s.Status, s.Verified, s.Error = Ineligible, false, "cell X06: cell ineligible: go is not visible in the sandbox"
				add(s)
			}
		}
	}
	if platformsToo {
		r.Session = []SessionFigure{
			{Platform: "local", Name: FigOpen, Unit: "ms", Values: []float64{8, 9, 7, 10, 30}},
			{Platform: "local", Name: FigWarmExec, Unit: "ms", Values: []float64{4.1, 4.3, 3.9, 4.0}, Failures: []string{"exec: timeout"}},
			{Platform: "docker", Name: FigOpen, Unit: "ms", Values: []float64{40, 42, 45}},
			{Platform: "docker", Name: FigWarmExec, Unit: "ms", Values: nil, Failures: []string{"engine gone"}},
			{Platform: "local", Name: FigThroughput4, Unit: "execs/s", Values: []float64{410, 420, 400}},
			{Platform: "local", Name: FigIdleMemory(100), Unit: "MiB", Values: []float64{1.5}},
		}
	}
	return r
}

func find(t *testing.T, sums []Summary, plat, cell string) Summary {
	t.Helper()
	for _, s := range sums {
		if s.Platform == plat && s.Cell == cell {
			return s
		}
	}
	t.Fatalf("no summary for %s/%s", plat, cell)
	return Summary{}
}

func near(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s = null, want %v", what, want)
		return
	}
	if math.Abs(*got-want) > 1e-6*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %v, want %v", what, *got, want)
	}
}

func TestSummarize(t *testing.T) {
	sums := fixture(true).Summarize()
	if len(sums) != 3*5 {
		t.Fatalf("got %d summaries, want 15 (3 platforms x 5 cells)", len(sums))
	}

	c01 := find(t, sums, "local", "C01")
	if !c01.Verified || c01.Samples != 5 || c01.NativeSamples != 5 || c01.Failed != 0 {
		t.Errorf("C01: verified %v, samples %d/%d, failed %d", c01.Verified, c01.Samples, c01.NativeSamples, c01.Failed)
	}
	near(t, "C01 native_ms (odd count)", c01.NativeMS, 31)
	near(t, "C01 native_min_ms", c01.NativeMinMS, 29)
	near(t, "C01 native_max_ms", c01.NativeMaxMS, 35)
	near(t, "C01 layerfs_ms", c01.LayerFSMS, 37.2)
	near(t, "C01 ratio", c01.Ratio, 1.2)
	near(t, "C01 ratio_min", c01.RatioMin, 34.8/31)
	near(t, "C01 ratio_max", c01.RatioMax, 42/31.0)
	near(t, "C01 commit_ms", c01.CommitMS, 12)
	near(t, "C01 requests", c01.Requests, 3002)
	near(t, "C01 us_per_request", c01.USPerRequest, 15000.0/3002)
	near(t, "C01 overhead_ms", c01.OverheadMS, 5)
	near(t, "C01 native_overhead_ms", c01.NativeOverheadMS, 4)
	near(t, "C01 sql_commit_statements", c01.SQLCommitStatements, 40)
	near(t, "C01 store_bytes", c01.StoreBytes, 3<<20)

	// An even count's median is the mean of the middle two; the failed
	// sample is counted and named but not in the median.
	c02 := find(t, sums, "local", "C02")
	near(t, "C02 native_ms (even count)", c02.NativeMS, 1005)
	near(t, "C02 layerfs_ms (failed sample left out)", c02.LayerFSMS, 1110)
	if c02.Verified || c02.Failed != 1 || c02.Samples != 4 {
		t.Errorf("C02: verified %v, failed %d, samples %d; want false, 1, 4", c02.Verified, c02.Failed, c02.Samples)
	}
	if len(c02.Errors) != 1 || c02.Errors[0] != "layerfs #2: verify: f17: missing" {
		t.Errorf("C02 errors = %q", c02.Errors)
	}
	if *c02.RatioMin > *c02.Ratio || *c02.RatioMax < *c02.Ratio {
		t.Errorf("C02 ratio %v outside [%v, %v]", *c02.Ratio, *c02.RatioMin, *c02.RatioMax)
	}

	// All LayerFS samples failed: null, never zero.
	c03 := find(t, sums, "local", "C03")
	if c03.LayerFSMS != nil || c03.Ratio != nil || c03.CommitMS != nil {
		t.Errorf("C03: failed figures must be null, got layerfs %v ratio %v", c03.LayerFSMS, c03.Ratio)
	}
	near(t, "C03 native_ms", c03.NativeMS, 505)
	if c03.Failed != 3 || c03.Verified {
		t.Errorf("C03: failed %d verified %v", c03.Failed, c03.Verified)
	}

	x06 := find(t, sums, "local", "X06")
	if x06.Ineligible != 4 || x06.Failed != 0 || x06.Verified || x06.NativeMS != nil {
		t.Errorf("X06: ineligible %d failed %d verified %v native %v", x06.Ineligible, x06.Failed, x06.Verified, x06.NativeMS)
	}

	lima := find(t, sums, "lima", "C01")
	if lima.NotRun != "limactl not found" || lima.NativeMS != nil || lima.Verified {
		t.Errorf("lima: %+v", lima)
	}

	// JSON: the required keys are present, and missing figures are null.
	var b bytes.Buffer
	require.NoError(t, WriteSummaryJSON(&b, sums))
	var objs []map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &objs))
	for _, key := range []string{"cell", "platform", "samples", "verified", "native_ms", "layerfs_ms", "ratio", "requests", "us_per_request", "commit_ms", "overlay_bytes", "store_bytes"} {
		if _, ok := objs[0][key]; !ok {
			t.Errorf("summary.json lacks %q", key)
		}
	}
	if v, ok := objs[2]["layerfs_ms"]; !ok || v != nil {
		t.Errorf("C03 layerfs_ms in JSON = %v, want null", v)
	}
}

func TestVerifiedNeedsBothArms(t *testing.T) {
	r := Results{Platforms: []Platform{{Name: "local"}}, Cells: []Cell{{ID: "C01"}}}
	r.Samples = []Sample{sample("C01", "local", LayerFS, 0, 10)}
	if s := r.Summarize()[0]; s.Verified {
		t.Error("verified with no native sample")
	}
	n := sample("C01", "local", Native, 0, 10)
	n.Verified = false
	r.Samples = append(r.Samples, n)
	if s := r.Summarize()[0]; s.Verified || s.Failed != 1 {
		t.Errorf("a native sample that did not verify: verified %v failed %d", s.Verified, s.Failed)
	}
}

func TestGeoMeans(t *testing.T) {
	sums := fixture(false).Summarize()
	gm := GeoMeans(sums, "local")
	// C01 1.2 and C12 2.0 have ratios; C02 has one too; C03 has none.
	c02 := *find(t, sums, "local", "C02").Ratio
	want := math.Cbrt(1.2 * 2.0 * c02)
	near(t, "geomean", gm[""].Value, want)
	if gm[""].Cells != 3 || gm[""].Of != 4 {
		t.Errorf("geomean over %d of %d cells, want 3 of 4", gm[""].Cells, gm[""].Of)
	}
	if gm["extended"].Value != nil {
		t.Error("extended group has no ratio, want null")
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create it")
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestTables(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Results
	}{{"one", fixture(false)}, {"multi", fixture(true)}} {
		var md, txt, js bytes.Buffer
		require.NoError(t, tc.r.WriteMarkdown(&md))
		require.NoError(t, tc.r.WriteText(&txt))
		require.NoError(t, WriteSummaryJSON(&js, tc.r.Summarize()))
		golden(t, "cells-"+tc.name+".md", md.Bytes())
		golden(t, "cells-"+tc.name+".txt", txt.Bytes())
		golden(t, "summary-"+tc.name+".json", js.Bytes())
		assert.NotContains(t, md.String(), "| 0.00", "a zero time appears in the table")
	}
	r := fixture(true)
	assert.Contains(t, tableString(t, r), "not run: limactl not found", "lima is not shown as not run")
	var sm, st, sj bytes.Buffer
	require.NoError(t, r.WriteSessionMarkdown(&sm))
	require.NoError(t, r.WriteSessionText(&st))
	require.NoError(t, WriteSessionJSON(&sj, r.Session))
	golden(t, "session.md", sm.Bytes())
	golden(t, "session.txt", st.Bytes())
	golden(t, "session.json", sj.Bytes())
}

func tableString(t *testing.T, r Results) string {
	var b bytes.Buffer
	require.NoError(t, r.WriteMarkdown(&b))
	return b.String()
}

func TestChart(t *testing.T) {
	for _, size := range [][2]int{{ChartWidth, ChartHeight}, {640, 360}} {
		var b bytes.Buffer
		require.NoError(t, fixture(true).WriteChart(&b, size[0], size[1]))
		img, err := png.Decode(&b)
		require.NoError(t, err, "chart is not a PNG")
		if got := img.Bounds().Size(); got.X != size[0] || got.Y != size[1] {
			t.Errorf("chart is %dx%d, want %dx%d", got.X, got.Y, size[0], size[1])
		}
	}
	assert.Error(t, (Results{}).WriteChart(&bytes.Buffer{}, 0, 10), "a zero-width chart must fail")
}

func TestLogRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), SamplesFile)
	want := fixture(false).Samples
	for half := range 2 { // reopening appends
		l, err := OpenLog(path)
		require.NoError(t, err)
		for _, s := range want[half*len(want)/2 : (half+1)*len(want)/2] {
			require.NoError(t, l.Append(s))
		}
		require.NoError(t, l.Close())
	}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	got, err := ReadSamples(f)
	require.NoError(t, err)
	if len(got) != len(want) {
		t.Fatalf("read %d samples, want %d", len(got), len(want))
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	if !bytes.Equal(a, b) {
		t.Error("samples changed in the round trip")
	}
	_, err = ReadSamples(strings.NewReader("{\"cell\": 1}\n"))
	assert.Error(t, err, "a bad line must fail")
}

func TestWriteAll(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, fixture(true).WriteAll(dir))
	for _, name := range []string{SummaryFile, TableMarkdownFile, TableTextFile, ChartFile, SessionFile, SessionMarkdownFile, SessionTextFile} {
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A sample log alone renders: platforms and cells come from the samples.
func TestFromSamplesAlone(t *testing.T) {
	full := fixture(false)
	bare := Results{Samples: full.Samples}
	sums := bare.Summarize()
	if len(sums) != len(full.Cells) || sums[0].Platform != "local" || sums[0].Cell != "C01" {
		t.Fatalf("got %d summaries, first %s/%s", len(sums), sums[0].Platform, sums[0].Cell)
	}
	near(t, "C01 ratio", sums[0].Ratio, 1.2)
}

// TestComparison: a column group compared with another (two Stores on one
// platform) gets a note with the ratio of the two geometric means.
func TestComparison(t *testing.T) {
	r := Results{
		Platforms: []Platform{{Name: "local"}, {Name: "local+shared", Against: "local"}},
		Cells:     []Cell{{ID: "C01"}, {ID: "C02"}},
	}
	for i := range 3 {
		for _, c := range []struct {
			id              string
			native, em, shd float64
		}{{"C01", 100, 150, 165}, {"C02", 10, 40, 44}} {
			r.Samples = append(r.Samples,
				sample(c.id, "local", Native, i, c.native), sample(c.id, "local", LayerFS, i, c.em),
				sample(c.id, "local+shared", Native, i, c.native), sample(c.id, "local+shared", LayerFS, i, c.shd))
		}
	}
	var out bytes.Buffer
	require.NoError(t, r.WriteText(&out))
	// geometric means sqrt(1.5*4) = 2.45 and sqrt(1.65*4.4) = 2.69: 1.1
	assert.Contains(t, out.String(), "local+shared against local, geometric mean: 2.69x against 2.45x, ratio 1.100 (+10.0%)")
	// LayerFS medians 165/150 and 44/40: 1.1; the natives alike: 1.
	assert.Contains(t, out.String(), "local+shared over local, geometric mean of the medians' ratios: LayerFS 1.100 over 2 cells; native 1.000 over 2 cells (the same work in both: the noise)")
}

// TestStatsJSON: a Stats of one value (no spread) or of none encodes, its
// NaN figures as null.
func TestStatsJSON(t *testing.T) {
	b, err := json.Marshal(map[string]Stats{"one": Describe([]float64{2}), "none": Describe(nil)})
	require.NoError(t, err)
	assert.JSONEq(t, `{"one": {"n": 1, "p50": 2, "p95": 2, "min": 2, "max": 2, "mean": 2, "stddev": null},
		"none": {"n": 0, "p50": null, "p95": null, "min": null, "max": null, "mean": null, "stddev": null}}`, string(b))
}
