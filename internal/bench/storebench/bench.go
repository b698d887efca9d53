package storebench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/stats"
	"layerfs.dev/layerfs/internal/store"
)

// Config tunes a run. The zero value measures in a temporary directory.
type Config struct {
	Dir       string        // where stores and inputs go; "" = a temporary directory, removed after
	Runs      int           // samples per throughput figure; 0 = 3
	Forks     int           // samples per fork figure; 0 = 200
	Merges    int           // samples per merge figure; 0 = 50
	BigTree   int           // files of the large fork tree; 0 = 100,000
	Chunking  commit.Params // zero: commit.DefaultParams
	Log       io.Writer     // progress lines; nil = silent
	SmallFile int           // number of small files; 0 = 10,000
}

// Row is one measured figure.
type Row struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target"`
	Pass   bool    `json:"pass"`
	Detail string  `json:"detail,omitempty"`
}

// Report is a run's result.
type Report struct {
	Chunking commit.Params `json:"chunking"`
	CPUs     int           `json:"cpus"`
	// Load is /proc/loadavg when the run started: these figures are only
	// comparable between runs on an otherwise idle machine.
	Load string `json:"load"`
	Dir  string `json:"dir"`
	Rows []Row  `json:"rows"`
}

// WriteTable prints the report as an aligned table.
func (r *Report) WriteTable(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "chunking min/avg/max %d/%d/%d KiB, %d CPUs, load average %s, stores in %s\n\n",
		r.Chunking.Min>>10, r.Chunking.Avg>>10, r.Chunking.Max>>10, r.CPUs, r.Load, r.Dir); err != nil {
		return err
	}
	fmt.Fprintf(w, "| measure | figure | target | result |\n|---|---|---|---|\n")
	for _, x := range r.Rows {
		res := "PASS"
		if !x.Pass {
			res = "MISS"
		}
		v := strconv.FormatFloat(x.Value, 'f', 3, 64)
		if x.Value >= 100 {
			v = strconv.FormatFloat(x.Value, 'f', 0, 64)
		}
		name := x.Name
		if x.Detail != "" {
			name += " (" + x.Detail + ")"
		}
		if _, err := fmt.Fprintf(w, "| %s | %s %s | %s | %s |\n", name, v, x.Unit, x.Target, res); err != nil {
			return err
		}
	}
	return nil
}

// Passed reports whether every figure met its target.
func (r *Report) Passed() bool {
	for _, x := range r.Rows {
		if !x.Pass {
			return false
		}
	}
	return true
}

type runner struct {
	cfg Config
	dir string
	n   int
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, format+"\n", args...)
	}
}

// newStore makes a fresh store under the run's directory.
func (r *runner) newStore(ctx context.Context, name string) (*store.DB, error) {
	r.n++
	return store.Init(ctx, filepath.Join(r.dir, fmt.Sprintf("%s-%d", name, r.n)), store.Options{})
}

func defaultConfig() Config {
	var c Config
	c.fill()
	return c
}

func (cfg *Config) fill() {
	if cfg.Runs <= 0 {
		cfg.Runs = 3
	}
	if cfg.Forks <= 0 {
		cfg.Forks = 200
	}
	if cfg.Merges <= 0 {
		cfg.Merges = 50
	}
	if cfg.BigTree <= 0 {
		cfg.BigTree = 100_000
	}
	if cfg.SmallFile <= 0 {
		cfg.SmallFile = 10_000
	}
	if cfg.Chunking == (commit.Params{}) {
		cfg.Chunking = commit.DefaultParams
	}
}

