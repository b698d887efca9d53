package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
)

// SessionConfig is one run of the session and scale figures.
type SessionConfig struct {
	Platforms   []string
	Calls       int // samples per latency figure; default 30
	Idle        int // workspaces held open for the memory figure; default 100
	LargeTree   int // files of the scale figures' tree; default 100,000 (tests use fewer)
	WorkDir     string
	NewPlatform func(name string) (platforms.Platform, error)
	Logger      *slog.Logger
	Progress    func(what string)
	// DataPath is the workspaces' data path ("" is the daemon's default).
	DataPath string
	// Daemon, when set, is the layerfsd binary: the exec figures are then
	// measured again through a daemon process of its own, as the CLI and
	// the SDKs meet it (the other figures use a daemon in this process,
	// whose memory they measure).
	Daemon string
}

// More session figures than report names: what issue 4's bench asks.
const (
	FigExecOverhead = "exec true, fixed overhead"
	// The same after thinkTime idle before each call.
	FigExecThink         = "exec true after 50 ms idle, SDK wall"
	FigExecOverheadThink = "exec true after 50 ms idle, fixed overhead"
	FigExecPython        = "exec python3 JSON, 10,000 records"
	// The exec figures through a separate layerfsd process.
	FigExecSeparate              = "exec true, separate layerfsd, SDK wall"
	FigExecOverheadSeparate      = "exec true, separate layerfsd, fixed overhead"
	FigExecThinkSeparate         = "exec true after 50 ms idle, separate layerfsd, SDK wall"
	FigExecOverheadThinkSeparate = "exec true after 50 ms idle, separate layerfsd, fixed overhead"
	// The same SDK walls through a second separate layerfsd serving with
	// --no-user-namespace, its calls alternating with the first's: what a
	// user namespace per exec costs, measured pairwise.
	FigExecSeparateNoUserNS      = "exec true, separate layerfsd --no-user-namespace, SDK wall"
	FigExecThinkSeparateNoUserNS = "exec true after 50 ms idle, separate layerfsd --no-user-namespace, SDK wall"
	FigCommitSmall               = "commit of a small change"
	// A plain commit and a commit with merge that lost the race to it,
	// measured in pairs: their p50s, and each pair's ratio.
	FigCommitPlain      = "commit of a small change, beside commit --merge"
	FigCommitMerge      = "commit --merge after a lost race"
	FigCommitMergeRatio = "commit --merge / plain commit, per pair"
	// ws fork --count 10 of a workspace with a small uncommitted change:
	// the call, until all ten are mounted.
	FigForkCount10 = "ws fork --count 10, small uncommitted change"
)

// FigIdleMemoryHost names the figure that counts, per idle workspace with
// open of them open, what report.FigIdleMemory (the daemon's own memory)
// does not: the kernel's side of the mounts, and a platform's processes
// (Docker's container, its shim).
func FigIdleMemoryHost(open int) string {
	return "host " + report.FigIdleMemory(open)
}

// thinkTime is the idle time before each call of the think-time figures.
const thinkTime = 50 * time.Millisecond

// largeFigs names the scale figures for a tree of n files.
func largeFigs(n int) (open, commit string) {
	t := thousands(n)
	return "workspace open, " + t + "-file tree", "commit of 1 changed file of " + t
}

// FilesPerLargeDir is the shape of the scale figures' tree: directories of 100
// files of a few bytes each.
const FilesPerLargeDir = 100

// pythonJSON builds, encodes, decodes and sums 10,000 records in python3.
const pythonJSON = `python3 -c '
import json
rs = [{"id": i, "name": "record-%d" % i, "tags": ["a", "b", "c"], "score": i * 0.5} for i in range(10000)]
s = json.dumps(rs)
back = json.loads(s)
print(len(s), sum(r["score"] for r in back))
'`

