package engine

import (
	"fmt"
	"io"
	"sort"
	"sync/atomic"
	"time"

	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/wire"
)

// metrics are the engine's cumulative counters for /metrics.
type metrics struct {
	running           atomic.Int64
	execs             atomic.Int64
	execFailures      atomic.Int64 // commands that exited non-zero
	execErrors        atomic.Int64 // execs that could not run
	portDials         atomic.Int64 // connections made to workspaces' ports
	execWallNs        atomic.Int64
	commits           atomic.Int64
	workspacesCreated atomic.Int64
	// What execs added to upper layers (positive differences only).
	upperFiles   atomic.Int64
	upperBytes   atomic.Int64
	upperCopyUps atomic.Int64
	// Egress decisions and the bytes of egress execs.
	net netMetrics
}

func (m *metrics) observeUpper(u wire.UpperStats) {
	m.upperFiles.Add(max(u.Files, 0))
	m.upperBytes.Add(max(u.Bytes, 0))
	m.upperCopyUps.Add(max(u.CopyUps+u.Metacopies, 0))
}

func (m *metrics) observeExec(wall time.Duration, exit int) {
	m.execs.Add(1)
	m.execWallNs.Add(wall.Nanoseconds())
	if exit != 0 {
		m.execFailures.Add(1)
	}
}

// fuseStats turns a mount's telemetry into its wire form.
func fuseStats(s fusefs.Stats) wire.FUSEStats {
	out := wire.FUSEStats{
		Requests:     int64(s.Requests()),
		ServiceNs:    s.ServiceTime().Nanoseconds(),
		ServiceP50Ns: s.Quantile(0.5).Nanoseconds(),
		ByOp:         map[string]wire.OpStats{},
	}
	for _, o := range s.ByOp() {
		out.ByOp[o.Op.String()] = wire.OpStats{Count: int64(o.Count), ServiceNs: o.Time.Nanoseconds()}
	}
	return out
}

// WriteMetrics writes the engine's counters in the Prometheus text format.
func (e *Engine) WriteMetrics(w io.Writer) error {
	pw := &promWriter{w: w}
	m := &e.metrics
	pw.metric("layerfs_workspaces", "gauge", "Workspaces this daemon serves.", float64(e.LiveWorkspaces()))
	pw.metric("layerfs_workspaces_created_total", "counter", "Workspaces created.", float64(m.workspacesCreated.Load()))
	pw.metric("layerfs_execs_running", "gauge", "Execs in progress.", float64(m.running.Load()))
	pw.metric("layerfs_execs_total", "counter", "Execs that ran.", float64(m.execs.Load()))
	pw.metric("layerfs_exec_failures_total", "counter", "Execs whose command exited non-zero.", float64(m.execFailures.Load()))
	pw.metric("layerfs_exec_errors_total", "counter", "Execs that could not run.", float64(m.execErrors.Load()))
	pw.metric("layerfs_port_connections_total", "counter", "Connections made to ports inside workspaces' sandboxes.", float64(m.portDials.Load()))
	pw.metric("layerfs_exec_wall_seconds_total", "counter", "Wall time of execs.", float64(m.execWallNs.Load())/1e9)
	pw.metric("layerfs_commits_total", "counter", "Workspace commits.", float64(m.commits.Load()))
	pw.metric("layerfs_upper_files_written_total", "counter", "Files execs added to upper layers.", float64(m.upperFiles.Load()))
	pw.metric("layerfs_upper_bytes_written_total", "counter", "Bytes execs added to upper layers.", float64(m.upperBytes.Load()))
	pw.metric("layerfs_upper_copy_ups_total", "counter", "Committed files execs copied up (data or metadata only).", float64(m.upperCopyUps.Load()))
	pw.metric("layerfs_egress_names_allowed_total", "counter", "Names the egress resolver answered for sandboxes.", float64(m.net.namesAllowed.Load()))
	pw.metric("layerfs_egress_names_denied_total", "counter", "Names the egress resolver refused (NXDOMAIN), or addresses it left out.", float64(m.net.namesDenied.Load()))
	pw.metric("layerfs_egress_connections_allowed_total", "counter", "Connections the egress carried.", float64(m.net.connsAllowed.Load()))
	pw.metric("layerfs_egress_connections_denied_total", "counter", "Connections and packets the egress refused.", float64(m.net.connsDenied.Load()))
	pw.metric("layerfs_egress_bytes_out_total", "counter", "Bytes egress execs sent, counted at their end.", float64(m.net.bytesOut.Load()))
	pw.metric("layerfs_egress_bytes_in_total", "counter", "Bytes egress execs received, counted at their end.", float64(m.net.bytesIn.Load()))
	paths := map[string]int{}
	for _, w := range e.liveWorkspaces() {
		w.mu.RLock()
		if w.mnt != nil {
			paths[w.opts.DataPath]++
		}
		w.mu.RUnlock()
	}
	pw.header("layerfs_workspaces_by_data_path", "gauge", "Live workspaces by data path.")
	for _, p := range []string{wire.DataPathFUSE, wire.DataPathOverlay} {
		pw.sample("layerfs_workspaces_by_data_path", fmt.Sprintf(`data_path=%q`, p), float64(paths[p]))
	}

	var all fusefs.Stats
	for _, w := range e.liveWorkspaces() {
		w.mu.RLock()
		if w.mnt != nil {
			s := w.mnt.Stats()
			for i := range s.Count {
				all.Count[i] += s.Count[i]
				all.Ns[i] += s.Ns[i]
			}
		}
		w.mu.RUnlock()
	}
	ops := all.ByOp()
	sort.Slice(ops, func(i, j int) bool { return ops[i].Op < ops[j].Op })
	pw.header("layerfs_fuse_requests_total", "counter", "FUSE requests served by the live mounts, by opcode.")
	for _, o := range ops {
		pw.sample("layerfs_fuse_requests_total", fmt.Sprintf(`op=%q`, o.Op.String()), float64(o.Count))
	}
	pw.header("layerfs_fuse_service_seconds_total", "counter", "Daemon time serving FUSE requests of the live mounts, by opcode.")
	for _, o := range ops {
		pw.sample("layerfs_fuse_service_seconds_total", fmt.Sprintf(`op=%q`, o.Op.String()), o.Time.Seconds())
	}

	c := e.db.Counters()
	pw.metric("layerfs_sql_transactions_total", "counter", "SQLite transactions.", float64(c.Transactions))
	pw.metric("layerfs_sql_statements_total", "counter", "SQLite statements.", float64(c.Statements))
	pw.metric("layerfs_sql_rows_total", "counter", "SQLite rows read or changed.", float64(c.Rows))
	pw.metric("layerfs_sql_transaction_seconds_total", "counter", "Time inside SQLite transactions.", c.TxTime.Seconds())
	pw.metric("layerfs_pack_written_bytes_total", "counter", "Chunk payload bytes appended to packs.", float64(c.PackBytesWritten))
	pw.metric("layerfs_pack_read_bytes_total", "counter", "Chunk payload bytes read from packs.", float64(c.PackBytesRead))
	return pw.err
}

// promWriter writes the Prometheus text exposition format.
type promWriter struct {
	w   io.Writer
	err error
}

func (p *promWriter) header(name, typ, help string) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
}

func (p *promWriter) sample(name, labels string, v float64) {
	if p.err != nil {
		return
	}
	if labels != "" {
		name += "{" + labels + "}"
	}
	_, p.err = fmt.Fprintf(p.w, "%s %g\n", name, v)
}

func (p *promWriter) metric(name, typ, help string, v float64) {
	p.header(name, typ, help)
	p.sample(name, "", v)
}
