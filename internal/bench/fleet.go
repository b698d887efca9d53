package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
)

// The fleet figures (issue 15): the same operations on a host of the
// embedded Store (SQLite and local packs) and on two hosts of one shared
// Store (PostgreSQL and S3), side by side in one run. The hosts are daemons
// of this process, each over a directory of its own, so they share this
// machine's cores with each other and with the database and the S3 server
// when those run here too: the shared Store's figures add the database's
// and the bucket's round trips over loopback, not a network's distance, nor
// the relief of servers on other machines.

// FleetConfig is one run of the fleet figures.
type FleetConfig struct {
	URL     string // the shared Store's URL (postgres://...?bucket=s3://...)
	WorkDir string // the hosts' directories go here
	// Files is the size of the tree opened on the second host; default
	// 10,000 (100 directories of 100 files of 1-8 KiB).
	Files int
	// Samples per latency figure (fork, small commit); default 50.
	Samples int
	// Rounds of the open figure, each on a tree of its own that host B
	// never saw; default 1.
	Rounds int
	// Figures are the figures to measure: FigLatency, FigOpen, FigExecs;
	// default all.
	Figures []string
	// ExecFor is how long each exec-throughput round runs (default 20 s),
	// with ExecClients callers per daemon (default 2).
	ExecFor     time.Duration
	ExecClients int
	NewPlatform func(name string) (platforms.Platform, error)
	Logger      *slog.Logger
	Progress    func(what string)
}

// The hosts of the fleet figures, in the report's column order; host C
// serves in the exec throughput only.
const (
	HostEmbedded = "embedded (SQLite)"
	HostFirst    = "fleet host A"
	HostSecond   = "fleet host B"
	HostThird    = "fleet host C"
)

// The fleet figures FleetConfig.Figures names.
const (
	FigLatency = "latency" // fork and small commit
	FigOpen    = "open"    // a large tree opened and read on another host
	FigExecs   = "execs"   // aggregate exec throughput of 1, 2 and 3 daemons
)

// FleetFigures lists them all.
var FleetFigures = []string{FigLatency, FigOpen, FigExecs}

// FleetHosts lists the columns of a FleetReport.
var FleetHosts = []string{HostEmbedded, HostFirst, HostSecond}

// FleetRow is one figure on each host that measured it.
type FleetRow struct {
	Name   string                  `json:"name"`
	Unit   string                  `json:"unit"`
	Target string                  `json:"target,omitempty"`
	Hosts  map[string]report.Stats `json:"hosts"`
	Errors map[string]string       `json:"errors,omitempty"`
}

// FleetReport is a run's figures.
type FleetReport struct {
	CPUs  int        `json:"cpus"`
	Load  string     `json:"load"` // /proc/loadavg at the start
	Files int        `json:"files"`
	Rows  []FleetRow `json:"rows"`
	// Execs is the exec throughput with 1, 2 and 3 daemons.
	Execs []ExecThroughput `json:"execs,omitempty"`
}

// WriteTable prints the report as markdown tables: the figures per host
// (p50 with p95 and n), then the exec throughput.
func (r *FleetReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "%d CPUs, load average %s at the start; hosts are daemons of one process on this machine\n", r.CPUs, r.Load)
	if len(r.Rows) > 0 {
		if err := r.writeRows(w); err != nil {
			return err
		}
	}
	if len(r.Execs) > 0 {
		return writeExecTable(w, r.Execs)
	}
	return nil
}

// writeRows prints the figures measured on each host, one row each.
func (r *FleetReport) writeRows(w io.Writer) error {
	fmt.Fprintf(w, "\n| figure | %s | target |\n|---|%s---|\n", strings.Join(FleetHosts, " | "), strings.Repeat("---|", len(FleetHosts)))
	for _, row := range r.Rows {
		cells := make([]string, len(FleetHosts))
		for i, h := range FleetHosts {
			s, ok := row.Hosts[h]
			switch {
			case row.Errors[h] != "":
				cells[i] = "failed: " + row.Errors[h]
			case !ok || s.N == 0:
				cells[i] = "-"
			case s.N == 1:
				cells[i] = fmt.Sprintf("%s %s", figure(s.P50), row.Unit)
			default:
				cells[i] = fmt.Sprintf("%s %s (p95 %s, n=%d)", figure(s.P50), row.Unit, figure(s.P95), s.N)
			}
		}
		if _, err := fmt.Fprintf(w, "| %s | %s | %s |\n", row.Name, strings.Join(cells, " | "), row.Target); err != nil {
			return err
		}
	}
	return nil
}