// RunSession measures, per platform, on a daemon over a fresh Store:
// workspace open and close, warm exec latency (true, and a python3 JSON
// workload), commit of a small change, fork plus workspace create, exec
// throughput at 1, 4 and 16 workers, and memory per idle mounted workspace.
func RunSession(ctx context.Context, cfg SessionConfig) ([]report.SessionFigure, error) {
	if cfg.Calls <= 0 {
		cfg.Calls = 30
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 100
	}
	if cfg.LargeTree <= 0 {
		cfg.LargeTree = 100_000
	}
	if len(cfg.Platforms) == 0 {
		cfg.Platforms = []string{"local"}
	}
	log, say := runOutputs(cfg.Logger, cfg.Progress)
	var figs []report.SessionFigure
	for _, name := range cfg.Platforms {
		t, err := prepare(ctx, Config{NewPlatform: cfg.NewPlatform}, name, log)
		if err != nil {
			openLarge, commitLarge := largeFigs(cfg.LargeTree)
			for _, n := range []string{report.FigOpen, report.FigClose, report.FigWarmExec, FigExecOverhead, FigExecThink, FigExecOverheadThink, FigExecPython, FigCommitSmall, report.FigForkCreate, report.FigThroughput1, report.FigThroughput4, report.FigThroughput16, openLarge, commitLarge, report.FigIdleMemory(cfg.Idle), FigIdleMemoryHost(cfg.Idle)} {
				figs = append(figs, report.SessionFigure{Platform: name, Name: n, NotRun: err.Error()})
			}
			continue
		}
		dir := filepath.Join(cfg.WorkDir, "session-"+name)
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.p.Down(ctx)
			return figs, err
		}
		c, release, err := t.connect(ctx, filepath.Join(dir, "store"))
		if err != nil {
			t.p.Down(ctx)
			return figs, fmt.Errorf("%s: %w", name, err)
		}
		s := &session{ctx: ctx, c: c, platform: name, calls: cfg.Calls, say: say, dir: dir, large: cfg.LargeTree, dataPath: cfg.DataPath}
		err = s.run(cfg.Idle, t.hostFS)
		release()
		t.p.Down(context.WithoutCancel(ctx))
		os.RemoveAll(dir)
		for _, f := range s.figs {
			figs = append(figs, *f)
		}
		if err != nil {
			return figs, fmt.Errorf("%s: %w", name, err)
		}
	}
	if cfg.Daemon != "" && slices.Contains(cfg.Platforms, "local") {
		say("local: exec latency through a separate layerfsd")
		sep, err := separateDaemon(ctx, cfg)
		figs = append(figs, sep...)
		if err != nil {
			return figs, fmt.Errorf("separate layerfsd: %w", err)
		}
	}
	return figs, nil
}

// runOutputs returns a run's logger (log, or one that discards) and its
// progress function (progress, or one that does nothing).
func runOutputs(log *slog.Logger, progress func(string)) (*slog.Logger, func(string)) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return log, func(s string) {
		if progress != nil {
			progress(s)
		}
	}
}

// separateDaemon measures exec true back to back and after think time
// through a layerfsd process of its own (its default platform, local),
// and, alternating call by call, through a second one that serves with
// --no-user-namespace: the fixed overhead of a daemon of its own, apart
// from the SDK's process, whose goroutines would otherwise compete with
// the daemon's for Ps (see package maxprocs).
func separateDaemon(ctx context.Context, cfg SessionConfig) ([]report.SessionFigure, error) {
	s := &session{ctx: ctx, platform: "local", calls: cfg.Calls, dataPath: cfg.DataPath}
	var arms []*execArm
	for i, args := range [][]string{nil, {"--no-user-namespace"}} {
		dir := filepath.Join(cfg.WorkDir, "separate", strconv.Itoa(i))
		d, err := spawnDaemon(cfg.Daemon, filepath.Join(dir, "store"), args...)
		if err != nil {
			return nil, err
		}
		defer func() {
			d.stop()
			os.RemoveAll(dir)
		}()
		c, err := d.dial(ctx)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		if _, err := c.CreateProject(ctx, wire.CreateProject{Name: "session"}); err != nil {
			return nil, err
		}
		ws, err := c.CreateWorkspace(ctx, s.spec())
		if err != nil {
			return nil, err
		}
		defer ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
		ws.Exec(ctx, "true", client.ExecOptions{}) // the first exec may pay one-off costs
		arms = append(arms, &execArm{ws: ws})
	}
	arms[0].wall, arms[0].over = s.fig(FigExecSeparate, "ms"), s.fig(FigExecOverheadSeparate, "ms")
	arms[1].wall = s.fig(FigExecSeparateNoUserNS, "ms")
	s.execTrue(arms, 0)
	arms[0].wall, arms[0].over = s.fig(FigExecThinkSeparate, "ms"), s.fig(FigExecOverheadThinkSeparate, "ms")
	arms[1].wall = s.fig(FigExecThinkSeparateNoUserNS, "ms")
	s.execTrue(arms, thinkTime)
	var figs []report.SessionFigure
	for _, f := range s.figs {
		figs = append(figs, *f)
	}
	return figs, nil
}

