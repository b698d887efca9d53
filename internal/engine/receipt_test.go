package engine_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/engine"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/wire"
)

// newEngineOnStore makes an engine with the local platform over a fresh
// Store opened with opts.
func newEngineOnStore(t *testing.T, opts store.Options, cfg engine.Config) (*engine.Engine, *store.DB) {
	t.Helper()
	return startEngine(t, opts, cfg, local.New(local.Options{}))
}

// TestReceiptsBelongToTheirRequest: workspace B runs `sleep 0.05` twenty
// times while workspace A writes a file and commits in a loop. B's
// receipts show none of A's statements or bytes; A's show its own work.
func TestReceiptsBelongToTheirRequest(t *testing.T) {
	onEachStore(t, func(t *testing.T, opts store.Options, path string) {
		e, _ := newEngineOnStore(t, opts, engine.Config{DataPath: path})
		testReceiptsBelongToTheirRequest(t, e)
	})
}

// onEachStore runs f on each data path over a new embedded Store, then
// over a new shared one (PostgreSQL and S3, the test binary's private
// servers): f gets the options to open it with.
func onEachStore(t *testing.T, f func(t *testing.T, opts store.Options, path string)) {
	for _, backend := range []string{"embedded", "shared"} {
		t.Run(backend, func(t *testing.T) {
			onBothPaths(t, func(t *testing.T, path string) {
				var opts store.Options
				if backend == "shared" {
					opts.URL = testenv.StoreURL(t)
				}
				f(t, opts, path)
			})
		})
	}
}

func testReceiptsBelongToTheirRequest(t *testing.T, e *engine.Engine) {
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	a, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	b, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)

	// A: write a file of new content and commit, until B is done.
	done := make(chan struct{})
	firstCommit := make(chan struct{})
	var commits []wire.Receipt
	var aErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			body := fmt.Sprintf("head -c 65536 /dev/urandom > f%d", i%4)
			res, err := e.Exec(ctx, a.ID, wire.ExecRequest{Body: body}, io.Discard, io.Discard)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exec %q: exit %d", body, res.ExitCode)
			}
			var c wire.CommitResult
			if err == nil {
				c, err = e.CommitWorkspace(ctx, a.ID, wire.CommitRequest{Message: "a"})
			}
			if err != nil {
				aErr = err
				return
			}
			commits = append(commits, *c.Receipt)
			if i == 0 {
				close(firstCommit)
			}
		}
	})
	<-firstCommit

	var quiet []wire.Receipt
	for range 20 {
		res, err := e.Exec(ctx, b.ID, wire.ExecRequest{Body: "sleep 0.05"}, io.Discard, io.Discard)
		require.NoError(t, err)
		require.Zero(t, res.ExitCode)
		quiet = append(quiet, res.Receipt)
	}
	close(done)
	wg.Wait()
	require.NoError(t, aErr)
	require.Greater(t, len(commits), 3, "A committed too few times while B ran to tell anything")

	var minS, maxS, minB, maxB int64 = 1 << 62, 0, 1 << 62, 0
	for _, r := range quiet {
		minS, maxS = min(minS, r.SQL.Statements), max(maxS, r.SQL.Statements)
		minB, maxB = min(minB, r.StoreBytesWritten), max(maxB, r.StoreBytesWritten)
	}
	t.Logf("B's 20 sleeps, while A committed %d times: SQL statements %d-%d, Store bytes written %d-%d",
		len(commits), minS, maxS, minB, maxB)
	for i, r := range quiet {
		assertNoStoreWork(t, r, fmt.Sprintf("sleep %d", i))
	}
	for i, r := range commits {
		assert.Positive(t, r.SQL.Statements, "A's commit %d: SQL statements", i)
		assert.Positive(t, r.StoreBytesWritten, "A's commit %d: Store bytes written", i)
	}
}

// assertNoStoreWork fails unless receipt r counts no Store work.
func assertNoStoreWork(t *testing.T, r wire.Receipt, what string) {
	t.Helper()
	assert.Zero(t, r.SQL.Statements, "%s: SQL statements", what)
	assert.Zero(t, r.SQL.Transactions, "%s: SQL transactions", what)
	assert.Zero(t, r.SQL.Rows, "%s: SQL rows", what)
	assert.Zero(t, r.StoreBytesWritten, "%s: Store bytes written", what)
	assert.Zero(t, r.StoreBytesRead, "%s: Store bytes read", what)
	assert.Zero(t, r.CacheBytesWritten, "%s: cache bytes written", what)
}

