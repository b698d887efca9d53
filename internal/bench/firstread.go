package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
)

// The first-read figures (issue 31): a tree imported, then read whole by
// the first workspace opened on it, with the page cache warm from the
// import and with it dropped, against a native read of the same tree
// (checked out into a plain directory read through the same sandbox) with
// the page cache dropped and warm; then the new contents of a commit of
// many changed files read by a new workspace the same way. Each sample
// runs every mode (DaemonMode: the daemon's own, and the lazy one, which
// readies nothing ahead) on fresh Stores of its own, so that one run
// gives the figures before and after side by side.

// FirstReadConfig is one run of the first-read figures.
type FirstReadConfig struct {
	// Tree is the directory imported; "" writes a tree of Files files
	// (100 a directory, 1-8 KiB each) under WorkDir.
	Tree    string
	Files   int // default 10,000
	Changes int // files changed by the commit read afterwards; default 1,000
	Samples int // default 3
	Modes   []DaemonMode
	WorkDir string
	// NewPlatform makes the sandbox platform (local).
	NewPlatform func(name string) (platforms.Platform, error)
	Logger      *slog.Logger
	Progress    func(what string)
}

// FirstReadRow is one figure in each mode, the medians of the samples.
type FirstReadRow struct {
	Name   string                  `json:"name"`
	Unit   string                  `json:"unit"`
	Target string                  `json:"target,omitempty"`
	Modes  map[string]report.Stats `json:"modes"`
}

// FirstReadReport is a run's figures.
type FirstReadReport struct {
	CPUs   int            `json:"cpus"`
	Load   string         `json:"load"` // /proc/loadavg at the start
	LoadAt string         `json:"load_end"`
	Tree   string         `json:"tree"`
	Files  int            `json:"files"`
	Bytes  int64          `json:"bytes"`
	FS     string         `json:"filesystem"`
	Modes  []DaemonMode   `json:"modes"`
	Rows   []FirstReadRow `json:"rows"`
}

// The rows of a FirstReadReport, by name.
const (
	rowImport      = "import of the tree"
	rowOpen        = "first open of a workspace on it"
	rowFirstWarm   = "first read, right after the import (page cache warm)"
	rowSecond      = "read by a second workspace"
	rowFirstCold   = "first read by a new workspace, page cache dropped"
	rowRestarted   = "the same after a daemon restart (every content checked)"
	rowRestartRat  = "after a restart / before"
	rowNativeCold  = "native read, page cache dropped"
	rowNativeWarm  = "native read, warm"
	rowColdRatio   = "first read, page cache dropped / native"
	rowWarmRatio   = "first read right after the import / native warm"
	rowCommit      = "commit of the changed files"
	rowChangedCold = "their first read by a new workspace, page cache dropped"
	rowChangedNat  = "native read of the changed files, page cache dropped"
	rowChangedRat  = "their first read / native"
	rowCache       = "the Store's cache on disk, for the tree"
	rowPacks       = "the Store's packs, for the tree"
)

// readAll is the read of every file of a workspace's tree, as a user
// would run it.
const readAll = "find . -type f -print0 | xargs -0 cat > /dev/null"

// readFirst reads the first n files of the tree in name order: the files
// changeFirst changed.
func readFirst(n int) string {
	return fmt.Sprintf("find . -type f | sort | awk 'NR<=%d' | tr '\\n' '\\0' | xargs -0 cat > /dev/null", n)
}

// changeFirst appends a line to the first n files in name order.
func changeFirst(n int) string {
	return fmt.Sprintf("find . -type f | sort | awk 'NR<=%d' | while IFS= read -r f; do echo changed >> \"$f\"; done", n)
}

