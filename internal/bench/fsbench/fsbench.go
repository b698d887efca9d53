package fsbench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/bench"
	"layerfs.dev/layerfs/internal/cells"
	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/hostview"
	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/stats"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/verifier"
)

// Config says where and how much to run.
type Config struct {
	// Dir is scratch space on the file system under test: both arms, the
	// Stores and the upper layers live in a directory made under it and
	// removed at the end.
	Dir     string
	Samples int          // per arm and cell; default 5
	Cells   []cells.Cell // default cells.Twelve()
	Logger  *slog.Logger // nil is silent
	Mount   fusefs.Options
	// DataPath is the LayerFS arm: "fuse" (default), "overlay" (kernel
	// overlayfs over the commit's metadata image and, as a data-only layer,
	// the FUSE view of the commit), "overlay-nometa" (the FUSE view as the
	// whole lower, as before the metadata image), "floor" (kernel
	// overlayfs over a plain-directory checkout of the commit: what the
	// kernel itself costs) or "view" (the mount path of a workspace whose
	// sandboxes run in a user namespace: the overlay over id-mapped layers
	// in the workspace's directory, and its host view for root at the
	// mount path, package hostview: what a host-side tool pays).
	DataPath string
	// Fsync mounts the overlay arms as a workspace of durability "fsync"
	// (synced copy-ups, fsync honoured); by default they are of
	// durability "commit", as the daemon's workspaces (kernel overlayfs's
	// volatile option).
	Fsync bool
	Seed  uint64 // order of the runs
	// Progress, when set, is told about each sample as it starts (done of
	// total) and once more at the end.
	Progress func(done, total int, what string)
}

// Result is one cell's measurements.
type Result struct {
	Cell     string
	Native   []time.Duration
	LayerFS  []time.Duration
	Stats    []fusefs.Stats // per LayerFS sample: the timed body's requests
	DataPath string
	// VerifyErr is the first verification failure of any timed run
	// ("layerfs: f17: missing"); "" when every run verified.
	VerifyErr string
	// Ineligible is why the cell could not run here (its probe failed);
	// such a cell has no samples.
	Ineligible string
}

// Verified reports whether every timed run of both arms left the exact
// end state.
func (r *Result) Verified() bool { return r.VerifyErr == "" && r.Ineligible == "" }

// Ratio is median LayerFS over median native.
func (r *Result) Ratio() float64 {
	n := stats.MedianDuration(r.Native)
	if n == 0 {
		return 0
	}
	return float64(stats.MedianDuration(r.LayerFS)) / float64(n)
}

// medianStats is the stats of the sample with the median request count.
func (r *Result) medianStats() fusefs.Stats {
	if len(r.Stats) == 0 {
		return fusefs.Stats{}
	}
	s := slices.Clone(r.Stats)
	slices.SortFunc(s, func(a, b fusefs.Stats) int { return cmp.Compare(a.Requests(), b.Requests()) })
	return s[len(s)/2]
}

// Report is a whole run.
type Report struct {
	Dir     string
	FS      string // bench.DescribeFS of Dir
	Samples int
	Results []*Result
}