// figure formats a median for a table: three significant digits at most,
// "-" for none.
func figure(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// fleetRun holds a run's daemons and figures.
type fleetRun struct {
	ctx     context.Context
	cfg     FleetConfig
	say     func(string)
	clients map[string]*client.Client
	rows    []*FleetRow
	// tag makes this run's project names unique in a shared Store that
	// earlier runs used.
	tag string
}

func (f *fleetRun) row(name, unit, target string) *FleetRow {
	r := &FleetRow{Name: name, Unit: unit, Target: target, Hosts: map[string]report.Stats{}, Errors: map[string]string{}}
	f.rows = append(f.rows, r)
	return r
}

func (r *FleetRow) set(host string, values []float64, err error) {
	if err != nil {
		r.Errors[host] = err.Error()
		return
	}
	r.Hosts[host] = report.Describe(values)
}

// RunFleet measures the fleet figures.
func RunFleet(ctx context.Context, cfg FleetConfig) (*FleetReport, error) {
	if cfg.URL == "" {
		return nil, errors.New("bench fleet: a shared Store's URL is required")
	}
	if cfg.Files <= 0 {
		cfg.Files = 10_000
	}
	if cfg.Samples <= 0 {
		cfg.Samples = 50
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	if len(cfg.Figures) == 0 {
		cfg.Figures = FleetFigures
	}
	for _, fig := range cfg.Figures {
		if !slices.Contains(FleetFigures, fig) {
			return nil, fmt.Errorf("bench fleet: unknown figure %q: want %s", fig, strings.Join(FleetFigures, ", "))
		}
	}
	if cfg.ExecFor <= 0 {
		cfg.ExecFor = 20 * time.Second
	}
	if cfg.ExecClients <= 0 {
		cfg.ExecClients = 2
	}
	log, say := runOutputs(cfg.Logger, cfg.Progress)
	rep := &FleetReport{CPUs: runtime.NumCPU(), Load: report.LoadAverage(), Files: cfg.Files}
	t, err := prepare(ctx, Config{NewPlatform: cfg.NewPlatform}, "local", log)
	if err != nil {
		return nil, err
	}
	defer t.p.Down(context.WithoutCancel(ctx))
	plats := []platforms.Platform{t.p}
	var tag [4]byte
	rand.Read(tag[:])
	f := &fleetRun{ctx: ctx, cfg: cfg, say: say, clients: map[string]*client.Client{}, tag: hex.EncodeToString(tag[:])}
	hosts := FleetHosts
	if slices.Contains(cfg.Figures, FigExecs) {
		hosts = append(slices.Clone(hosts), HostThird)
	}
	for _, h := range hosts {
		dir := filepath.Join(cfg.WorkDir, "fleet-"+strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(h))
		os.RemoveAll(dir)
		var d *Daemon
		if h == HostEmbedded {
			d, err = StartDaemon(ctx, dir, plats, log)
		} else {
			d, err = StartFleetDaemon(ctx, dir, cfg.URL, plats, log)
		}
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", h, err)
		}
		defer func() {
			d.Close(context.WithoutCancel(ctx))
			os.RemoveAll(dir)
		}()
		f.clients[h] = d.Client
	}
	if slices.Contains(cfg.Figures, FigLatency) {
		if err := f.latencies(); err != nil {
			return nil, err
		}
	}
	if slices.Contains(cfg.Figures, FigOpen) {
		if err := f.openElsewhere(); err != nil {
			return nil, err
		}
	}
	if slices.Contains(cfg.Figures, FigExecs) {
		if rep.Execs, err = f.execThroughput(); err != nil {
			return nil, err
		}
	}
	for _, r := range f.rows {
		rep.Rows = append(rep.Rows, *r)
	}
	return rep, nil
}

// latencies: fork (a branch from main) and a small commit (one file
// changed in a workspace), on the embedded host and on host A.
func (f *fleetRun) latencies() error {
	ctx := f.ctx
	fork := f.row("fork (branch from main)", "ms", "< 5 ms")
	commit := f.row("commit of a small change", "ms", "< 50 ms p50")
	src, err := os.MkdirTemp(f.cfg.WorkDir, "small-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := writeTree(src, 1, 10); err != nil {
		return err
	}
	for _, h := range []string{HostEmbedded, HostFirst} {
		c := f.clients[h]
		project := "small-" + f.tag
		f.say(h + ": fork and small-commit latency")
		if _, err := c.CreateProject(ctx, wire.CreateProject{Name: project, FromPath: src}); err != nil {
			return fmt.Errorf("%s: %w", h, err)
		}
		var forks []float64
		var ferr error
		for i := range f.cfg.Samples {
			t0 := time.Now()
			if _, ferr = c.ForkBranch(ctx, project, fmt.Sprintf("fork-%d", i), "main"); ferr != nil {
				break
			}
			forks = append(forks, ms(time.Since(t0)))
		}
		fork.set(h, forks, ferr)

		commits, cerr := f.smallCommits(c, project)
		commit.set(h, commits, cerr)
	}
	return nil
}

func (f *fleetRun) smallCommits(c *client.Client, project string) ([]float64, error) {
	ctx := f.ctx
	w, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: project, Branch: "main", Platform: "local"})
	if err != nil {
		return nil, err
	}
	defer w.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	var out []float64
	for i := range f.cfg.Samples {
		if err := w.WriteFile(ctx, "d000/f000", []byte(fmt.Sprintln("changed", i)), 0o644); err != nil {
			return out, err
		}
		t0 := time.Now()
		r, err := w.Commit(ctx, "one change")
		if err != nil {
			return out, err
		}
		if r.Result != wire.Created {
			return out, fmt.Errorf("commit: %s", r.Result)
		}
		out = append(out, ms(time.Since(t0)))
	}
	return out, nil
}