// RunFirstRead measures the first-read figures.
func RunFirstRead(ctx context.Context, cfg FirstReadConfig) (*FirstReadReport, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("bench firstread: dropping the page cache needs root")
	}
	if cfg.Files <= 0 {
		cfg.Files = 10_000
	}
	if cfg.Changes <= 0 {
		cfg.Changes = 1_000
	}
	if cfg.Samples <= 0 {
		cfg.Samples = 3
	}
	if len(cfg.Modes) == 0 {
		cfg.Modes = []DaemonMode{Ready, Lazy}
	}
	log, say := runOutputs(cfg.Logger, cfg.Progress)
	rep := &FirstReadReport{CPUs: runtime.NumCPU(), Load: report.LoadAverage(), Modes: cfg.Modes, FS: DescribeFS(cfg.WorkDir)}
	tree := cfg.Tree
	if tree == "" {
		tree = filepath.Join(cfg.WorkDir, "tree")
		os.RemoveAll(tree)
		dirs := max(cfg.Files/FilesPerLargeDir, 1)
		say(fmt.Sprintf("writing a tree of %s files", thousands(dirs*FilesPerLargeDir)))
		if err := writeTree(tree, dirs, FilesPerLargeDir); err != nil {
			return nil, err
		}
		defer os.RemoveAll(tree)
	}
	var err error
	if rep.Files, rep.Bytes, err = countTree(tree); err != nil {
		return nil, err
	}
	rep.Tree = tree
	t, err := prepare(ctx, Config{NewPlatform: cfg.NewPlatform}, "local", log)
	if err != nil {
		return nil, err
	}
	defer t.p.Down(context.WithoutCancel(ctx))
	r := &firstRead{ctx: ctx, cfg: cfg, tree: tree, plats: []platforms.Platform{t.p}, log: log, say: say,
		values: map[string]map[DaemonMode][]float64{}}
	for i := range cfg.Samples {
		// The modes in turn, the first of one sample last in the next.
		order := slices.Clone(cfg.Modes)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			say(fmt.Sprintf("sample %d of %d, %s", i+1, cfg.Samples, m))
			if err := r.sample(m, i); err != nil {
				return nil, fmt.Errorf("sample %d, %s: %w", i+1, m, err)
			}
		}
	}
	rep.LoadAt = report.LoadAverage()
	rep.Rows = r.rows()
	return rep, nil
}

// firstRead is a run of the first-read figures.
type firstRead struct {
	ctx    context.Context
	cfg    FirstReadConfig
	tree   string
	plats  []platforms.Platform
	log    *slog.Logger
	say    func(string)
	values map[string]map[DaemonMode][]float64 // row -> mode -> samples
}

func (r *firstRead) add(row string, m DaemonMode, v float64) {
	if r.values[row] == nil {
		r.values[row] = map[DaemonMode][]float64{}
	}
	r.values[row][m] = append(r.values[row][m], v)
}

// sample measures every figure once in mode m, on two fresh Stores: one
// whose first workspace reads right after the import, one whose first
// workspace reads after the page cache is dropped.
func (r *firstRead) sample(m DaemonMode, i int) error {
	if err := r.afterImport(m, i); err != nil {
		return err
	}
	return r.coldFirst(m, i)
}

// daemon starts a fresh daemon in mode m and returns its client and its
// release.
func (r *firstRead) daemon(m DaemonMode, name string) (*client.Client, func(), error) {
	dir := filepath.Join(r.cfg.WorkDir, name)
	os.RemoveAll(dir)
	d, err := StartDaemonIn(r.ctx, m, dir, "", r.plats, r.log)
	if err != nil {
		return nil, nil, err
	}
	return d.Client, func() {
		d.Close(context.WithoutCancel(r.ctx))
		os.RemoveAll(dir)
	}, nil
}

// afterImport: the import, the first workspace's read right after it, a
// second workspace's, the commit of changed files and their first read
// with the page cache dropped, and the native reads of the same.
func (r *firstRead) afterImport(m DaemonMode, i int) error {
	ctx := r.ctx
	c, release, err := r.daemon(m, fmt.Sprintf("warm-%s-%d", m, i))
	if err != nil {
		return err
	}
	defer release()
	t0 := time.Now()
	if _, err := c.CreateProject(ctx, wire.CreateProject{Name: "tree", FromPath: r.tree}); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	r.add(rowImport, m, time.Since(t0).Seconds())
	t0 = time.Now()
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "tree", Branch: "main", Platform: "local"})
	if err != nil {
		return err
	}
	r.add(rowOpen, m, ms(time.Since(t0)))
	if err := r.timedRead(ws, readAll, rowFirstWarm, m); err != nil {
		return err
	}
	if err := ws.End(ctx, client.EndOptions{Discard: true}); err != nil {
		return err
	}

	ws, err = c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "tree", Branch: "main", Platform: "local"})
	if err != nil {
		return err
	}
	defer ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	if err := r.timedRead(ws, readAll, rowSecond, m); err != nil {
		return err
	}
	// The disk the tree takes, its reads done (and the cache's fill).
	if st, err := c.Stats(ctx); err == nil {
		r.add(rowCache, m, float64(st.CacheBytes)/(1<<20))
		r.add(rowPacks, m, float64(st.PackBytes)/(1<<20))
	}
	if err := execOK(ctx, ws, changeFirst(r.cfg.Changes)); err != nil {
		return fmt.Errorf("change files: %w", err)
	}
	t0 = time.Now()
	cr, err := ws.Commit(ctx, "changed files")
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	r.add(rowCommit, m, time.Since(t0).Seconds())
	if err := dropCaches(); err != nil {
		return err
	}
	fresh, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "tree", Branch: "main", At: cr.Commit, Platform: "local"})
	if err != nil {
		return err
	}
	defer fresh.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	if err := r.timedRead(fresh, readFirst(r.cfg.Changes), rowChangedCold, m); err != nil {
		return err
	}
	return r.native(c, cr.Commit, m)
}