type session struct {
	ctx      context.Context
	c        *client.Client
	platform string
	dataPath string
	calls    int
	say      func(string)
	dir      string                  // scratch on the host, beside the Store
	large    int                     // files of the scale figures' tree
	figs     []*report.SessionFigure // pointers: figures fill while others are added
}

func (s *session) fig(name, unit string) *report.SessionFigure {
	f := &report.SessionFigure{Platform: s.platform, Name: name, Unit: unit}
	s.figs = append(s.figs, f)
	return f
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (s *session) spec() client.WorkspaceSpec {
	return client.WorkspaceSpec{Project: "session", Branch: "main", Platform: s.platform, DataPath: s.dataPath}
}

// run measures the session figures in order, each step a method; the
// steps after openClose share one workspace.
func (s *session) run(idle int, hostFS bool) error {
	if err := s.base(); err != nil {
		return err
	}
	s.openClose()
	ws, err := s.c.CreateWorkspace(s.ctx, s.spec())
	if err != nil {
		return err
	}
	defer ws.End(context.WithoutCancel(s.ctx), client.EndOptions{Discard: true})
	s.execLatency(ws)
	s.python(ws)
	s.smallCommits(ws)
	s.forks()
	if err := s.merges(); err != nil {
		return err
	}
	s.throughputs()
	if hostFS {
		s.memory(idle)
		// After the memory figure: importing the large tree churns the
		// kernel's caches, which the host's figure would count.
		if err := s.largeTree(); err != nil {
			return err
		}
	}
	return nil
}

// base creates the project with a small base: a few files, committed, so
// that workspaces show something.
func (s *session) base() error {
	ctx, c := s.ctx, s.c
	if _, err := c.CreateProject(ctx, wire.CreateProject{Name: "session"}); err != nil {
		return err
	}
	ws, err := c.CreateWorkspace(ctx, s.spec())
	if err != nil {
		return err
	}
	if res, err := ws.Exec(ctx, "mkdir -p src && for i in $(seq 1 50); do echo $i > src/f$i; done", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		return fmt.Errorf("base: %v %v", err, res)
	}
	if _, err := ws.Commit(ctx, "base"); err != nil {
		return err
	}
	return ws.End(ctx, client.EndOptions{})
}

func (s *session) openClose() {
	s.say(s.platform + ": workspace open and close")
	open, closeFig := s.fig(report.FigOpen, "ms"), s.fig(report.FigClose, "ms")
	for range s.calls {
		t0 := time.Now()
		w, err := s.c.CreateWorkspace(s.ctx, s.spec())
		if err != nil {
			open.Failures = append(open.Failures, err.Error())
			continue
		}
		open.Values = append(open.Values, ms(time.Since(t0)))
		t1 := time.Now()
		if err := w.End(s.ctx, client.EndOptions{}); err != nil {
			closeFig.Failures = append(closeFig.Failures, err.Error())
			continue
		}
		closeFig.Values = append(closeFig.Values, ms(time.Since(t1)))
	}
}

func (s *session) execLatency(ws *client.Workspace) {
	s.say(s.platform + ": warm exec latency")
	ws.Exec(s.ctx, "true", client.ExecOptions{}) // the first exec may pay one-off costs
	warm, over := s.fig(report.FigWarmExec, "ms"), s.fig(FigExecOverhead, "ms")
	s.execTrue([]*execArm{{ws: ws, wall: warm, over: over}}, 0)
	// An agent thinks between tool calls; in that time a platform may get
	// its next sandbox ready (local's warm pool refills).
	s.say(s.platform + ": exec latency after think time")
	s.execTrue([]*execArm{{ws: ws, wall: s.fig(FigExecThink, "ms"), over: s.fig(FigExecOverheadThink, "ms")}}, thinkTime)
}

func (s *session) python(ws *client.Workspace) {
	s.say(s.platform + ": python3 JSON workload")
	py := s.fig(FigExecPython, "ms")
	for range s.calls {
		t0 := time.Now()
		res, err := ws.Exec(s.ctx, pythonJSON, client.ExecOptions{})
		switch {
		case err != nil:
			py.Failures = append(py.Failures, err.Error())
		case res.ExitCode != 0 || !strings.HasSuffix(strings.TrimSpace(string(res.Stdout)), " 24997500.0"):
			py.Failures = append(py.Failures, fmt.Sprintf("exit %d: %s%s", res.ExitCode, res.Stdout, tail(res.Stderr)))
		default:
			py.Values = append(py.Values, ms(time.Since(t0)))
		}
	}
}

func (s *session) smallCommits(ws *client.Workspace) {
	s.say(s.platform + ": commit of a small change")
	cm := s.fig(FigCommitSmall, "ms")
	for i := range s.calls {
		if res, err := ws.Exec(s.ctx, "echo "+strconv.Itoa(i)+" >> src/log", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
			cm.Failures = append(cm.Failures, fmt.Sprint(err, res))
			continue
		}
		t0 := time.Now()
		if r, err := ws.Commit(s.ctx, "small change"); err != nil || r.Result != wire.Created {
			cm.Failures = append(cm.Failures, fmt.Sprint(err, r.Result))
			continue
		}
		cm.Values = append(cm.Values, ms(time.Since(t0)))
	}
}

func (s *session) forks() {
	s.say(s.platform + ": fork and create")
	fork := s.fig(report.FigForkCreate, "ms")
	for i := range s.calls {
		b := fmt.Sprintf("fork-%d", i)
		t0 := time.Now()
		_, err := s.c.ForkBranch(s.ctx, "session", b, "main")
		var w *client.Workspace
		if err == nil {
			w, err = s.c.CreateWorkspace(s.ctx, client.WorkspaceSpec{Project: "session", Branch: b, Platform: s.platform, DataPath: s.dataPath})
		}
		if err != nil {
			fork.Failures = append(fork.Failures, err.Error())
			continue
		}
		fork.Values = append(fork.Values, ms(time.Since(t0)))
		w.End(s.ctx, client.EndOptions{})
	}
}

func (s *session) throughputs() {
	for _, n := range []struct {
		workers int
		name    string
	}{{1, report.FigThroughput1}, {4, report.FigThroughput4}, {16, report.FigThroughput16}} {
		s.say(fmt.Sprintf("%s: throughput with %d workers", s.platform, n.workers))
		f := s.fig(n.name, "execs/s")
		for range 3 {
			v, err := s.throughput(n.workers, 10)
			if err != nil {
				f.Failures = append(f.Failures, err.Error())
				continue
			}
			f.Values = append(f.Values, v)
		}
	}
}

func (s *session) memory(idle int) {
	s.say(fmt.Sprintf("%s: memory with %d idle workspaces", s.platform, idle))
	mem, host := s.fig(report.FigIdleMemory(idle), "MiB"), s.fig(FigIdleMemoryHost(idle), "MiB")
	daemon, whole, err := s.idleMemory(idle)
	if err != nil {
		mem.Failures = append(mem.Failures, err.Error())
		host.Failures = append(host.Failures, err.Error())
		return
	}
	mem.Values = append(mem.Values, daemon)
	host.Values = append(host.Values, whole)
}

// execArm is a workspace to exec in and the figures its calls fill (over
// may be nil).
type execArm struct {
	ws         *client.Workspace
	wall, over *report.SessionFigure
}

// execTrue runs true calls times in each arm's workspace, the arms taking
// turns call by call (so that drift in the machine's load falls on all of
// them alike), idle for gap before each call, and records the SDK's wall
// time and the fixed overhead (wall minus the command's own time).
func (s *session) execTrue(arms []*execArm, gap time.Duration) {
	for range s.calls {
		for _, a := range arms {
			time.Sleep(gap)
			t0 := time.Now()
			res, err := a.ws.Exec(s.ctx, "true", client.ExecOptions{})
			d := time.Since(t0)
			if err != nil || res.ExitCode != 0 {
				a.wall.Failures = append(a.wall.Failures, fmt.Sprint(err, res))
				continue
			}
			a.wall.Values = append(a.wall.Values, ms(d))
			if a.over != nil {
				a.over.Values = append(a.over.Values, ms(d-time.Duration(res.Receipt.CommandNs)))
			}
		}
	}
}

// largeTree measures opening a workspace over a 100,000-file tree (the lower
// tree loads lazily, so the cost must not grow with it) and committing one
// changed file of it (only the dirty path is visited and rebuilt). The tree
// is imported from a host directory, so it needs the daemon on the host.
func (s *session) largeTree() error {
	ctx, c := s.ctx, s.c
	s.say(fmt.Sprintf("%s: importing a %d-file tree", s.platform, s.large))
	dirs := max(s.large/FilesPerLargeDir, 1)
	openName, commitName := largeFigs(dirs * FilesPerLargeDir)
	src := filepath.Join(s.dir, "large")
	for d := range dirs {
		sub := filepath.Join(src, fmt.Sprintf("d%03d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		for f := range FilesPerLargeDir {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d", f)), []byte(fmt.Sprintln(d, f)), 0o644); err != nil {
				return err
			}
		}
	}
	_, err := c.CreateProject(ctx, wire.CreateProject{Name: "large", FromPath: src})
	os.RemoveAll(src)
	if err != nil {
		return err
	}
	spec := client.WorkspaceSpec{Project: "large", Branch: "main", Platform: s.platform, DataPath: s.dataPath}

	s.say(s.platform + ": workspace open over the large tree")
	open := s.fig(openName, "ms")
	for range s.calls {
		t0 := time.Now()
		w, err := c.CreateWorkspace(ctx, spec)
		if err != nil {
			open.Failures = append(open.Failures, err.Error())
			continue
		}
		open.Values = append(open.Values, ms(time.Since(t0)))
		w.End(ctx, client.EndOptions{})
	}

	s.say(s.platform + ": commit of one changed file of the large tree")
	cm := s.fig(commitName, "ms")
	w, err := c.CreateWorkspace(ctx, spec)
	if err != nil {
		return err
	}
	defer w.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	for i := range s.calls {
		path := fmt.Sprintf("d%03d/f%03d", i*7%dirs, i%FilesPerLargeDir)
		if err := w.WriteFile(ctx, path, []byte(fmt.Sprintln("changed", i)), 0o644); err != nil {
			cm.Failures = append(cm.Failures, err.Error())
			continue
		}
		t0 := time.Now()
		if r, err := w.Commit(ctx, "one change"); err != nil || r.Result != wire.Created {
			cm.Failures = append(cm.Failures, fmt.Sprint(err, r.Result))
			continue
		}
		cm.Values = append(cm.Values, ms(time.Since(t0)))
	}
	return nil
}

