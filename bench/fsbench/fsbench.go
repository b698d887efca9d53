// Package fsbench measures LayerFS workspace mounts against a plain
// directory on the same file system with the twelve cell bodies of
// CELLS.md, run directly (no sandbox): median of N samples per arm, the
// ratio, the FUSE requests each cell caused by opcode, the daemon's service
// time per request and which data path served file data.
//
// Each sample follows the cells' method: a fresh Store (with the 64 MiB
// base committed first for C09-C11), one untimed run of the body on an
// earlier mount (unmounted afterwards), then a fresh workspace mount for
// the timed run. The native arm gets a fresh directory the same way. The
// body's time is taken inside the shell (date +%s%N around it), so the
// shell's own start is not counted; shells start outside the mount and cd
// into it.
package fsbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"layerfs.dev/layerfs/commit"
	"layerfs.dev/layerfs/fs"
	"layerfs.dev/layerfs/overlay"
	"layerfs.dev/layerfs/store"
)

// Cell is one workload body.
type Cell struct {
	Name string
	Body string
	Base bool // needs the 64 MiB base file "big" committed first
}

const c01 = `for i in $(seq 1 1000); do echo $i > f$i; done`
const c04 = `for a in $(seq 1 10); do for b in $(seq 1 10); do mkdir -p d$a/d$b; for f in $(seq 1 10); do touch d$a/d$b/f$f; done; done; done`
const c06 = `dd if=/dev/zero of=big bs=1M count=64 status=none`

// Cells are the twelve cells of CELLS.md.
var Cells = []Cell{
	{"C01", c01, false},
	{"C02", c01 + `; for i in $(seq 1 1000); do stat f$i; done`, false},
	{"C03", c01 + `; rm f*`, false},
	{"C04", c04, false},
	{"C05", c04 + `; find . -type f | wc -l`, false},
	{"C06", c06, false},
	{"C07", c06 + `; cp big big2`, false},
	{"C08", c06 + `; cat big > /dev/null`, false},
	{"C09", `cat big > /dev/null`, true},
	{"C10", `cp big big2`, true},
	{"C11", `dd if=/dev/zero of=big bs=1M count=64 conv=notrunc status=none`, true},
	{"C12", `git init -q; for i in $(seq 1 100); do echo $i > f$i; done; git add -A; git -c user.name=cell -c user.email=cell@example.invalid commit -qm init`, false},
}

// Config says where and how much to run.
type Config struct {
	// Dir is scratch space on the file system under test: both arms, the
	// Stores and the upper layers live under it.
	Dir     string
	Samples int      // per arm and cell; default 5
	Only    []string // cell names; default all
	Logger  *slog.Logger
	Mount   fs.Options
	Seed    uint64 // order of the runs
}

// Result is one cell's measurements.
type Result struct {
	Cell      string
	Native    []time.Duration
	LayerFS   []time.Duration
	Stats     []fs.Stats // per LayerFS sample: the timed body's requests
	DataPath  string
	Verified  bool
	VerifyErr string
}

// Median of a sample.
func Median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Ratio is median LayerFS over median native.
func (r *Result) Ratio() float64 {
	n := Median(r.Native)
	if n == 0 {
		return 0
	}
	return float64(Median(r.LayerFS)) / float64(n)
}

// medianStats is the stats of the sample with the median request count.
func (r *Result) medianStats() fs.Stats {
	if len(r.Stats) == 0 {
		return fs.Stats{}
	}
	s := append([]fs.Stats(nil), r.Stats...)
	sort.Slice(s, func(i, j int) bool { return s[i].Requests() < s[j].Requests() })
	return s[len(s)/2]
}

// Report is a whole run.
type Report struct {
	Dir     string
	FSType  string
	Samples int
	Results []*Result
}

// Run measures the cells.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Samples <= 0 {
		cfg.Samples = 5
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
	rep := &Report{Dir: cfg.Dir, FSType: fsType(cfg.Dir), Samples: cfg.Samples}
	big := filepath.Join(work, "base", "big")
	if err := writeBase(big); err != nil {
		return nil, err
	}
	type job struct {
		r      *Result
		cell   Cell
		native bool
	}
	var jobs []job
	for _, c := range Cells {
		if len(cfg.Only) > 0 && !contains(cfg.Only, c.Name) {
			continue
		}
		r := &Result{Cell: c.Name, Verified: true}
		rep.Results = append(rep.Results, r)
		for i := 0; i < cfg.Samples; i++ {
			jobs = append(jobs, job{r, c, true}, job{r, c, false})
		}
	}
	rnd := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed+1))
	rnd.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	for i, j := range jobs {
		dir := filepath.Join(work, fmt.Sprint("run", i))
		var err error
		if j.native {
			err = runNative(ctx, dir, big, j.cell, j.r)
		} else {
			err = runLayerFS(ctx, cfg, dir, big, j.cell, j.r)
		}
		if err != nil {
			return nil, fmt.Errorf("%s (native=%v): %w", j.cell.Name, j.native, err)
		}
		cfg.Logger.Info("sample", "cell", j.cell.Name, "native", j.native, "done", i+1, "of", len(jobs))
		os.RemoveAll(dir)
	}
	return rep, nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// writeBase writes 64 MiB of seeded pseudo-random bytes (not zeros, so