// native checks the import out into a native workspace and reads it with
// the page cache dropped and again warm; then the changed files of commit
// the same way.
func (r *firstRead) native(c *client.Client, changed string, m DaemonMode) error {
	ctx := r.ctx
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Native: true, Platform: "local"})
	if err != nil {
		return err
	}
	defer ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	if _, err := c.Checkout(ctx, "tree", wire.Checkout{Ref: "layer:1", Path: ws.MountPath(), Overwrite: true}); err != nil {
		return fmt.Errorf("native copy: %w", err)
	}
	if err := dropCaches(); err != nil {
		return err
	}
	if err := r.timedRead(ws, readAll, rowNativeCold, m); err != nil {
		return err
	}
	if err := r.timedRead(ws, readAll, rowNativeWarm, m); err != nil {
		return err
	}
	if _, err := c.Checkout(ctx, "tree", wire.Checkout{Ref: changed, Path: ws.MountPath(), Overwrite: true}); err != nil {
		return fmt.Errorf("native copy of the commit: %w", err)
	}
	if err := dropCaches(); err != nil {
		return err
	}
	return r.timedRead(ws, readFirst(r.cfg.Changes), rowChangedNat, m)
}

// coldFirst: a fresh Store imports the tree; with the page cache dropped,
// its first workspace reads it. Then a daemon started again on the Store,
// which trusts none of its cache's files yet (docs/security.md), reads
// it the same way.
func (r *firstRead) coldFirst(m DaemonMode, i int) error {
	ctx := r.ctx
	dir := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("cold-%s-%d", m, i))
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	for _, row := range []string{rowFirstCold, rowRestarted} {
		d, err := StartDaemonIn(ctx, m, dir, "", r.plats, r.log)
		if err != nil {
			return err
		}
		err = r.coldRead(d.Client, row, m)
		if cerr := d.Close(context.WithoutCancel(ctx)); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// coldRead reads the tree in a new workspace of c's daemon, imported
// first if the Store has no project yet, with the page cache dropped.
func (r *firstRead) coldRead(c *client.Client, row string, m DaemonMode) error {
	ctx := r.ctx
	if row == rowFirstCold {
		if _, err := c.CreateProject(ctx, wire.CreateProject{Name: "tree", FromPath: r.tree}); err != nil {
			return fmt.Errorf("import: %w", err)
		}
	}
	if err := dropCaches(); err != nil {
		return err
	}
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "tree", Branch: "main", Platform: "local"})
	if err != nil {
		return err
	}
	defer ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	return r.timedRead(ws, readAll, row, m)
}

// timedRead runs body in ws and adds its time by the sandbox's clock (no
// exec overhead) to row.
func (r *firstRead) timedRead(ws *client.Workspace, body, row string, m DaemonMode) error {
	d, err := timedExecOf(r.ctx, ws, body)
	if err != nil {
		return fmt.Errorf("%s: %w", row, err)
	}
	r.add(row, m, d.Seconds())
	return nil
}

// timedExecOf runs body in ws between two readings of the sandbox's clock.
func timedExecOf(ctx context.Context, ws *client.Workspace, body string) (time.Duration, error) {
	res, err := ws.Exec(ctx, timedBody(body), client.ExecOptions{Timeout: 10 * time.Minute})
	if err != nil {
		return 0, err
	}
	if res.ExitCode != 0 {
		return 0, fmt.Errorf("exit %d: %s", res.ExitCode, tail(res.Stderr))
	}
	return commandTime(res.Stderr)
}

// exec runs body in ws and fails unless it exits 0.
func execOK(ctx context.Context, ws *client.Workspace, body string) error {
	res, err := ws.Exec(ctx, body, client.ExecOptions{Timeout: 10 * time.Minute})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("exit %d: %s", res.ExitCode, tail(res.Stderr))
	}
	return nil
}