// thousands writes n with comma separators: 100000 is "100,000".
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// throughput runs workers workspaces, each running per execs of true one
// after the other, all at once, and returns execs per second.
func (s *session) throughput(workers, per int) (float64, error) {
	ctx := s.ctx
	wss := make([]*client.Workspace, workers)
	for i := range wss {
		w, err := s.c.CreateWorkspace(ctx, s.spec())
		if err != nil {
			return 0, err
		}
		defer w.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
		wss[i] = w
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	t0 := time.Now()
	for _, w := range wss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				res, err := w.Exec(ctx, "true", client.ExecOptions{})
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exit %d", res.ExitCode)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(workers*per) / el.Seconds(), nil
}

// idleMemory opens n workspaces and returns, per workspace in MiB, the
// growth of this process's live heap (the daemon is served from it) and of
// the memory the whole host uses (MemTotal - MemAvailable).
func (s *session) idleMemory(n int) (daemon, host float64, err error) {
	settleMemory()
	heap0, used0, err := memory()
	if err != nil {
		return 0, 0, err
	}
	var wss []*client.Workspace
	defer func() {
		for _, w := range wss {
			w.End(context.WithoutCancel(s.ctx), client.EndOptions{Discard: true})
		}
	}()
	for range n {
		w, err := s.c.CreateWorkspace(s.ctx, s.spec())
		if err != nil {
			return 0, 0, err
		}
		wss = append(wss, w)
		// Touch the mount so that it is really served: a lookup and a read.
		if res, err := w.Exec(s.ctx, "cat src/f1 >/dev/null", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
			return 0, 0, fmt.Errorf("touch workspace: %v %v", err, res)
		}
	}
	settleMemory()
	heap1, used1, err := memory()
	if err != nil {
		return 0, 0, err
	}
	perMiB := func(d int64) float64 { return float64(d) / float64(n) / (1 << 20) }
	return perMiB(heap1 - heap0), perMiB(used1 - used0), nil
}

// settleMemory leaves only reachable objects on this process's heap and
// hands every free page back to the OS, so that a reading counts no
// garbage, and the host's figure no pages the runtime keeps for reuse. It
// takes two collections: the first only moves what the sync.Pools hold
// into their victim caches, which stay reachable until the next one. With
// one, the reading before the workspaces opened counted the buffers the
// figures before had pooled, and a collection in between freed them: the
// growth came out negative.
func settleMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// memory reads this process's live heap, as the last collection marked
// it, and the memory the host uses, in bytes. The live heap, not the
// resident set: after a collection it is what the process keeps reachable,
// which opening workspaces adds to; the resident set also moves with
// goroutine stacks shrinking and new objects filling holes in pages already
// resident, by as much as a few idle workspaces add. It counts allocations
// an idle workspace has not touched yet (each mount's go-fuse request
// buffers, resident once requests have filled them).
func memory() (live, used int64, err error) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	live = int64(s[0].Value.Uint64())
	total, err := procField("/proc/meminfo", "MemTotal:")
	if err != nil {
		return 0, 0, err
	}
	avail, err := procField("/proc/meminfo", "MemAvailable:")
	return live, total - avail, err
}

