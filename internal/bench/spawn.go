package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/internal/stats"
	"layerfs.dev/layerfs/wire"
)

// SpawnConfig is one run of the spawn bench: what an exec costs against
// what a process costs, through separate layerfsd processes.
type SpawnConfig struct {
	// Daemons are the arms: layerfsd binaries, each served from a Store of
	// its own and named by Name. Their rounds alternate, so that drift in
	// the machine's load falls on all of them alike (two builds compare
	// side by side in one run).
	Daemons []SpawnDaemon
	// N workspaces are opened in a spawn round, Workers at a time, with one
	// command run in each; default 100 and 8.
	N, Workers int
	// Execs is how many execs of true one CPU figure counts; default 200.
	Execs int
	// Rounds is how many times every figure is measured; default 3.
	Rounds int
	// Parts are the parts to measure, of SpawnParts (all when empty): to
	// profile one of them alone.
	Parts    []string
	WorkDir  string
	Progress func(what string)
}

// SpawnDaemon is one arm of the spawn bench.
type SpawnDaemon struct {
	Name string
	Bin  string   // the layerfsd binary
	Args []string // more arguments for layerfsd serve
}

// The spawn bench's figures; the native arm's carry the platform name
// "native".
const (
	FigSpawn           = "spawn: workspaces opened, one command in each, wall"
	FigSpawnPer        = "spawn: per workspace, wall"
	FigSpawnCPU        = "spawn: CPU per workspace (open + exec)"
	FigSpawnEnd        = "spawn: end of the workspaces, wall"
	FigExecCPU         = "exec true back to back: CPU per exec"
	FigExecCPUDaemon   = "exec true back to back: CPU per exec, layerfsd"
	FigExecCPUSandbox  = "exec true back to back: CPU per exec, its sandbox's processes"
	FigExecCPUClient   = "exec true back to back: CPU per exec, the SDK"
	FigExecWall        = "exec true back to back: wall"
	FigExecIdleWall    = "exec true after 50 ms idle: wall"
	FigExecFirstWall   = "exec true, the first in a new workspace: wall"
	FigDaemonMemory    = "memory per open workspace: layerfsd (Pss)"
	FigSandboxMemory   = "memory per open workspace: sandbox processes (Pss)"
	FigKernelMemory    = "memory per open workspace: kernel (slab, stacks, page tables)"
	FigThroughputCPU4  = "throughput, 4 workers: CPU per exec"
	nativeName         = "native"
	spawnThinkCalls    = 40
	spawnThroughputPer = 10
)

// SpawnParts are the parts of the spawn bench: execs back to back (with
// their CPU), execs after think time, the first exec in new workspaces,
// throughput, the spawn of N workspaces (with their memory).
var SpawnParts = []string{"exec", "idle", "first", "throughput", "spawn"}

// spawnThroughputFig names the throughput figure with w workers.
func spawnThroughputFig(w int) string {
	return fmt.Sprintf("throughput, %d workers", w)
}

// SpawnResult is the figures of a spawn run and the ratios that sum it up.
type SpawnResult struct {
	Figures []report.SessionFigure
	// Ratios are each arm's medians over the native arm's (and the first
	// arm's over each other's), one line each.
	Ratios []string
}