// Run measures everything and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.fill()
	r := &runner{cfg: cfg, dir: cfg.Dir}
	if r.dir == "" {
		d, err := os.MkdirTemp("", "layerfs-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		r.dir = d
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	rep := &Report{Chunking: cfg.Chunking, CPUs: runtime.GOMAXPROCS(0), Dir: r.dir, Load: report.LoadAverage()}
	for _, step := range []func(context.Context) ([]Row, error){r.dedup, r.bigFile, r.smallFiles, r.forks, r.merges} {
		rows, err := step(ctx)
		if err != nil {
			return rep, err
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	return rep, nil
}

func (r *runner) opts() *commit.Options { return &commit.Options{Chunking: r.cfg.Chunking} }

func randomBytes(seed uint64, n int) []byte {
	rnd := rand.New(rand.NewPCG(seed, seed*31+7))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := rnd.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// packBytes is the store's pack footprint: payload plus record headers.
func packBytes(ctx context.Context, db *store.DB) (int64, error) {
	st, err := db.Stats(ctx)
	return st.PackBytes, err
}

const mib = 1 << 20

// dedup measures payload growth for (a) a 10-byte prepend to a 32 MiB
// random file, (b) sixteen 10-byte overwrites spread over it and (c) an
// unchanged re-import, each committed through commit.FromDir.
func (r *runner) dedup(ctx context.Context) ([]Row, error) {
	r.logf("dedup: 32 MiB random file")
	db, err := r.newStore(ctx, "dedup")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	work := filepath.Join(r.dir, "dedup-work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	file := filepath.Join(work, "big")
	data := randomBytes(1, 32*mib)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return nil, err
	}
	for i := range 20 { // company for the big file: the unchanged re-import covers a tree
		if err := os.WriteFile(filepath.Join(work, fmt.Sprintf("small%d", i)), randomBytes(uint64(100+i), 1000+i*300), 0o644); err != nil {
			return nil, err
		}
	}
	if _, _, _, err := commit.CreateProject(ctx, db, "p", work, commit.Meta{Message: "base"}, r.opts()); err != nil {
		return nil, err
	}
	step := func(edit func() error) (int64, error) {
		before, err := packBytes(ctx, db)
		if err != nil {
			return 0, err
		}
		if err := edit(); err != nil {
			return 0, err
		}
		if _, _, err := commit.FromDir(ctx, db, "p", "main", work, commit.Meta{}, r.opts()); err != nil {
			return 0, err
		}
		after, err := packBytes(ctx, db)
		return after - before, err
	}
	var rows []Row
	// (c) first, while the tree is exactly the imported one.
	grow, err := step(func() error { return nil })
	if err != nil {
		return nil, err
	}
	rows = append(rows, Row{Name: "(c) re-import an unchanged tree", Value: float64(grow), Unit: "payload bytes", Target: "0 bytes", Pass: grow == 0})
	// (a) prepend 10 bytes.
	grow, err = step(func() error {
		data = append([]byte("0123456789"), data...)
		return os.WriteFile(file, data, 0o644)
	})
	if err != nil {
		return nil, err
	}
	rows = append(rows, Row{Name: "(a) prepend 10 B to a 32 MiB random file", Value: float64(grow) / mib, Unit: "MiB", Target: "<= 0.03 MiB", Pass: float64(grow)/mib <= 0.03})
	// (b) sixteen 10-byte overwrites, one at a random point of each
	// sixteenth of the file.
	rnd := rand.New(rand.NewPCG(2, 3))
	grow, err = step(func() error {
		seg := len(data) / 16
		for i := range 16 {
			off := i*seg + rnd.IntN(seg-10)
			copy(data[off:], randomBytes(uint64(1000+i), 16)[:10])
		}
		return os.WriteFile(file, data, 0o644)
	})
	if err != nil {
		return nil, err
	}
	rows = append(rows, Row{Name: "(b) sixteen 10 B overwrites spread over 32 MiB", Value: float64(grow) / mib, Unit: "MiB", Target: "<= 0.25 MiB", Pass: float64(grow)/mib <= 0.25})
	// (a) and (b) should come before (c) in the table.
	rows[0], rows[1], rows[2] = rows[1], rows[2], rows[0]
	return rows, os.RemoveAll(work)
}

// cpuTime is the process's user and system time so far; next to wall time
// it shows how much of a slow figure was waiting for a busy machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sample is one timed capture.
type sample struct {
	wall, cpu, flush time.Duration
	stats            commit.Stats
}

// captureOnce captures dir into a fresh store (flushed: pack data fsynced
// and the index committed) and times it: wall and CPU time of the whole,
// and the wall time of the flush alone.
func (r *runner) captureOnce(ctx context.Context, dir string) (sample, error) {
	var s sample
	db, err := r.newStore(ctx, "capture")
	if err != nil {
		return s, err
	}
	defer func() {
		db.Close()
		os.RemoveAll(db.Dir())
	}()
	start, cpu0 := time.Now(), cpuTime()
	b, err := db.NewBatch(ctx)
	if err != nil {
		return s, err
	}
	defer b.Abort()
	_, s.stats, err = commit.CaptureDir(ctx, b, db, dir, r.opts())
	if err != nil {
		return s, err
	}
	flushStart := time.Now()
	err = b.Flush(ctx)
	s.flush = time.Since(flushStart)
	s.wall, s.cpu = time.Since(start), cpuTime()-cpu0
	return s, err
}

// captureRuns captures dir cfg.Runs times and describes the medians.
func (r *runner) captureRuns(ctx context.Context, dir string, files int64) (time.Duration, string, error) {
	var walls, cpus, flushes []time.Duration
	for range r.cfg.Runs {
		s, err := r.captureOnce(ctx, dir)
		if err != nil {
			return 0, "", err
		}
		if files > 0 && s.stats.Files != files {
			return 0, "", fmt.Errorf("captured %d files, want %d", s.stats.Files, files)
		}
		walls, cpus, flushes = append(walls, s.wall), append(cpus, s.cpu), append(flushes, s.flush)
	}
	m := stats.MedianDuration(walls)
	return m, fmt.Sprintf("median of %d: %v wall of which flush %v, %v CPU", len(walls),
		m.Round(time.Millisecond), stats.MedianDuration(flushes).Round(time.Millisecond), stats.MedianDuration(cpus).Round(time.Millisecond)), nil
}

func (r *runner) bigFile(ctx context.Context) ([]Row, error) {
	r.logf("capture: 64 MiB random file, %d runs", r.cfg.Runs)
	dir := filepath.Join(r.dir, "big-work")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "random"), randomBytes(3, 64*mib), 0o644); err != nil {
		return nil, err
	}
	// Write the input back now, so that its writeback does not compete
	// with the pack fsync being measured.
	syscall.Sync()
	m, detail, err := r.captureRuns(ctx, dir, 1)
	if err != nil {
		return nil, err
	}
	rate := 64 * mib / m.Seconds() / 1e6
	return []Row{{Name: "capture 64 MiB of random data", Value: rate, Unit: "MB/s", Target: ">= 300 MB/s", Pass: rate >= 300, Detail: detail}}, nil
}

func (r *runner) smallFiles(ctx context.Context) ([]Row, error) {
	n := r.cfg.SmallFile
	r.logf("capture: %d small files, %d runs", n, r.cfg.Runs)
	dir := filepath.Join(r.dir, "small-work")
	defer os.RemoveAll(dir)
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("d%02d", i%100))
		if i < 100 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return nil, err
			}
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), randomBytes(uint64(i)+10, 200+i%2000), 0o644); err != nil {
			return nil, err
		}
	}
	syscall.Sync()
	m, detail, err := r.captureRuns(ctx, dir, int64(n))
	if err != nil {
		return nil, err
	}
	rate := float64(n) / m.Seconds()
	return []Row{{Name: fmt.Sprintf("capture %d small files", n), Value: rate, Unit: "files/s", Target: ">= 5000 files/s", Pass: rate >= 5000, Detail: detail}}, nil
}

