package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/wire"
)

// ExecThroughput is the aggregate exec throughput of a number of daemons of
// one shared Store: each daemon's workspace with Clients callers running
// `true` in a loop for the same Seconds, all daemons at once.
type ExecThroughput struct {
	Daemons int     `json:"daemons"`
	Clients int     `json:"clients_per_daemon"`
	Seconds float64 `json:"seconds"` // from the start until the last call returned
	// Execs and PerSecond are per daemon, in host order (A, B, C).
	Execs     []int     `json:"execs"`
	PerSecond []float64 `json:"execs_per_second"`
	Total     float64   `json:"execs_per_second_total"`
	// Latency is each call's SDK wall time, in ms.
	Latency report.Stats `json:"latency_ms"`
	// SQLPerExec is the Store statements per exec, from the receipts: what
	// an exec asks of the shared database.
	SQLPerExec float64 `json:"sql_statements_per_exec"`
	Error      string  `json:"error,omitempty"`
}

// execHosts are the fleet hosts of the throughput figure, in order.
var execHosts = []string{HostFirst, HostSecond, HostThird}

// execThroughput measures ExecThroughput for 1, 2 and 3 daemons: hosts A,
// B and C, each with a workspace of its own on one project of the Store.
func (f *fleetRun) execThroughput() ([]ExecThroughput, error) {
	ctx := f.ctx
	project := "execs-" + f.tag
	if _, err := f.clients[HostFirst].CreateProject(ctx, wire.CreateProject{Name: project}); err != nil {
		return nil, fmt.Errorf("exec throughput: %w", err)
	}
	var wss []*client.Workspace
	for _, h := range execHosts {
		w, err := f.clients[h].CreateWorkspace(ctx, client.WorkspaceSpec{Project: project, Branch: "main", Platform: "local"})
		if err != nil {
			return nil, fmt.Errorf("exec throughput: workspace on %s: %w", h, err)
		}
		defer w.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
		// Warm: the first exec of a workspace pays for what later ones
		// reuse.
		for range 3 {
			if _, err := execTrue(ctx, w); err != nil {
				return nil, fmt.Errorf("exec throughput: warm-up on %s: %w", h, err)
			}
		}
		wss = append(wss, w)
	}
	var out []ExecThroughput
	for n := 1; n <= len(wss); n++ {
		f.say(fmt.Sprintf("exec throughput: %d daemon(s), %d clients each, %s", n, f.cfg.ExecClients, f.cfg.ExecFor))
		out = append(out, f.execRound(wss[:n]))
	}
	return out, nil
}

// execRound runs cfg.ExecClients callers on each of wss for cfg.ExecFor.
func (f *fleetRun) execRound(wss []*client.Workspace) ExecThroughput {
	r := ExecThroughput{Daemons: len(wss), Clients: f.cfg.ExecClients, Execs: make([]int, len(wss))}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		lat   []float64
		sql   int64
		first error
	)
	t0 := time.Now()
	deadline := t0.Add(f.cfg.ExecFor)
	for i, w := range wss {
		for range f.cfg.ExecClients {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					t := time.Now()
					res, err := execTrue(f.ctx, w)
					mu.Lock()
					if err != nil {
						if first == nil {
							first = err
						}
						mu.Unlock()
						return
					}
					r.Execs[i]++
					lat = append(lat, ms(time.Since(t)))
					sql += res.Receipt.SQL.Statements
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	r.Seconds = time.Since(t0).Seconds()
	if first != nil {
		r.Error = first.Error()
	}
	n := 0
	for _, e := range r.Execs {
		r.PerSecond = append(r.PerSecond, float64(e)/r.Seconds)
		n += e
	}
	r.Total = float64(n) / r.Seconds
	r.Latency = report.Describe(lat)
	if n > 0 {
		r.SQLPerExec = float64(sql) / float64(n)
	}
	return r
}

// execTrue runs `true` in w; a non-zero exit is an error.
func execTrue(ctx context.Context, w *client.Workspace) (*client.ExecResult, error) {
	res, err := w.Exec(ctx, "true", client.ExecOptions{})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exec true: exit %d", res.ExitCode)
	}
	return res, err
}

// writeExecTable prints the exec throughput figures as a markdown table.
func writeExecTable(w io.Writer, rows []ExecThroughput) error {
	fmt.Fprintf(w, "\n| daemons | clients each | execs/s total | execs/s per daemon | exec p50 (p95) ms | SQL statements per exec |\n|---:|---:|---:|---|---|---:|\n")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "| %d | %d | failed: %s | | | |\n", r.Daemons, r.Clients, r.Error)
			continue
		}
		per := ""
		for i, v := range r.PerSecond {
			if i > 0 {
				per += ", "
			}
			per += fmt.Sprintf("%c %s", 'A'+i, figure(v))
		}
		if _, err := fmt.Fprintf(w, "| %d | %d | %s | %s | %s (%s) | %.1f |\n", r.Daemons, r.Clients, figure(r.Total), per,
			figure(r.Latency.P50), figure(r.Latency.P95), r.SQLPerExec); err != nil {
			return err
		}
	}
	return nil
}