// dropCaches writes the dirty pages out and drops the page cache, dentries
// and inodes (needs root).
func dropCaches() error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200); err != nil {
		return fmt.Errorf("drop the page cache: %w", err)
	}
	return nil
}

// countTree counts the regular files under dir and their bytes.
func countTree(dir string) (files int, bytes int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files++
		bytes += fi.Size()
		return nil
	})
	return files, bytes, err
}

// rows makes the report's rows: the medians of each figure per mode, and
// the ratios of each sample's pair.
func (r *firstRead) rows() []FirstReadRow {
	type def struct {
		name, unit, target string
		num, den           string // a ratio of two rows' samples
	}
	files := thousands(r.cfg.Changes)
	defs := []def{
		{name: rowImport, unit: "s"}, {name: rowOpen, unit: "ms", target: "<= 10 ms"},
		{name: rowFirstWarm, unit: "s"}, {name: rowSecond, unit: "s"},
		{name: rowFirstCold, unit: "s"}, {name: rowRestarted, unit: "s"},
		{name: rowRestartRat, unit: "x", num: rowRestarted, den: rowFirstCold},
		{name: rowNativeCold, unit: "s"}, {name: rowNativeWarm, unit: "s"},
		{name: rowColdRatio, unit: "x", target: "<= 1.5x", num: rowFirstCold, den: rowNativeCold},
		{name: rowWarmRatio, unit: "x", num: rowFirstWarm, den: rowNativeWarm},
		{name: rowCommit, unit: "s"}, {name: rowChangedCold, unit: "s"}, {name: rowChangedNat, unit: "s"},
		{name: rowChangedRat, unit: "x", target: "<= 1.5x", num: rowChangedCold, den: rowChangedNat},
		{name: rowCache, unit: "MiB"}, {name: rowPacks, unit: "MiB"},
	}
	var out []FirstReadRow
	for _, d := range defs {
		name := strings.ReplaceAll(d.name, "the changed files", files+" changed files")
		row := FirstReadRow{Name: name, Unit: d.unit, Target: d.target, Modes: map[string]report.Stats{}}
		for _, m := range r.cfg.Modes {
			vs := r.values[d.name][m]
			if d.num != "" {
				vs = ratios(r.values[d.num][m], r.values[d.den][m])
			}
			if len(vs) > 0 {
				row.Modes[string(m)] = report.Describe(vs)
			}
		}
		out = append(out, row)
	}
	return out
}

// ratios divides a's samples by b's, sample by sample.
func ratios(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// WriteTable prints the report as a markdown table: the medians (with the
// samples' range) per mode, and each mode's median over the first's.
func (rep *FirstReadReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "%d CPUs, load average %s at the start, %s at the end; %s files (%.1f MiB) from %s, on %s\n",
		rep.CPUs, rep.Load, rep.LoadAt, thousands(rep.Files), float64(rep.Bytes)/(1<<20), rep.Tree, rep.FS)
	fmt.Fprintf(w, "\n| figure |")
	for _, m := range rep.Modes {
		fmt.Fprintf(w, " %s |", m)
	}
	ratioOf := len(rep.Modes) > 1
	if ratioOf {
		fmt.Fprintf(w, " %s / %s |", rep.Modes[0], rep.Modes[1])
	}
	fmt.Fprintf(w, " target |\n|---|%s\n", strings.Repeat("---:|", len(rep.Modes)+btoi(ratioOf)+1))
	for _, row := range rep.Rows {
		fmt.Fprintf(w, "| %s |", row.Name)
		for _, m := range rep.Modes {
			s, ok := row.Modes[string(m)]
			if !ok || s.N == 0 {
				fmt.Fprintf(w, " - |")
				continue
			}
			fmt.Fprintf(w, " %s %s", figure(s.P50), row.Unit)
			if s.N > 1 {
				fmt.Fprintf(w, " (%s-%s)", figure(s.Min), figure(s.Max))
			}
			fmt.Fprintf(w, " |")
		}
		if ratioOf {
			a, b := row.Modes[string(rep.Modes[0])], row.Modes[string(rep.Modes[1])]
			if a.N > 0 && b.N > 0 && b.P50 > 0 && (row.Unit == "s" || row.Unit == "ms") {
				fmt.Fprintf(w, " %.2fx |", a.P50/b.P50)
			} else {
				fmt.Fprintf(w, " |")
			}
		}
		if _, err := fmt.Fprintf(w, " %s |\n", row.Target); err != nil {
			return err
		}
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