// neither dedup nor C11's zeros can hide anything).
func writeBase(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(64, 64))
	buf := make([]byte, 1<<20)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for i := 0; i < 64; i++ {
		for j := 0; j < len(buf); j += 8 {
			v := r.Uint64()
			for k := 0; k < 8; k++ {
				buf[j+k] = byte(v >> (8 * k))
			}
		}
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// timeBody runs the body in dir and returns the time measured inside the
// shell.
func timeBody(ctx context.Context, dir, body string) (time.Duration, error) {
	script := fmt.Sprintf("cd %q || exit 1\ns=$(date +%%s%%N)\n{ %s; } >/dev/null\nrc=$?\ne=$(date +%%s%%N)\necho $((e-s))\nexit $rc", dir, body)
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", script)
	cmd.Dir = "/" // never fork with the working directory on the mount
	cmd.Env = append(os.Environ(), "HOME=/tmp", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return 0, fmt.Errorf("body failed: %v: %s", err, stderr)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("body timing: %q", out)
	}
	return time.Duration(ns), nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func runNative(ctx context.Context, dir, big string, c Cell, r *Result) error {
	for _, phase := range []string{"warm", "timed"} {
		d := filepath.Join(dir, phase)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if c.Base {
			if err := copyFile(big, filepath.Join(d, "big")); err != nil {
				return err
			}
		}
		syscall.Sync()
		t, err := timeBody(ctx, d, c.Body)
		if err != nil {
			return err
		}
		if phase == "timed" {
			r.Native = append(r.Native, t)
			if err := verify(c, d, big); err != nil && r.Verified {
				r.Verified, r.VerifyErr = false, "native: "+err.Error()
			}
		}
	}
	return nil
}

func runLayerFS(ctx context.Context, cfg Config, dir, big string, c Cell, r *Result) error {
	db, err := store.Init(ctx, filepath.Join(dir, "store"), store.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	var root store.ID
	if c.Base {
		b, err := db.NewBatch(ctx)
		if err != nil {
			return err
		}
		root, _, err = commit.CaptureDir(ctx, b, db, filepath.Dir(big), nil)
		if err == nil {
			err = b.Flush(ctx)
		}
		b.Abort()
		if err != nil {
			return err
		}
	}
	for i, phase := range []string{"warm", "timed"} {
		ws := filepath.Join(db.WorkspacesDir(), fmt.Sprint("w", i))
		mnt := filepath.Join(dir, "mnt-"+phase)
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			return err
		}
		ov, err := overlay.Open(ctx, overlay.Config{Lower: db, Root: root, UpperDir: filepath.Join(ws, "upper"), Logger: cfg.Logger})
		if err != nil {
			return err
		}
		mo := cfg.Mount
		mo.Logger = cfg.Logger
		m, err := fs.Mount(ctx, mnt, ov, mo)
		if err != nil {
			return err
		}
		syscall.Sync()
		before := m.Stats()
		t, err := timeBody(ctx, mnt, c.Body)
		after := m.Stats()
		if err == nil && phase == "timed" {
			r.LayerFS = append(r.LayerFS, t)
			r.Stats = append(r.Stats, after.Sub(before))
			r.DataPath = after.DataPath
			if verr := verify(c, mnt, big); verr != nil && r.Verified {
				r.Verified, r.VerifyErr = false, "layerfs: "+verr.Error()
			}
		}
		if uerr := m.Unmount(ctx); err == nil {
			err = uerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Table writes the report as a Markdown table.
func (rep *Report) Table(w io.Writer) {
	fmt.Fprintf(w, "file system: %s (%s), median of %d samples per arm; µs/req is the daemon's service time per request\n\n", rep.Dir, rep.FSType, rep.Samples)
	fmt.Fprintln(w, "| cell | native ms | layerfs ms | ratio | requests | µs/req mean | µs/req median | data path | verified | requests by opcode |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	logSum, n := 0.0, 0
	worst := 0.0
	var all fs.Stats
	for _, r := range rep.Results {
		s := r.medianStats()
		for i := range all.Count {
			all.Count[i] += s.Count[i]
			all.Ns[i] += s.Ns[i]
		}
		for i := range all.Hist {
			all.Hist[i] += s.Hist[i]
		}
		var ops []string
		for _, oc := range s.ByOp() {
			ops = append(ops, fmt.Sprintf("%s %d", oc.Op, oc.Count))
		}
		mean := 0.0
		if s.Requests() > 0 {
			mean = float64(s.ServiceTime().Nanoseconds()) / float64(s.Requests()) / 1e3
		}
		ver := "yes"
		if !r.Verified {
			ver = "NO: " + r.VerifyErr
		}
		ratio := r.Ratio()
		if ratio > 0 {
			logSum += math.Log(ratio)
			n++
			worst = max(worst, ratio)
		}
		fmt.Fprintf(w, "| %s | %.1f [%.1f-%.1f] | %.1f [%.1f-%.1f] | %.2fx | %d | %.1f | %.1f | %s | %s | %s |\n",
			r.Cell, ms(Median(r.Native)), ms(minD(r.Native)), ms(maxD(r.Native)),
			ms(Median(r.LayerFS)), ms(minD(r.LayerFS)), ms(maxD(r.LayerFS)),
			ratio, s.Requests(), mean, float64(s.Quantile(0.5).Nanoseconds())/1e3, r.DataPath, ver, strings.Join(ops, ", "))
	}
	if n > 0 {
		fmt.Fprintf(w, "\ngeometric mean of ratios %.2fx, worst %.2fx; median daemon service time over all requests %.1f µs\n",
			math.Exp(logSum/float64(n)), worst, float64(all.Quantile(0.5).Nanoseconds())/1e3)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func minD(d []time.Duration) time.Duration {
	m := time.Duration(math.MaxInt64)
	for _, x := range d {
		m = min(m, x)
	}
	if len(d) == 0 {
		return 0
	}
	return m
}

func maxD(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func fsType(dir string) string {
	out, err := exec.Command("findmnt", "-n", "-o", "FSTYPE,SOURCE,OPTIONS", "--target", dir).Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