// Run measures the cells. A body that fails (non-zero exit) ends the run
// with an error; an end state that does not verify is reported in the
// cell's result.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Samples <= 0 {
		cfg.Samples = 5
	}
	if len(cfg.Cells) == 0 {
		cfg.Cells = cells.Twelve()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(cfg.Dir, "fsbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	// An empty HOME, so that no user's git configuration reaches C12.
	home := filepath.Join(work, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C")
	rep := &Report{Dir: cfg.Dir, FS: bench.DescribeFS(cfg.Dir), Samples: cfg.Samples}

	type job struct {
		r      *Result
		cell   cells.Cell
		native bool
		index  int
	}
	var jobs []job
	bases := map[string]string{} // base name -> directory holding it
	for _, c := range cfg.Cells {
		r := &Result{Cell: c.ID}
		rep.Results = append(rep.Results, r)
		if err := cells.Eligible(ctx, shell{dir: work, env: env}, c); err != nil {
			if !errors.Is(err, cells.ErrIneligible) {
				return nil, err
			}
			// Keep the probe's reason, without the error's prefixes.
			_, r.Ineligible, _ = strings.Cut(err.Error(), cells.ErrIneligible.Error()+": ")
			continue
		}
		if c.Base.Write != nil && bases[c.Base.Name] == "" {
			d := filepath.Join(work, "bases", c.Base.Name)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
			if err := c.WriteBase(ctx, d); err != nil {
				return nil, err
			}
			bases[c.Base.Name] = d
		}
		for i := range cfg.Samples {
			jobs = append(jobs, job{r, c, true, i}, job{r, c, false, i})
		}
	}
	rnd := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed+1))
	rnd.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	for i, j := range jobs {
		arm := "layerfs"
		if j.native {
			arm = "native"
		}
		if cfg.Progress != nil {
			cfg.Progress(i, len(jobs), fmt.Sprintf("%s %s #%d", j.cell.ID, arm, j.index+1))
		}
		s := &sample{cfg: cfg, env: env, cell: j.cell, r: j.r, dir: filepath.Join(work, fmt.Sprint("run", i)), base: bases[j.cell.Base.Name]}
		var err error
		if j.native {
			err = s.native(ctx)
		} else {
			err = s.layerfs(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", j.cell.ID, arm, err)
		}
		cfg.Logger.Info("sample", "cell", j.cell.ID, "arm", arm, "done", i+1, "of", len(jobs))
		if err := os.RemoveAll(s.dir); err != nil {
			return nil, err
		}
	}
	if cfg.Progress != nil {
		cfg.Progress(len(jobs), len(jobs), "done")
	}
	return rep, nil
}

// shell runs bash bodies in dir. It is the verifier's Runner (and the
// cells' probe runner) for a sandbox-less run: the process starts in / and
// cds into dir, which may be a mount this process serves.
type shell struct {
	dir string
	env []string
}

func (s shell) run(ctx context.Context, body string) (stdout, stderr string, code int, err error) {
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", "cd "+shellQuote(s.dir)+" || exit 1\n"+body)
	cmd.Dir = "/"
	cmd.Env = s.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), errb.String(), exit.ExitCode(), nil
	}
	return out.String(), errb.String(), 0, err
}

// Run implements verifier.Runner and cells.Runner.
func (s shell) Run(ctx context.Context, body string) (string, int, error) {
	out, _, code, err := s.run(ctx, body)
	return out, code, err
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// timeBody runs the cell's body as CELLS.md wraps it and returns the time
// measured inside the shell.
func (s shell) timeBody(ctx context.Context, body string) (time.Duration, error) {
	script := "__t0=$(date +%s%N)\n" + cells.Wrap(body) + "\n__rc=$?\n__t1=$(date +%s%N)\necho $((__t1-__t0))\nexit $__rc"
	out, stderr, code, err := s.run(ctx, script)
	if err != nil {
		return 0, err
	}
	if code != 0 {
		return 0, fmt.Errorf("body exited %d: %s", code, strings.TrimSpace(stderr))
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("body timing: %q", out)
	}
	return time.Duration(ns), nil
}

// sample is one run of a cell on one arm: a warm-up and a timed run.
type sample struct {
	cfg  Config
	env  []string
	cell cells.Cell
	r    *Result
	dir  string
	base string // the written base, "" for the empty one
}

// verify checks the end state in dir and records the first failure.
func (s *sample) verify(ctx context.Context, arm, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	verr := verifier.Verify(ctx, root.FS(), s.cell, shell{dir: dir, env: s.env})
	if err := root.Close(); err != nil {
		return err
	}
	if verr != nil && !errors.Is(verr, verifier.ErrMismatch) {
		return fmt.Errorf("verify: %w", verr)
	}
	if verr != nil && s.r.VerifyErr == "" {
		s.r.VerifyErr = arm + ": " + firstProblem(verr)
	}
	return nil
}

// firstProblem shortens the verifier's list of problems to its first.
func firstProblem(err error) string {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		return lines[0]
	}
	return fmt.Sprintf("%s (and %d more)", lines[0], len(lines)-1)
}