// RunSpawn measures, per arm, round after round: the CPU and the wall time
// of execs of true back to back in one workspace (and the wall time after
// think time), throughput with 1, 4 and 16 workers, and a spawn (N
// workspaces opened on one branch, true run in each, Workers at a time)
// with the memory each open workspace holds; and beside them the same
// commands as plain processes of this one.
func RunSpawn(ctx context.Context, cfg SpawnConfig) (SpawnResult, error) {
	cfg.N = cmpOr(cfg.N, 100)
	cfg.Workers = cmpOr(cfg.Workers, 8)
	cfg.Execs = cmpOr(cfg.Execs, 200)
	cfg.Rounds = cmpOr(cfg.Rounds, 3)
	if len(cfg.Daemons) == 0 {
		return SpawnResult{}, errors.New("bench spawn: no layerfsd to run")
	}
	for _, p := range cfg.Parts {
		if !slices.Contains(SpawnParts, p) {
			return SpawnResult{}, fmt.Errorf("bench spawn: no part %q (the parts: %s)", p, strings.Join(SpawnParts, ", "))
		}
	}
	_, say := runOutputs(nil, cfg.Progress)
	truePath, err := exec.LookPath("true")
	if err != nil {
		return SpawnResult{}, err
	}
	figs := &figureSet{}
	var arms []*spawnArm
	defer func() {
		for _, a := range arms {
			a.close(ctx)
		}
	}()
	for i, d := range cfg.Daemons {
		say("starting " + d.Name)
		a, err := startSpawnArm(ctx, d, filepath.Join(cfg.WorkDir, "spawn-"+strconv.Itoa(i)), figs)
		if err != nil {
			return SpawnResult{}, fmt.Errorf("%s: %w", d.Name, err)
		}
		arms = append(arms, a)
	}
	native := &nativeArm{truePath: truePath, figs: figs}
	for r := range cfg.Rounds {
		order := slices.Clone(arms)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, a := range order {
			say(fmt.Sprintf("round %d/%d: %s", r+1, cfg.Rounds, a.name))
			if err := a.round(ctx, cfg); err != nil {
				return SpawnResult{Figures: figs.list()}, fmt.Errorf("%s: %w", a.name, err)
			}
			say(fmt.Sprintf("round %d/%d: native processes", r+1, cfg.Rounds))
			if err := native.round(ctx, cfg); err != nil {
				return SpawnResult{Figures: figs.list()}, fmt.Errorf("native: %w", err)
			}
		}
	}
	res := SpawnResult{Figures: figs.list()}
	for _, a := range arms {
		res.Ratios = append(res.Ratios, figs.ratios(a.name, nativeName)...)
	}
	for _, a := range arms[1:] {
		res.Ratios = append(res.Ratios, figs.ratios(arms[0].name, a.name)...)
	}
	return res, nil
}

func cmpOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// figureSet holds the figures of a run by arm and name, in the order they
// were first measured.
type figureSet struct {
	mu    sync.Mutex
	order []*report.SessionFigure
	by    map[[2]string]*report.SessionFigure
}

func (s *figureSet) add(arm, name, unit string, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(arm, name, unit).Values = append(s.get(arm, name, unit).Values, v)
}

func (s *figureSet) get(arm, name, unit string) *report.SessionFigure {
	if s.by == nil {
		s.by = map[[2]string]*report.SessionFigure{}
	}
	k := [2]string{arm, name}
	f, ok := s.by[k]
	if !ok {
		f = &report.SessionFigure{Platform: arm, Name: name, Unit: unit}
		s.by[k] = f
		s.order = append(s.order, f)
	}
	return f
}

func (s *figureSet) list() []report.SessionFigure {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]report.SessionFigure, 0, len(s.order))
	for _, f := range s.order {
		out = append(out, *f)
	}
	return out
}

// ratioFigs are the figures whose medians a ratio line compares, with the
// native figure each LayerFS figure is measured against.
var ratioFigs = [][2]string{
	{FigExecCPU, FigExecCPU},
	{FigSpawn, FigSpawn},
	{FigExecWall, FigExecWall},
	{FigExecIdleWall, FigExecWall},
}

// ratios compares arm a's medians with arm b's.
func (s *figureSet) ratios(a, b string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range ratioFigs {
		if b != nativeName {
			r[1] = r[0] // arm against arm: the same figure
		}
		fa, okA := s.by[[2]string{a, r[0]}]
		fb, okB := s.by[[2]string{b, r[1]}]
		if !okA || !okB || len(fa.Values) == 0 || len(fb.Values) == 0 {
			continue
		}
		ma, mb := stats.Median(fa.Values), stats.Median(fb.Values)
		out = append(out, fmt.Sprintf("%s / %s: %s: %.2fx (%.3g / %.3g %s)", a, b, r[0], ma/mb, ma, mb, fa.Unit))
	}
	back, okB := s.by[[2]string{a, FigExecWall}]
	idle, okI := s.by[[2]string{a, FigExecIdleWall}]
	if b == nativeName && okB && okI && len(back.Values) > 0 && len(idle.Values) > 0 {
		mb, mi := stats.Median(back.Values), stats.Median(idle.Values)
		out = append(out, fmt.Sprintf("%s: exec true back to back / after 50 ms idle, wall p50: %.2fx (%.3g / %.3g ms)", a, mb/mi, mb, mi))
	}
	return out
}