// procField reads a "Name: N kB" line of a /proc file, in bytes.
func procField(path, name string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == name {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, path)
}

// merges measures a commit with merge that lost the race beside the plain
// commit that won it, pair by pair, in two workspaces on one branch; and a
// fork of ten workspaces from one with a small uncommitted change.
func (s *session) merges() error {
	ctx, c := s.ctx, s.c
	s.say(s.platform + ": commit --merge after a lost race, beside a plain commit")
	plain, merged, ratio := s.fig(FigCommitPlain, "ms"), s.fig(FigCommitMerge, "ms"), s.fig(FigCommitMergeRatio, "x")
	a, err := c.CreateWorkspace(ctx, s.spec())
	if err != nil {
		return err
	}
	defer a.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	b, err := c.CreateWorkspace(ctx, s.spec())
	if err != nil {
		return err
	}
	defer b.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	for i := range s.calls {
		if err := a.WriteFile(ctx, "src/a-"+strconv.Itoa(i), []byte("a\n"), 0o644); err != nil {
			return err
		}
		if err := b.WriteFile(ctx, "src/b-"+strconv.Itoa(i), []byte("b\n"), 0o644); err != nil {
			return err
		}
		// b has caught up with a's last commit (its own merge): the pair
		// starts from one head.
		t0 := time.Now()
		ra, err := a.Commit(ctx, "a's")
		ta := time.Since(t0)
		if err != nil || ra.Result != wire.Created && ra.Result != wire.Merged {
			plain.Failures = append(plain.Failures, fmt.Sprint(err, ra.Result))
			continue
		}
		t1 := time.Now()
		rb, err := b.CommitMerge(ctx, "b's")
		tb := time.Since(t1)
		if err != nil || rb.Result != wire.Merged {
			merged.Failures = append(merged.Failures, fmt.Sprint(err, rb.Result))
			continue
		}
		// a's next commit would merge too: bring it up to date, untimed.
		if _, err := a.Update(ctx, wire.UpdateRequest{}); err != nil {
			return err
		}
		if i == 0 || ra.Result != wire.Created {
			continue // the first pair starts a's line; a merged commit is not plain
		}
		plain.Values = append(plain.Values, ms(ta))
		merged.Values = append(merged.Values, ms(tb))
		ratio.Values = append(ratio.Values, float64(tb)/float64(ta))
	}

	s.say(s.platform + ": ws fork --count 10")
	fork := s.fig(FigForkCount10, "ms")
	src, err := c.CreateWorkspace(ctx, s.spec())
	if err != nil {
		return err
	}
	defer src.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	if err := src.WriteFile(ctx, "src/wip", []byte("work in progress\n"), 0o644); err != nil {
		return err
	}
	for range s.calls {
		t0 := time.Now()
		forks, err := src.Fork(ctx, 10)
		d := time.Since(t0)
		if err != nil {
			fork.Failures = append(fork.Failures, err.Error())
			continue
		}
		fork.Values = append(fork.Values, ms(d))
		for _, f := range forks {
			if err := f.End(ctx, client.EndOptions{Discard: true}); err != nil {
				return err
			}
		}
	}
	return nil
}