func (s *sample) native(ctx context.Context) error {
	for _, phase := range []string{"warm", "timed"} {
		d := filepath.Join(s.dir, phase)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := s.cell.WriteBase(ctx, d); err != nil {
			return err
		}
		syscall.Sync()
		sh := shell{dir: d, env: s.env}
		t, err := sh.timeBody(ctx, s.cell.Body)
		if err != nil {
			return err
		}
		if phase == "timed" {
			s.r.Native = append(s.r.Native, t)
			if err := s.verify(ctx, "native", d); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *sample) layerfs(ctx context.Context) (err error) {
	db, err := store.Init(ctx, filepath.Join(s.dir, "store"), store.Options{Logger: s.cfg.Logger})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); err == nil {
			err = cerr
		}
	}()
	root := store.ZeroID
	if s.base != "" {
		b, err := db.NewBatch(ctx)
		if err != nil {
			return err
		}
		root, _, err = commit.CaptureDir(ctx, b, db, s.base, nil)
		if err == nil {
			err = b.Flush(ctx)
		}
		b.Abort()
		if err != nil {
			return fmt.Errorf("commit the base: %w", err)
		}
	}
	for i, phase := range []string{"warm", "timed"} {
		if err := s.mountAndRun(ctx, db, root, i, phase); err != nil {
			return err
		}
	}
	return nil
}

// mountAndRun mounts a fresh workspace of root, runs the body (timed and
// verified in the timed phase) and unmounts it.
func (s *sample) mountAndRun(ctx context.Context, db *store.DB, root store.ID, i int, phase string) (err error) {
	ws := filepath.Join(db.WorkspacesDir(), fmt.Sprint("w", i))
	mnt := filepath.Join(s.dir, "mnt-"+phase)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return err
	}
	m, err := s.mount(ctx, db, root, ws, mnt)
	if err != nil {
		return err
	}
	defer func() {
		if uerr := m.Unmount(context.WithoutCancel(ctx)); err == nil && uerr != nil {
			err = fmt.Errorf("unmount: %w", uerr)
		}
	}()
	syscall.Sync()
	sh := shell{dir: mnt, env: s.env}
	before := m.Stats()
	t, err := sh.timeBody(ctx, s.cell.Body)
	after := m.Stats()
	if err != nil || phase != "timed" {
		return err
	}
	s.r.LayerFS = append(s.r.LayerFS, t)
	s.r.Stats = append(s.r.Stats, after.Sub(before))
	s.r.DataPath = m.DataPath()
	return s.verify(ctx, "layerfs", mnt)
}

// mounted is the LayerFS arm's mount on any data path.
type mounted interface {
	Stats() fusefs.Stats
	DataPath() string
	Unmount(ctx context.Context) error
}

// mount mounts a fresh workspace of root at mnt, its directories under ws,
// on the configured data path.
func (s *sample) mount(ctx context.Context, db *store.DB, root store.ID, ws, mnt string) (mounted, error) {
	switch s.cfg.DataPath {
	case "view":
		return mountView(ctx, db, root, ws, mnt, !s.cfg.Fsync, s.cfg.Logger)
	case "overlay", "overlay-nometa":
		return kerneloverlay.New(ctx, kerneloverlay.Config{Lower: db, Root: root, Dir: ws, Target: mnt,
			Committed: overlay.EmptyUpper(), Logger: s.cfg.Logger, MetaCache: db.CacheDir(), NoMeta: s.cfg.DataPath == "overlay-nometa",
			Volatile: !s.cfg.Fsync})
	case "floor":
		return mountFloor(ctx, db, root, ws, mnt, !s.cfg.Fsync)
	case "", "fuse":
	default:
		return nil, fmt.Errorf("data path %q: want fuse, overlay, overlay-nometa, floor or view", s.cfg.DataPath)
	}
	ov, err := overlay.Open(ctx, overlay.Config{Lower: db, Root: root, UpperDir: filepath.Join(ws, "upper"), Logger: s.cfg.Logger})
	if err != nil {
		return nil, err
	}
	mo := s.cfg.Mount
	mo.Logger = s.cfg.Logger
	return fusefs.Mount(ctx, mnt, ov, mo)
}

// viewBase is where the view arm's sandbox ids start on the host, as the
// local platform's by default.
const viewBase = 2_000_000_000

// viewed is the view arm's mount: the overlay, and the host view of it.
type viewed struct {
	*kerneloverlay.Mount
	view    *hostview.Server
	release func() // the user namespace's
}