// spawnArm is one layerfsd of the run and its client.
type spawnArm struct {
	name string
	d    *spawned
	c    *client.Client
	dir  string
	figs *figureSet
	seq  int // names the spawn rounds' branches
}

func startSpawnArm(ctx context.Context, sd SpawnDaemon, dir string, figs *figureSet) (*spawnArm, error) {
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d, err := spawnDaemon(sd.Bin, filepath.Join(dir, "store"), sd.Args...)
	if err != nil {
		return nil, err
	}
	a := &spawnArm{name: sd.Name, d: d, dir: dir, figs: figs}
	if a.c, err = d.dial(ctx); err != nil {
		a.close(ctx)
		return nil, err
	}
	if _, err := a.c.CreateProject(ctx, wire.CreateProject{Name: "spawn"}); err != nil {
		a.close(ctx)
		return nil, err
	}
	// A small base, committed, so that the workspaces show something.
	ws, err := a.c.CreateWorkspace(ctx, a.spec("main"))
	if err == nil {
		var res *client.ExecResult
		res, err = ws.Exec(ctx, "mkdir -p src && for i in $(seq 1 20); do echo $i > src/f$i; done", client.ExecOptions{})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("base: exit %d: %s", res.ExitCode, res.Stderr)
		}
		if err == nil {
			_, err = ws.Commit(ctx, "base")
		}
		if eerr := ws.End(ctx, client.EndOptions{}); err == nil {
			err = eerr
		}
	}
	if err != nil {
		a.close(ctx)
		return nil, err
	}
	return a, nil
}

func (a *spawnArm) spec(branch string) client.WorkspaceSpec {
	return client.WorkspaceSpec{Project: "spawn", Branch: branch}
}

func (a *spawnArm) close(ctx context.Context) {
	if a.c != nil {
		a.c.Close()
	}
	a.d.stop()
	os.RemoveAll(a.dir)
}

// pid is the daemon's process id.
func (a *spawnArm) pid() int { return a.d.cmd.Process.Pid }

// round measures every figure of the arm once.
func (a *spawnArm) round(ctx context.Context, cfg SpawnConfig) error {
	if cfg.part("exec") {
		if err := a.execCPU(ctx, cfg.Execs); err != nil {
			return err
		}
	}
	if cfg.part("idle") {
		if err := a.execAfterIdle(ctx); err != nil {
			return err
		}
	}
	if cfg.part("first") {
		if err := a.firstExec(ctx); err != nil {
			return err
		}
	}
	if cfg.part("throughput") {
		for _, w := range []int{1, 4, 16} {
			if err := a.throughput(ctx, w); err != nil {
				return err
			}
		}
	}
	if cfg.part("spawn") {
		return a.spawn(ctx, cfg.N, cfg.Workers)
	}
	return nil
}

// part reports whether the run measures the part named.
func (cfg SpawnConfig) part(name string) bool {
	return len(cfg.Parts) == 0 || slices.Contains(cfg.Parts, name)
}

// runTrue runs true in ws, as an argv (no shell: the native arm execs it
// as one), and checks that it succeeded.
func runTrue(ctx context.Context, ws *client.Workspace) error {
	res, err := ws.ExecArgv(ctx, []string{"true"}, client.ExecOptions{})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("true exited %d: %s", res.ExitCode, res.Stderr)
	}
	return err
}

// cpuWindow reads the daemon tree's and this process's CPU time at its
// start; end records the difference per op.
type cpuWindow struct {
	a      *spawnArm
	tree   treeCPU
	client time.Duration
}

func (a *spawnArm) startCPU() (cpuWindow, error) {
	t, err := readTreeCPU(a.pid())
	self, _ := selfCPU()
	return cpuWindow{a: a, tree: t, client: self}, err
}

// end returns the tree's CPU time per op since the window started, and
// this process's (the SDK's) per op.
func (w cpuWindow) end(ops int) (treeCPU, time.Duration, error) {
	t, err := readTreeCPU(w.a.pid())
	if err != nil {
		return treeCPU{}, 0, err
	}
	self, _ := selfCPU()
	d := t.Sub(w.tree)
	n := time.Duration(ops)
	return treeCPU{User: d.User / n, Sys: d.Sys / n, Below: d.Below / n}, (self - w.client) / n, nil
}