// syntheticProject stores a project whose tree has files files in
// directories of 1,000, all naming one chunk: the tree's size is what a
// fork must not depend on, and writing that many real files would take
// minutes on this file system.
func syntheticProject(ctx context.Context, db *store.DB, name string, files int) error {
	b, err := db.NewBatch(ctx)
	if err != nil {
		return err
	}
	defer b.Abort()
	chunk := []byte("one file's content")
	cid := store.Hash(store.KindChunk, chunk)
	if _, err := b.PutChunk(cid, chunk); err != nil {
		return err
	}
	root := &store.Tree{}
	for d := 0; d*1000 < files; d++ {
		sub := &store.Tree{}
		for f := d * 1000; f < min(files, (d+1)*1000); f++ {
			sub.Entries = append(sub.Entries, store.Entry{Name: fmt.Sprintf("f%06d", f), Type: store.TypeFile, Mode: 0o644,
				Size: int64(len(chunk)), Object: cid, ObjectKind: store.KindChunk})
		}
		id, err := b.PutTree(sub)
		if err != nil {
			return err
		}
		root.Entries = append(root.Entries, store.Entry{Name: fmt.Sprintf("d%04d", d), Type: store.TypeDir, Mode: 0o755, Object: id, ObjectKind: store.KindTree})
	}
	rootID, err := b.PutTree(root)
	if err != nil {
		return err
	}
	cid2, err := b.PutCommit(&store.Commit{Root: rootID, Message: "synthetic", TimeNs: time.Now().UnixNano(),
		Stats: store.CommitStats{Files: int64(files), Dirs: int64(len(root.Entries)), Bytes: int64(files * len(chunk))}})
	if err != nil {
		return err
	}
	if err := b.Flush(ctx); err != nil {
		return err
	}
	_, err = db.CreateProject(ctx, name, cid2)
	return err
}