func (v *viewed) DataPath() string {
	return "host view: " + v.view.DataPath() + "; " + v.Mount.DataPath()
}

func (v *viewed) Unmount(ctx context.Context) error {
	defer v.release()
	return errors.Join(v.view.Unmount(ctx), v.Mount.Unmount(ctx))
}

// mountView mounts the overlay over layers id-mapped like a sandbox's in
// ws/data and root's host view of it at mnt, as the daemon serves a
// workspace's mount path.
func mountView(ctx context.Context, db *store.DB, root store.ID, ws, mnt string, volatile bool, log *slog.Logger) (*viewed, error) {
	m, release, err := kerneloverlay.HoldIDMap(viewBase, 65536)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(ws, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		release()
		return nil, err
	}
	ov, err := kerneloverlay.New(ctx, kerneloverlay.Config{Lower: db, Root: root, Dir: ws, Target: data,
		Committed: overlay.EmptyUpper(), Logger: log, MetaCache: db.CacheDir(), Volatile: volatile, IDMap: m})
	if err != nil {
		release()
		return nil, err
	}
	fd, err := unix.Open(data, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		var v *hostview.Server
		v, err = hostview.Mount(ctx, mnt, fd, hostview.Options{Range: hostview.Range{Base: viewBase, Size: 65536}, Upper: ov.UpperDir(), Logger: log})
		if err == nil {
			return &viewed{Mount: ov, view: v, release: release}, nil
		}
	}
	err = errors.Join(err, ov.Unmount(context.WithoutCancel(ctx)))
	release()
	return nil, err
}

// floor is kernel overlayfs over a plain directory holding the commit.
type floor struct{ mnt string }

