package fsbench

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/cells"
	"layerfs.dev/layerfs/internal/testenv"
)

func pick(t *testing.T, ids ...string) []cells.Cell {
	t.Helper()
	cs, err := cells.Select(ids)
	require.NoError(t, err)
	return cs
}

// TestRun runs cells with an empty base, the 64 MiB base and in-sandbox
// checks (C12's git) with one sample, and a cell whose body leaves the
// wrong end state, which must be reported on both arms' first failure.
func TestRun(t *testing.T) {
	testenv.RequireFUSE(t)
	ids := []string{"C01", "C09", "C11"}
	if _, err := exec.LookPath("git"); err == nil {
		ids = append(ids, "C12")
	}
	wrong := cells.Cell{ID: "T01", Body: `echo 2 > f1`, Expect: func() cells.Expectation {
		var b cells.Builder
		return b.File("f1", cells.Text("1\n")).Build()
	}}
	never := cells.Cell{ID: "T02", Body: `true`, Probe: `echo "not here"; exit 1`, Expect: func() cells.Expectation { return cells.Expectation{} }}
	var progress []string
	rep, err := Run(t.Context(), Config{
		Dir:      t.TempDir(),
		Samples:  1,
		Cells:    append(pick(t, ids...), wrong, never),
		Progress: func(done, total int, what string) { progress = append(progress, what) },
	})
	require.NoError(t, err)
	if len(rep.Results) != len(ids)+2 {
		t.Fatalf("%d results for %d cells", len(rep.Results), len(ids)+2)
	}
	if want := 2*(len(ids)+1) + 1; len(progress) != want {
		t.Errorf("%d progress calls, want %d: %v", len(progress), want, progress)
	}
	byID := map[string]*Result{}
	for _, r := range rep.Results {
		byID[r.Cell] = r
	}
	for _, id := range ids {
		r := byID[id]
		if !r.Verified() {
			t.Errorf("%s: not verified: %s", id, r.VerifyErr)
		}
		if len(r.Native) != 1 || len(r.LayerFS) != 1 || r.Native[0] <= 0 || r.LayerFS[0] <= 0 {
			t.Errorf("%s: samples native %v layerfs %v", id, r.Native, r.LayerFS)
		}
		if r.medianStats().Requests() == 0 || r.DataPath == "" {
			t.Errorf("%s: %d requests, data path %q", id, r.medianStats().Requests(), r.DataPath)
		}
	}
	// C01 creates 1,000 files: at least a CREATE each.
	if got := byID["C01"].medianStats().Requests(); got < 1000 {
		t.Errorf("C01: %d requests, want at least 1000", got)
	}
	if r := byID["T01"]; r.Verified() || !strings.Contains(r.VerifyErr, `f1: content "2\n", want "1\n"`) {
		t.Errorf("T01 left f1 = 2: verified %v, %q", r.Verified(), r.VerifyErr)
	}
	if r := byID["T02"]; r.Ineligible == "" || !strings.Contains(r.Ineligible, "not here") || len(r.Native) != 0 {
		t.Errorf("T02: ineligible %q, samples %v", r.Ineligible, r.Native)
	}

	var tab bytes.Buffer
	require.NoError(t, rep.Table(&tab))
	for _, want := range []string{"| C01 |", "| C09 |", "| T01 |", "NO: ", "| T02 | ineligible: ", "CREATE 1000", "geometric mean of ratios"} {
		assert.Contains(t, tab.String(), want, "table")
	}
	js, err := json.Marshal(rep.JSON())
	require.NoError(t, err)
	if !strings.Contains(string(js), `"cell":"C09"`) || !strings.Contains(string(js), `"geomean_ratio"`) {
		t.Errorf("JSON: %s", js)
	}
	t.Logf("\n%s", tab.String())
}

// TestBodyFailure: a body that exits non-zero ends the run with its
// stderr, rather than being timed.
func TestBodyFailure(t *testing.T) {
	testenv.RequireFUSE(t)
	bad := cells.Cell{ID: "T03", Body: `echo broken >&2; false`, Expect: func() cells.Expectation { return cells.Expectation{} }}
	_, err := Run(t.Context(), Config{Dir: t.TempDir(), Samples: 1, Cells: []cells.Cell{bad}})
	if err == nil || !strings.Contains(err.Error(), "broken") || !strings.Contains(err.Error(), "T03") {
		t.Fatalf("got %v", err)
	}
}