// TestReceiptsCountTheirReads: the first reads of committed files by an
// exec, through the workspace's FUSE mount (the lower view, on overlay),
// materialize their contents into the Store's cache; that work is on the
// reading exec's receipt and on no other: not on a quiet exec's of another
// workspace, not on an exec's of the same workspace while the daemon reads
// a file itself, and on neither of two execs of one workspace that run at
// once (which their receipts say).
func TestReceiptsCountTheirReads(t *testing.T) {
	onEachStore(t, func(t *testing.T, opts store.Options, path string) {
		opts.NoCacheFill, opts.NoPrefetch = true, true // the contents are left to the readers
		e, db := newEngineOnStore(t, opts, engine.Config{DataPath: path, NoPrefetch: true})
		testReceiptsCountTheirReads(t, e, db)
	})
}

func testReceiptsCountTheirReads(t *testing.T, e *engine.Engine, db *store.DB) {
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	const files, size = 8, 256 << 10
	w, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	run(t, e, w.ID, fmt.Sprintf("for i in $(seq 1 %d); do head -c %d /dev/urandom > f$i; head -c %d /dev/urandom > g$i; done", files, size, size))
	_, err = e.CommitWorkspace(ctx, w.ID, wire.CommitRequest{Message: "contents"})
	require.NoError(t, err)
	require.NoError(t, e.EndWorkspace(ctx, w.ID, true))
	r, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)
	q, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: "main"})
	require.NoError(t, err)

	// R reads each f once, one exec each, while Q sleeps.
	var quiet []wire.Receipt
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := e.Exec(ctx, q.ID, wire.ExecRequest{Body: "sleep 0.05"}, io.Discard, io.Discard)
			if !assert.NoError(t, err) {
				return
			}
			quiet = append(quiet, res.Receipt)
		}
	})
	for i := 1; i <= files; i++ {
		_, res := run(t, e, r.ID, fmt.Sprintf("cat f%d > /dev/null", i))
		rc := res.Receipt
		what := fmt.Sprintf("cat f%d", i)
		assert.EqualValues(t, size, rc.CacheBytesWritten, "%s: cache bytes written", what)
		assert.Positive(t, rc.FUSE.Requests, "%s: FUSE requests", what)
		assert.Positive(t, rc.SQL.Statements, "%s: SQL statements", what)
		assert.Positive(t, rc.StoreBytesRead+int64(rc.FUSE.ByOp["OPEN"].Count), "%s: Store bytes read", what)
		assert.False(t, rc.SharedMount, "%s: the only exec of its workspace", what)
	}
	close(stop)
	wg.Wait()
	require.NotEmpty(t, quiet)
	for i, rc := range quiet {
		assertNoStoreWork(t, rc, fmt.Sprintf("Q's sleep %d", i))
	}

	// The daemon reads g1 through R's mount while R's exec sleeps: the
	// read is the daemon's, not the exec's.
	before := db.Counters()
	read := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := e.ReadFile(ctx, r.ID, "g1", io.Discard)
		read <- err
	}()
	_, res := run(t, e, r.ID, "sleep 1")
	require.NoError(t, <-read)
	require.GreaterOrEqual(t, db.Counters().Sub(before).CacheBytes, int64(size), "the daemon's read of g1 placed it in the cache")
	assertNoStoreWork(t, res.Receipt, "R's sleep while the daemon read g1")

	// Two execs of R at once: g2's materialization is on neither.
	var slept wire.ExecResult
	wg.Go(func() {
		slept, err = e.Exec(ctx, r.ID, wire.ExecRequest{Body: "sleep 1"}, io.Discard, io.Discard)
		assert.NoError(t, err)
	})
	time.Sleep(300 * time.Millisecond)
	_, res = run(t, e, r.ID, "cat g2 > /dev/null")
	wg.Wait()
	for what, rc := range map[string]wire.Receipt{"cat g2": res.Receipt, "sleep 1 beside it": slept.Receipt} {
		assert.True(t, rc.SharedMount, "%s: shared_mount", what)
		assert.Zero(t, rc.CacheBytesWritten, "%s: cache bytes written", what)
	}
}