func mountFloor(ctx context.Context, db *store.DB, root store.ID, ws, mnt string, volatile bool) (*floor, error) {
	lower := filepath.Join(ws, "lower")
	if root.IsZero() {
		if err := os.MkdirAll(lower, 0o755); err != nil {
			return nil, err
		}
	} else if _, err := commit.Checkout(ctx, db, root, lower, nil); err != nil {
		return nil, fmt.Errorf("floor: check out the base: %w", err)
	}
	for _, d := range []string{"upper", "work"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := kerneloverlay.MountDirs(lower, filepath.Join(ws, "upper"), filepath.Join(ws, "work"), mnt, volatile); err != nil {
		return nil, err
	}
	return &floor{mnt: mnt}, nil
}

func (f *floor) Stats() fusefs.Stats { return fusefs.Stats{} }
func (f *floor) DataPath() string    { return "floor: kernel overlayfs over a plain directory" }
func (f *floor) Unmount(context.Context) error {
	if err := unix.Unmount(f.mnt, 0); err != nil {
		return unix.Unmount(f.mnt, unix.MNT_DETACH)
	}
	return nil
}

// Summary is one cell's row of the table, also its JSON form.
type Summary struct {
	Cell        string    `json:"cell"`
	NativeMs    float64   `json:"native_ms"`
	NativeMin   float64   `json:"native_min_ms"`
	NativeMax   float64   `json:"native_max_ms"`
	LayerFSMs   float64   `json:"layerfs_ms"`
	LayerFSMin  float64   `json:"layerfs_min_ms"`
	LayerFSMax  float64   `json:"layerfs_max_ms"`
	Ratio       float64   `json:"ratio"`
	Requests    uint64    `json:"requests"`
	ByOp        []OpCount `json:"requests_by_op"`
	USMean      float64   `json:"us_per_request_mean"`
	USMedian    float64   `json:"us_per_request_median"`
	DataPath    string    `json:"data_path"`
	Verified    bool      `json:"verified"`
	VerifyError string    `json:"verify_error,omitempty"`
	Ineligible  string    `json:"ineligible,omitempty"`
}

// OpCount is one opcode's requests in the median sample.
type OpCount struct {
	Op    string `json:"op"`
	Count uint64 `json:"count"`
}

// Totals are the figures over all cells.
type Totals struct {
	GeoMeanRatio float64 `json:"geomean_ratio"`
	WorstRatio   float64 `json:"worst_ratio"`
	// USMedian is the median daemon service time over the requests of
	// every cell's median sample.
	USMedian float64 `json:"us_per_request_median"`
}

// summaryJSON is the report's JSON form.
type summaryJSON struct {
	Dir        string    `json:"dir"`
	FileSystem string    `json:"file_system"`
	Samples    int       `json:"samples"`
	Cells      []Summary `json:"cells"`
	Totals     Totals    `json:"totals"`
}

// Summarize computes the table's rows and totals.
func (rep *Report) Summarize() ([]Summary, Totals) {
	var rows []Summary
	var tot Totals
	var all fusefs.Stats
	var ratios []float64
	for _, r := range rep.Results {
		st := r.medianStats()
		row := Summary{
			Cell:     r.Cell,
			NativeMs: ms(stats.MedianDuration(r.Native)), NativeMin: ms(minD(r.Native)), NativeMax: ms(maxD(r.Native)),
			LayerFSMs: ms(stats.MedianDuration(r.LayerFS)), LayerFSMin: ms(minD(r.LayerFS)), LayerFSMax: ms(maxD(r.LayerFS)),
			Ratio: r.Ratio(), Requests: st.Requests(), DataPath: r.DataPath,
			USMedian: us(st.Quantile(0.5)), Verified: r.Verified(), VerifyError: r.VerifyErr,
			Ineligible: r.Ineligible,
		}
		for _, oc := range st.ByOp() {
			row.ByOp = append(row.ByOp, OpCount{oc.Op.String(), oc.Count})
		}
		if st.Requests() > 0 {
			row.USMean = us(st.ServiceTime()) / float64(st.Requests())
		}
		for i := range all.Count {
			all.Count[i] += st.Count[i]
			all.Ns[i] += st.Ns[i]
		}
		for i := range all.Hist {
			all.Hist[i] += st.Hist[i]
		}
		if row.Ratio > 0 {
			ratios = append(ratios, row.Ratio)
			tot.WorstRatio = max(tot.WorstRatio, row.Ratio)
		}
		rows = append(rows, row)
	}
	if len(ratios) > 0 {
		tot.GeoMeanRatio = stats.GeoMean(ratios)
	}
	tot.USMedian = us(all.Quantile(0.5))
	return rows, tot
}

// JSON is the report as a value for encoding/json: the rows and totals of
// the table, with the file system and sample count.
func (rep *Report) JSON() any {
	rows, tot := rep.Summarize()
	return summaryJSON{Dir: rep.Dir, FileSystem: rep.FS, Samples: rep.Samples, Cells: rows, Totals: tot}
}

// Table writes the report as a Markdown table.
func (rep *Report) Table(w io.Writer) error {
	rows, tot := rep.Summarize()
	var b strings.Builder
	fmt.Fprintf(&b, "file system: %s; median [min-max] of %d samples per arm; µs/req is the daemon's service time per request\n\n", rep.FS, rep.Samples)
	b.WriteString("| cell | native ms | layerfs ms | ratio | requests | µs/req mean | µs/req median | data path | verified | requests by opcode |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.Ineligible != "" {
			fmt.Fprintf(&b, "| %s | ineligible: %s | | | | | | | | |\n", r.Cell, r.Ineligible)
			continue
		}
		ver := "yes"
		if !r.Verified {
			ver = "NO: " + r.VerifyError
		}
		var ops []string
		for _, oc := range r.ByOp {
			ops = append(ops, fmt.Sprintf("%s %d", oc.Op, oc.Count))
		}
		fmt.Fprintf(&b, "| %s | %.1f [%.1f-%.1f] | %.1f [%.1f-%.1f] | %.2fx | %d | %.1f | %.1f | %s | %s | %s |\n",
			r.Cell, r.NativeMs, r.NativeMin, r.NativeMax, r.LayerFSMs, r.LayerFSMin, r.LayerFSMax,
			r.Ratio, r.Requests, r.USMean, r.USMedian, r.DataPath, ver, strings.Join(ops, ", "))
	}
	if tot.GeoMeanRatio > 0 {
		fmt.Fprintf(&b, "\ngeometric mean of ratios %.2fx, worst %.2fx; median daemon service time over all requests %.1f µs\n",
			tot.GeoMeanRatio, tot.WorstRatio, tot.USMedian)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func minD(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Min(d)
}

func maxD(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}
