package report_test

import (
	"os"
	"time"

	"layerfs.dev/layerfs/internal/bench/report"
)

// The runner fills samples; the report renders them.
func ExampleResults_WriteText() {
	r := report.Results{
		Platforms: []report.Platform{{Name: "local"}, {Name: "lima", NotRun: "limactl not found"}},
		Cells:     []report.Cell{{ID: "C06", Title: "write 64 MiB"}},
	}
	for i, ms := range []time.Duration{15, 16, 14} {
		r.Samples = append(r.Samples,
			report.Sample{Cell: "C06", Platform: "local", Arm: report.Native, Index: i, Status: report.OK, Verified: true,
				Command: ms * time.Millisecond, Overhead: 4 * time.Millisecond},
			report.Sample{Cell: "C06", Platform: "local", Arm: report.LayerFS, Index: i, Status: report.OK, Verified: true,
				Command: (ms + 2) * time.Millisecond, Overhead: 5 * time.Millisecond, Commit: 90 * time.Millisecond,
				Requests: map[string]int64{"LOOKUP": 3, "CREATE": 1, "FLUSH": 1}, DaemonTime: 100 * time.Microsecond,
				OverlayBytes: 64 << 20, StoreBytes: 200 << 10},
		)
	}
	if err := r.WriteText(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// local ───────────────────────────────────────────────────────────────────────────────────────────────────────────  lima ─────────────────────
	// cell                           native ms        LayerFS ms    ratio [min-max]  requests  µs/req  commit ms   overlay      Store  verified                        lima
	// ─────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
	// C06 write 64 MiB                    15.0              17.0  1.13x [1.07-1.20]         5    20.0       90.0  64.0 MiB  200.0 KiB       yes  not run: limactl not found
	// geometric mean                                                          1.13x                                                                                 not run
	// fixed exec overhead ms  4.00 [4.00-4.00]  5.00 [5.00-5.00]                                                                                                    not run
	//
	// lima: not run: limactl not found
}