func (r *runner) forks(ctx context.Context) ([]Row, error) {
	db, err := r.newStore(ctx, "fork")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var rows []Row
	for _, size := range []int{10, r.cfg.BigTree} {
		r.logf("fork: %d-file tree, %d forks", size, r.cfg.Forks)
		name := fmt.Sprintf("tree%d", size)
		if err := syntheticProject(ctx, db, name, size); err != nil {
			return nil, err
		}
		var ts []time.Duration
		for i := range r.cfg.Forks {
			start := time.Now()
			if _, err := commit.Fork(ctx, db, name, fmt.Sprintf("f%d", i), "main"); err != nil {
				return nil, err
			}
			ts = append(ts, time.Since(start))
		}
		m := stats.MedianDuration(ts)
		ms := float64(m) / float64(time.Millisecond)
		rows = append(rows, Row{Name: fmt.Sprintf("fork a branch of a %d-file tree", size), Value: ms, Unit: "ms", Target: "< 1 ms", Pass: ms < 1,
			Detail: fmt.Sprintf("median of %d", len(ts))})
	}
	return rows, nil
}

// merges measures a merge of two branches that each changed one file, in
// a tree of 1,000 files and in one of BigTree: from the merge base to the
// merge commit published on the branch (commit.MergeInto). Each sample
// forks a branch at main's head, commits one file on each, and merges the
// branch into main; the merge's cost must not grow with the tree.
func (r *runner) merges(ctx context.Context) ([]Row, error) {
	db, err := r.newStore(ctx, "merge")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var rows []Row
	for _, size := range []int{1000, r.cfg.BigTree} {
		r.logf("merge: %d-file tree, %d merges", size, r.cfg.Merges)
		name := fmt.Sprintf("tree%d", size)
		if err := syntheticProject(ctx, db, name, size); err != nil {
			return nil, err
		}
		dirs := (size + 999) / 1000
		var ts []time.Duration
		var paths int64
		for i := range r.cfg.Merges {
			b := fmt.Sprintf("side%d", i)
			if _, err := commit.Fork(ctx, db, name, b, "main"); err != nil {
				return nil, err
			}
			// One file in one directory each, a different one per side.
			mine := fmt.Sprintf("d%04d/f%06d", i%dirs, (i%dirs)*1000)
			theirs := fmt.Sprintf("d%04d/f%06d", (i+dirs/2)%dirs, ((i+dirs/2)%dirs)*1000+1)
			if err := commitOne(ctx, db, name, "main", mine, fmt.Sprint("main's change ", i)); err != nil {
				return nil, err
			}
			if err := commitOne(ctx, db, name, b, theirs, fmt.Sprint("side's change ", i)); err != nil {
				return nil, err
			}
			src, err := db.Branch(ctx, name, b)
			if err != nil {
				return nil, err
			}
			start := time.Now()
			out, err := commit.MergeInto(ctx, db, commit.MergeRequest{Project: name, Branch: "main", Source: src.Head, SourceName: b})
			d := time.Since(start)
			if err != nil {
				return nil, err
			}
			if out.Result != commit.MergeMerged {
				return nil, fmt.Errorf("merge %d: %s", i, out.Result)
			}
			ts = append(ts, d)
			paths = max(paths, out.Stats.Paths)
		}
		m := stats.MedianDuration(ts)
		ms := float64(m) / float64(time.Millisecond)
		rows = append(rows, Row{Name: fmt.Sprintf("merge of two branches that each changed one file, %d-file tree", size), Value: ms, Unit: "ms",
			Target: "<= 10 ms", Pass: ms <= 10, Detail: fmt.Sprintf("median of %d, %d changed paths visited", len(ts), paths)})
	}
	return rows, nil
}

// commitOne commits a new content for one file on a branch.
func commitOne(ctx context.Context, db *store.DB, project, branch, path, data string) error {
	br, err := db.Branch(ctx, project, branch)
	if err != nil {
		return err
	}
	head, err := db.Commit(ctx, br.Head)
	if err != nil {
		return err
	}
	b, err := db.NewBatch(ctx)
	if err != nil {
		return err
	}
	defer b.Abort()
	id := store.Hash(store.KindChunk, []byte(data))
	if _, err := b.PutChunk(id, []byte(data)); err != nil {
		return err
	}
	e := &store.Entry{Type: store.TypeFile, Mode: 0o644, Size: int64(len(data)), Object: id, ObjectKind: store.KindChunk, MtimeNs: time.Now().UnixNano()}
	root, st, err := commit.Build(ctx, b, db, head.Root, []commit.Change{{Path: path, Entry: e}}, nil)
	if err != nil {
		return err
	}
	if err := b.Flush(ctx); err != nil {
		return err
	}
	stats := head.Stats
	stats.Changed = st.Changes
	p, err := commit.Publish(ctx, db, project, branch, br.Head, &store.Commit{Root: root, Message: "change " + path, Stats: stats})
	if err != nil {
		return err
	}
	return p.Err()
}