// execCPU runs n execs of true back to back in one workspace and records
// their CPU time (the daemon's, its sandboxes' and the SDK's) and wall.
func (a *spawnArm) execCPU(ctx context.Context, n int) error {
	ws, err := a.c.CreateWorkspace(ctx, a.spec("main"))
	if err != nil {
		return err
	}
	defer ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	if err := runTrue(ctx, ws); err != nil { // the first exec may pay one-off costs
		return err
	}
	w, err := a.startCPU()
	if err != nil {
		return err
	}
	walls := make([]float64, 0, n)
	for range n {
		t0 := time.Now()
		if err := runTrue(ctx, ws); err != nil {
			return err
		}
		walls = append(walls, ms(time.Since(t0)))
	}
	cpu, sdk, err := w.end(n)
	if err != nil {
		return err
	}
	a.figs.add(a.name, FigExecCPU, "ms", ms(cpu.Total()+sdk))
	a.figs.add(a.name, FigExecCPUDaemon, "ms", ms(cpu.User+cpu.Sys))
	a.figs.add(a.name, FigExecCPUSandbox, "ms", ms(cpu.Below))
	a.figs.add(a.name, FigExecCPUClient, "ms", ms(sdk))
	a.figs.add(a.name, FigExecWall, "ms", stats.Median(walls))
	return nil
}

// execAfterIdle runs true spawnThinkCalls times, thinkTime after the end
// of the one before, and records the median wall.
func (a *spawnArm) execAfterIdle(ctx context.Context) error {
	ws, err := a.c.CreateWorkspace(ctx, a.spec("main"))
	if err != nil {
		return err
	}
	defer ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	if err := runTrue(ctx, ws); err != nil {
		return err
	}
	walls := make([]float64, 0, spawnThinkCalls)
	for range spawnThinkCalls {
		time.Sleep(thinkTime)
		t0 := time.Now()
		if err := runTrue(ctx, ws); err != nil {
			return err
		}
		walls = append(walls, ms(time.Since(t0)))
	}
	a.figs.add(a.name, FigExecIdleWall, "ms", stats.Median(walls))
	return nil
}

// firstExec opens a workspace spawnThinkCalls times, runs true in it (the
// wall of that exec is recorded: no sandbox of the workspace is kept yet)
// and ends it.
func (a *spawnArm) firstExec(ctx context.Context) error {
	walls := make([]float64, 0, spawnThinkCalls)
	for range spawnThinkCalls {
		ws, err := a.c.CreateWorkspace(ctx, a.spec("main"))
		if err != nil {
			return err
		}
		t0 := time.Now()
		err = runTrue(ctx, ws)
		d := time.Since(t0)
		if eerr := ws.End(ctx, client.EndOptions{Discard: true}); err == nil {
			err = eerr
		}
		if err != nil {
			return err
		}
		walls = append(walls, ms(d))
	}
	a.figs.add(a.name, FigExecFirstWall, "ms", stats.Median(walls))
	return nil
}

// throughput runs workers workspaces, each running spawnThroughputPer
// execs of true one after the other, all at once, and records execs per
// second (and, with 4 workers, the CPU per exec).
func (a *spawnArm) throughput(ctx context.Context, workers int) error {
	wss := make([]*client.Workspace, workers)
	for i := range wss {
		w, err := a.c.CreateWorkspace(ctx, a.spec("main"))
		if err != nil {
			return err
		}
		defer w.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
		wss[i] = w
	}
	cw, err := a.startCPU()
	if err != nil {
		return err
	}
	t0 := time.Now()
	err = parallel(workers, workers, func(i int) error {
		for range spawnThroughputPer {
			if err := runTrue(ctx, wss[i]); err != nil {
				return err
			}
		}
		return nil
	})
	el := time.Since(t0)
	if err != nil {
		return err
	}
	n := workers * spawnThroughputPer
	a.figs.add(a.name, spawnThroughputFig(workers), "execs/s", float64(n)/el.Seconds())
	if workers == 4 {
		cpu, sdk, err := cw.end(n)
		if err != nil {
			return err
		}
		a.figs.add(a.name, FigThroughputCPU4, "ms", ms(cpu.Total()+sdk))
	}
	return nil
}

