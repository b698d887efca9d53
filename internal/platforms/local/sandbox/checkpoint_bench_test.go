//go:build linux

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// app64 is the seeds' app64 without numpy (not installed here): a Python
// HTTP server holding a 64 MiB heap of random bytes that it reads all of
// on every request.
const app64 = `exec python3 -c '
import http.server, os
heap = bytearray(os.urandom(64 << 20))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = str(sum(heap[::4096])).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()'`

// TestCheckpointFigures measures, for app64 in a resident sandbox: a
// checkpoint left running, a restore to its first answer, and N restores
// until all answer (one after the other), with LAYERFS_CHECKPOINT_SAMPLES
// samples; it is skipped without it (a bench, run by hand).
func TestCheckpointFigures(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LAYERFS_CHECKPOINT_SAMPLES"))
	if n <= 0 {
		t.Skip("a bench: set LAYERFS_CHECKPOINT_SAMPLES")
	}
	clones, _ := strconv.Atoi(os.Getenv("LAYERFS_CHECKPOINT_CLONES"))
	clones = max(clones, 1)
	l := checkpointLauncher(t)
	src := l.NewSession()
	defer src.Close(context.Background())
	ws := t.TempDir()
	startService(t, src, ws, app64)
	ask(t, src, ws)
	median := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	var snap, frozen, first, all []time.Duration
	var bytes int64
	for i := range n {
		dir := filepath.Join(t.TempDir(), "img")
		t0 := time.Now()
		st, err := src.Checkpoint(t.Context(), CheckpointOptions{Dir: dir, WorkDir: t.TempDir()})
		require.NoError(t, err)
		snap, frozen, bytes = append(snap, time.Since(t0)), append(frozen, st.Frozen), st.Bytes
		var sessions []*Session
		t0 = time.Now()
		for c := range clones {
			s := l.NewSession()
			sessions = append(sessions, s)
			_, _, err := s.Restore(t.Context(), Config{Workspace: t.TempDir()}, RestoreOptions{Dir: dir, WorkDir: t.TempDir()})
			require.NoError(t, err)
			ask(t, s, ws)
			if c == 0 {
				first = append(first, time.Since(t0))
			}
		}
		all = append(all, time.Since(t0))
		for _, s := range sessions {
			require.NoError(t, s.Close(context.Background()))
		}
		t.Logf("sample %d: checkpoint %v (frozen %v), first %v, %d clones %v", i, snap[i], frozen[i], first[i], clones, all[i])
	}
	t.Logf("app64, %d samples: checkpoint p50 %v (frozen %v, %d MB images), restore to first answer p50 %v, %d clones until all answer p50 %v",
		n, median(snap), median(frozen), bytes>>20, median(first), clones, median(all))
}