// openElsewhere: a tree of cfg.Files files committed on host A (and, for
// comparison, on the embedded host) is opened on A and on B, which has
// never seen it: the time until the workspace is mounted, and the time to
// read every file once through the mount; then both again, warm. Each of
// cfg.Rounds rounds does it with a tree of its own; the last row is each
// round's first read over the embedded Store's in the same round.
func (f *fleetRun) openElsewhere() error {
	dirs := max(f.cfg.Files/FilesPerLargeDir, 1)
	files := thousands(dirs * FilesPerLargeDir)
	o := &openFigure{
		dirs:  dirs,
		files: files,
		imp:   f.row("import of the "+files+"-file tree", "s", ""),
		open1: f.row("workspace open (to mounted), first on the host", "ms", "B <= 50 ms"),
		read1: f.row("read every file once, first on the host", "s", ""),
		open2: f.row("workspace open again", "ms", ""),
		read2: f.row("read every file again (new workspace)", "s", ""),
		ratio: f.row("first read over the embedded Store's, same round", "x", "B <= 2x"),
		vals:  map[*FleetRow]map[string][]float64{},
	}
	for round := range f.cfg.Rounds {
		if err := f.openRound(round, o); err != nil {
			return err
		}
	}
	for r, hosts := range o.vals {
		for h, v := range hosts {
			if r.Errors[h] == "" {
				r.set(h, v, nil)
			}
		}
	}
	return nil
}

// openFigure holds the open figure's tree size, its rows and their values
// over the rounds, per host.
type openFigure struct {
	dirs                                   int    // of FilesPerLargeDir files each
	files                                  string // their count, for people
	imp, open1, read1, open2, read2, ratio *FleetRow
	vals                                   map[*FleetRow]map[string][]float64
}

func (o *openFigure) add(r *FleetRow, host string, v float64) {
	if o.vals[r] == nil {
		o.vals[r] = map[string][]float64{}
	}
	o.vals[r][host] = append(o.vals[r][host], v)
}

// openRound is one round of openElsewhere, on a tree written for it.
func (f *fleetRun) openRound(round int, o *openFigure) error {
	ctx := f.ctx
	src, err := os.MkdirTemp(f.cfg.WorkDir, "large-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := writeTree(src, o.dirs, FilesPerLargeDir); err != nil {
		return err
	}
	project := fmt.Sprintf("large-%s-%d", f.tag, round)
	for _, h := range []string{HostEmbedded, HostFirst} {
		f.say(fmt.Sprintf("round %d of %d, %s: importing the %s-file tree", round+1, f.cfg.Rounds, h, o.files))
		t0 := time.Now()
		if _, err := f.clients[h].CreateProject(ctx, wire.CreateProject{Name: project, FromPath: src}); err != nil {
			return fmt.Errorf("%s: import: %w", h, err)
		}
		o.add(o.imp, h, time.Since(t0).Seconds())
	}
	first := map[string]float64{}
	for _, h := range FleetHosts {
		for pass, figs := range [][2]*FleetRow{{o.open1, o.read1}, {o.open2, o.read2}} {
			f.say(fmt.Sprintf("round %d of %d, %s: open and read the %s-file tree (%d)", round+1, f.cfg.Rounds, h, o.files, pass+1))
			open, read, err := f.openAndRead(f.clients[h], project)
			if err != nil {
				figs[0].set(h, nil, err)
				continue
			}
			o.add(figs[0], h, open)
			o.add(figs[1], h, read)
			if pass == 0 {
				first[h] = read
			}
		}
	}
	if base := first[HostEmbedded]; base > 0 {
		for _, h := range FleetHosts[1:] {
			if v, ok := first[h]; ok {
				o.add(o.ratio, h, v/base)
			}
		}
	}
	return nil
}

// openAndRead opens a workspace on project's main, reads every file of it
// once through the mount, and ends it: milliseconds to mounted, seconds
// to read.
func (f *fleetRun) openAndRead(c *client.Client, project string) (open, read float64, err error) {
	ctx := f.ctx
	t0 := time.Now()
	w, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: project, Branch: "main", Platform: "local"})
	if err != nil {
		return 0, 0, err
	}
	defer w.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	open = ms(time.Since(t0))
	t1 := time.Now()
	n := 0
	err = filepath.WalkDir(w.MountPath(), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		n++
		_, err = os.ReadFile(p)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("read no file under %s", w.MountPath())
	}
	return open, time.Since(t1).Seconds(), nil
}

// writeTree writes dirs directories of n files each, 1-8 KiB of
// pseudo-random bytes per file (no two alike: nothing deduplicates).
func writeTree(root string, dirs, n int) error {
	buf := make([]byte, 8<<10)
	for d := range dirs {
		sub := filepath.Join(root, fmt.Sprintf("d%03d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		for i := range n {
			size := 1<<10 + (d*n+i)*7919%(7<<10)
			rand.Read(buf[:size])
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d", i)), buf[:size], 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