// spawn opens n workspaces on a new branch, workers at a time, and runs
// true in each; it records the wall time from the first request to the
// last result, the CPU time per workspace, then the memory each open
// workspace holds, then the wall time of ending them all.
func (a *spawnArm) spawn(ctx context.Context, n, workers int) error {
	a.seq++
	branch := "spawn-" + strconv.Itoa(a.seq)
	if _, err := a.c.ForkBranch(ctx, "spawn", branch, "main"); err != nil {
		return err
	}
	settleMemory() // this process's garbage is not the daemon's, but its pages are the host's
	daemon0, sandbox0, err := treeMemory(a.pid())
	if err != nil {
		return err
	}
	kernel0, err := kernelMemory()
	if err != nil {
		return err
	}
	wss := make([]*client.Workspace, n)
	defer func() {
		for _, w := range wss {
			if w != nil {
				w.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
			}
		}
	}()
	cw, err := a.startCPU()
	if err != nil {
		return err
	}
	t0 := time.Now()
	err = parallel(n, workers, func(i int) error {
		w, err := a.c.CreateWorkspace(ctx, a.spec(branch))
		if err != nil {
			return err
		}
		wss[i] = w
		return runTrue(ctx, w)
	})
	el := time.Since(t0)
	if err != nil {
		return err
	}
	cpu, sdk, err := cw.end(n)
	if err != nil {
		return err
	}
	a.figs.add(a.name, FigSpawn, "ms", ms(el))
	a.figs.add(a.name, FigSpawnPer, "ms", ms(el)/float64(n))
	a.figs.add(a.name, FigSpawnCPU, "ms", ms(cpu.Total()+sdk))

	// The memory of n open workspaces, each of which has run a command.
	time.Sleep(200 * time.Millisecond) // let the execs' teardown finish
	daemon1, sandbox1, err := treeMemory(a.pid())
	if err != nil {
		return err
	}
	kernel1, err := kernelMemory()
	if err != nil {
		return err
	}
	perMiB := func(d int64) float64 { return float64(d) / float64(n) / (1 << 20) }
	a.figs.add(a.name, FigDaemonMemory, "MiB", perMiB(daemon1-daemon0))
	a.figs.add(a.name, FigSandboxMemory, "MiB", perMiB(sandbox1-sandbox0))
	a.figs.add(a.name, FigKernelMemory, "MiB", perMiB(kernel1-kernel0))

	t1 := time.Now()
	err = parallel(n, workers, func(i int) error {
		err := wss[i].End(ctx, client.EndOptions{Discard: true})
		wss[i] = nil
		return err
	})
	if err != nil {
		return err
	}
	a.figs.add(a.name, FigSpawnEnd, "ms", ms(time.Since(t1)))
	return nil
}

// parallel runs f(0) ... f(n-1), workers at a time, and returns the first
// error (the others still run).
func parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// nativeArm runs the same commands as plain processes of this one.
type nativeArm struct {
	truePath string
	figs     *figureSet
}

func (n *nativeArm) run(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, n.truePath)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	return cmd.Run()
}

// round measures the native figures once: the spawn's N commands Workers
// at a time, and Execs back to back with their CPU time.
func (n *nativeArm) round(ctx context.Context, cfg SpawnConfig) error {
	if cfg.part("spawn") {
		t0 := time.Now()
		if err := parallel(cfg.N, cfg.Workers, func(int) error { return n.run(ctx) }); err != nil {
			return err
		}
		el := time.Since(t0)
		n.figs.add(nativeName, FigSpawn, "ms", ms(el))
		n.figs.add(nativeName, FigSpawnPer, "ms", ms(el)/float64(cfg.N))
	}
	if !cfg.part("exec") && !cfg.part("idle") {
		return nil
	}

	self0, kids0 := selfCPU()
	walls := make([]float64, 0, cfg.Execs)
	for range cfg.Execs {
		t := time.Now()
		if err := n.run(ctx); err != nil {
			return err
		}
		walls = append(walls, ms(time.Since(t)))
	}
	self1, kids1 := selfCPU()
	per := time.Duration(cfg.Execs)
	n.figs.add(nativeName, FigExecCPU, "ms", ms((self1-self0+kids1-kids0)/per))
	n.figs.add(nativeName, FigExecWall, "ms", stats.Median(walls))
	return nil
}