// TestReceiptsAddUpToTheTotals: with no background work (no prefetch, no
// cache fill, no image built ahead, the fuse data path), the receipts of
// requests, two workspaces' at once among them, add up to what the
// Store's totals and GET /metrics counted meanwhile: no figure counted
// twice, none lost.
func TestReceiptsAddUpToTheTotals(t *testing.T) {
	e, db := newEngineOnStore(t, store.Options{NoCacheFill: true, NoPrefetch: true},
		engine.Config{DataPath: wire.DataPathFUSE, NoPrefetch: true, NoImageAhead: true})
	ctx := t.Context()
	_, err := e.CreateProject(ctx, wire.CreateProject{Name: "p"})
	require.NoError(t, err)
	dir := t.TempDir()
	for i := range 4 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprint("d", i)), bytes.Repeat([]byte{byte(i)}, 100<<10), 0o644))
	}

	_, err = e.CommitDir(ctx, "p", "main", wire.CommitDir{FromPath: dir, Message: "import"})
	require.NoError(t, err)
	branches := []string{"x", "y"}
	for _, b := range branches {
		_, err := e.ForkBranch(ctx, "p", wire.ForkBranch{Name: b, From: "main"})
		require.NoError(t, err)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d9"), []byte("a new file"), 0o644))

	before, metricsBefore := db.Counters(), metrics(t, e)
	var receipts []wire.Receipt
	add := func(r *wire.Receipt) {
		require.NotNil(t, r)
		receipts = append(receipts, *r)
	}
	c, err := e.CommitDir(ctx, "p", "main", wire.CommitDir{FromPath: dir, Message: "import again"})
	require.NoError(t, err)
	add(c.Receipt)
	// Two workspaces, each on a branch of its own, read, write and commit
	// at the same time.
	var wss []wire.Workspace
	for _, b := range branches {
		w, err := e.CreateWorkspace(ctx, wire.WorkspaceSpec{Project: "p", Branch: b})
		require.NoError(t, err)
		add(w.Receipt)
		wss = append(wss, w)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range wss {
		wg.Go(func() {
			for i := range 3 {
				body := fmt.Sprintf("cat d%d > /dev/null && head -c 70000 /dev/urandom > n%d", i, i)
				res, err := e.Exec(ctx, w.ID, wire.ExecRequest{Body: body}, io.Discard, io.Discard)
				if !assert.NoError(t, err) || !assert.Zero(t, res.ExitCode, body) {
					return
				}
				c, err := e.CommitWorkspace(ctx, w.ID, wire.CommitRequest{Message: "n"})
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				receipts = append(receipts, res.Receipt, *c.Receipt)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	f, err := e.ForkWorkspace(ctx, wss[0].ID, wire.ForkRequest{Count: 2})
	require.NoError(t, err)
	add(f.Receipt)
	d, metricsAfter := db.Counters().Sub(before), metrics(t, e)

	var sum wire.Receipt
	for _, r := range receipts {
		sum.SQL.Statements += r.SQL.Statements
		sum.SQL.Transactions += r.SQL.Transactions
		sum.SQL.Rows += r.SQL.Rows
		sum.StoreBytesWritten += r.StoreBytesWritten
		sum.StoreBytesRead += r.StoreBytesRead
		sum.CacheBytesWritten += r.CacheBytesWritten
	}
	t.Logf("%d receipts: %d statements, %d transactions, %d rows, %d bytes written, %d read, %d cached",
		len(receipts), sum.SQL.Statements, sum.SQL.Transactions, sum.SQL.Rows, sum.StoreBytesWritten, sum.StoreBytesRead, sum.CacheBytesWritten)
	assert.Positive(t, sum.CacheBytesWritten, "the execs' reads materialized contents")
	assert.Equal(t, d.Statements, sum.SQL.Statements, "SQL statements: totals against the receipts' sum")
	assert.Equal(t, d.Transactions, sum.SQL.Transactions, "SQL transactions")
	assert.Equal(t, d.Rows, sum.SQL.Rows, "SQL rows")
	assert.Equal(t, d.PackBytesWritten, sum.StoreBytesWritten, "Store bytes written")
	assert.Equal(t, d.PackBytesRead, sum.StoreBytesRead, "Store bytes read")
	assert.Equal(t, d.CacheBytes, sum.CacheBytesWritten, "cache bytes written")
	for name, want := range map[string]int64{
		"layerfs_sql_statements_total":     sum.SQL.Statements,
		"layerfs_sql_transactions_total":   sum.SQL.Transactions,
		"layerfs_sql_rows_total":           sum.SQL.Rows,
		"layerfs_pack_written_bytes_total": sum.StoreBytesWritten,
		"layerfs_pack_read_bytes_total":    sum.StoreBytesRead,
	} {
		assert.EqualValues(t, want, metricsAfter[name]-metricsBefore[name], "GET /metrics: %s against the receipts' sum", name)
	}
}

// metrics reads the engine's /metrics samples without labels.
func metrics(t *testing.T, e *engine.Engine) map[string]float64 {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, e.WriteMetrics(&buf))
	out := map[string]float64{}
	for _, line := range strings.Split(buf.String(), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || strings.Contains(name, "{") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		require.NoError(t, err, "metrics line %q", line)
		out[name] = f
	}
	return out
}
