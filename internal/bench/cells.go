package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/internal/cells"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/verifier"
	"layerfs.dev/layerfs/wire"
)

// Config is one run of the cells.
type Config struct {
	Cells     []cells.Cell
	Platforms []string // in table order; default "local"
	Samples   int      // per cell, platform and arm; default 5
	// OutDir receives samples.jsonl, summary.json, the tables and the
	// chart. Stores and native directories are made under WorkDir
	// (default OutDir/work) and removed sample by sample.
	OutDir  string
	WorkDir string
	// Seed orders the samples (randomised, as the method asks); 0 picks
	// one from the clock. The seed used is in the results' notes.
	Seed int64
	// NewPlatform makes a platform by name; the command wires it.
	NewPlatform func(name string) (platforms.Platform, error)
	// Command and Machine are printed under the tables.
	Command, Machine string
	Logger           *slog.Logger
	// Progress is told about each sample as it starts (done of total).
	Progress func(done, total int, what string)
	// Keep leaves each sample's Store and directories in WorkDir.
	Keep bool
	// QuotaBytes gives each LayerFS workspace a quota of that many bytes
	// (a file system of its own), to measure what one costs; 0 none.
	QuotaBytes int64
	// DataPath is the LayerFS arm's data path (wire.DataPathFUSE or
	// wire.DataPathOverlay); "" is the daemon's default.
	DataPath string
	// Stores are the Stores the daemons of host platforms run on, each a
	// column group of its own with its own native arm, all in one
	// randomised run: StoreEmbedded (the default) and StoreShared.
	Stores []string
	// SharedStoreURL is the shared Store StoreShared runs on (a
	// postgres://...?bucket=s3://... URL); each sample gets a scope of its
	// own in it (StartScopedFleetDaemon), removed after the sample.
	SharedStoreURL string
	// ColdFiles is the size of the cold figure's tree (report.ColdRead,
	// measured Samples times per platform after the cells); 0 means
	// DefaultColdFiles, negative leaves the figure out.
	ColdFiles int
}

// The Stores a run of the cells can put its daemons on.
const (
	StoreEmbedded = "embedded" // SQLite and local packs in the sample's directory
	StoreShared   = "shared"   // PostgreSQL and S3, this host one of a fleet
)

// SharedSuffix ends the name of a platform's column group on the shared
// Store: "local+shared".
const SharedSuffix = "+" + StoreShared

// DaemonLogFile is the daemons' log in a run's output directory.
const DaemonLogFile = "daemon.log"

// target is one platform ready to run samples.
type target struct {
	name string
	p    platforms.Platform
	id   platforms.Identity
	// connect gives a daemon over a fresh Store (host platforms) or the
	// guest daemon (remote platforms) and a function to release it.
	connect func(ctx context.Context, dir string) (*client.Client, func(), error)
	// hostFS tells whether workspace mount paths are readable here.
	hostFS bool
	// wsPlatform is the platform its daemon's workspaces ask for: the
	// target's own on this host; "" (the daemon's default, its own local
	// platform) for a guest daemon, which knows no VM platform.
	wsPlatform string
	// guestBases holds the cells' bases on a guest daemon's host for the
	// run (remote targets only; see guestBase).
	guestBases map[string]guestBase
}

// guestBase is a cell's base held on a guest daemon's host for the whole
// run: uploaded once into a native workspace (dir, its directory there) and
// captured as a project, so that each sample takes the base from there
// (the LayerFS arm captures dir as its first layer, the native arm checks
// the project out) instead of carrying it through the platform's forward
// again, three times per cell and run (a VM's forward is slow for bulk
// data).
type guestBase struct{ ws, dir, project string }

// guestBase returns the base of cell on t's guest, putting it there (from
// hostDir, the base written on this host) on first use.
func (t *target) guestBase(ctx context.Context, c *client.Client, cell cells.Cell, hostDir string) (guestBase, error) {
	if gb, ok := t.guestBases[cell.Base.Name]; ok {
		return gb, nil
	}
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Native: true, Platform: t.wsPlatform})
	if err != nil {
		return guestBase{}, fmt.Errorf("a directory for the base in the guest: %w", err)
	}
	gb := guestBase{ws: ws.ID(), dir: ws.MountPath(), project: strings.ToLower(fmt.Sprintf("base-%s-%d", cell.Base.Name, time.Now().UnixNano()))}
	if err := uploadDir(ctx, ws, hostDir); err != nil {
		ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
		return guestBase{}, fmt.Errorf("upload the base to the guest: %w", err)
	}
	if _, err := c.CreateProject(ctx, wire.CreateProject{Name: gb.project, FromPath: gb.dir, Message: "base " + cell.Base.Name}); err != nil {
		ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
		return guestBase{}, fmt.Errorf("capture the base in the guest: %w", err)
	}
	if t.guestBases == nil {
		t.guestBases = map[string]guestBase{}
	}
	t.guestBases[cell.Base.Name] = gb
	return gb, nil
}

// dropGuestBases ends the workspaces holding t's bases in the guest.
func (t *target) dropGuestBases(ctx context.Context) {
	if len(t.guestBases) == 0 {
		return
	}
	c, release, err := t.connect(ctx, "")
	if err != nil {
		return
	}
	defer release()
	for _, gb := range t.guestBases {
		c.Attach(gb.ws).End(ctx, client.EndOptions{Discard: true})
	}
}

type task struct {
	cell   cells.Cell
	target *target
	arm    report.Arm
	index  int
}

// Run runs every cell on every platform, both arms, Samples times each, in a
// randomised order, appending each sample to OutDir/samples.jsonl as it
// completes, and renders the results into OutDir.
func Run(ctx context.Context, cfg Config) (report.Results, error) {
	cfg.defaults()
	for _, d := range []string{cfg.OutDir, cfg.WorkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return report.Results{}, err
		}
	}
	log := cfg.Logger
	if log == nil {
		// The daemons of the run log to the output directory, where a
		// failed sample's "see the daemon's log" points.
		f, err := os.Create(filepath.Join(cfg.OutDir, DaemonLogFile))
		if err != nil {
			return report.Results{}, err
		}
		defer f.Close()
		log = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	res := report.Results{Machine: cfg.Machine, Command: cfg.Command, Date: time.Now().UTC()}
	for _, c := range cfg.Cells {
		res.Cells = append(res.Cells, report.Cell{ID: c.ID, Title: c.Title, Group: c.Group})
	}
	sampleLog, err := report.OpenLog(filepath.Join(cfg.OutDir, report.SamplesFile))
	if err != nil {
		return res, err
	}
	defer sampleLog.Close()

	targets, down := prepareAll(ctx, cfg, log, &res)
	defer down()
	tasks := shuffledTasks(cfg, targets)
	bases := &baseCache{dir: filepath.Join(cfg.WorkDir, "bases")}
	for n, tk := range tasks {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if cfg.Progress != nil {
			cfg.Progress(n, len(tasks), fmt.Sprintf("%s %s %s #%d", tk.cell.ID, tk.target.name, tk.arm, tk.index+1))
		}
		s := runSample(ctx, cfg, bases, tk, log)
		res.Samples = append(res.Samples, s)
		if err := sampleLog.Append(s); err != nil {
			return res, err
		}
		if !s.Good() {
			log.Warn("sample not good", "cell", s.Cell, "platform", s.Platform, "arm", s.Arm, "reason", s.Reason())
		}
	}
	if cfg.ColdFiles >= 0 {
		files := cfg.ColdFiles
		if files == 0 {
			files = DefaultColdFiles
		}
		res.Cold = coldReads(ctx, cfg, targets, files, cfg.Samples, log)
	}
	if cfg.Progress != nil {
		cfg.Progress(len(tasks), len(tasks), "done")
	}
	if res.Machine != "" {
		res.Machine += fmt.Sprintf("; sample order seed %d", cfg.Seed)
	}
	if !cfg.Keep {
		os.RemoveAll(cfg.WorkDir)
	}
	return res, res.WriteAll(cfg.OutDir)
}

// defaults fills what the Config leaves zero.
func (cfg *Config) defaults() {
	if cfg.Samples <= 0 {
		cfg.Samples = 5
	}
	if len(cfg.Platforms) == 0 {
		cfg.Platforms = []string{"local"}
	}
	if len(cfg.Stores) == 0 {
		cfg.Stores = []string{StoreEmbedded}
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = filepath.Join(cfg.OutDir, "work")
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()
	}
}

// prepareAll brings each platform up, with a target per Store, and adds
// its columns (or why it did not run) to res. down brings the platforms
// down again, the last first, each after dropping its guest's bases.
func prepareAll(ctx context.Context, cfg Config, log *slog.Logger, res *report.Results) (targets []*target, down func()) {
	var ups []*target
	down = func() {
		for _, t := range slices.Backward(ups) {
			t.dropGuestBases(context.WithoutCancel(ctx))
			t.p.Down(context.WithoutCancel(ctx))
		}
	}
	for _, name := range cfg.Platforms {
		t, err := prepare(ctx, cfg, name, log)
		if err != nil {
			log.Warn("platform not run", "platform", name, "err", err)
			res.Platforms = append(res.Platforms, report.Platform{Name: name, NotRun: err.Error()})
			continue
		}
		ups = append(ups, t)
		var embedded string
		for _, st := range cfg.Stores {
			var err error
			id := t.id
			col := report.Platform{Name: name, Identity: &id}
			on := t
			switch st {
			case StoreEmbedded:
				embedded = name
			case StoreShared:
				col.Name += SharedSuffix
				col.Against = embedded
				on, err = t.onSharedStore(cfg.SharedStoreURL, log)
			default:
				err = fmt.Errorf("unknown Store %q: want %s or %s", st, StoreEmbedded, StoreShared)
			}
			if err != nil {
				res.Platforms = append(res.Platforms, report.Platform{Name: col.Name, NotRun: err.Error()})
				continue
			}
			res.Platforms = append(res.Platforms, col)
			targets = append(targets, on)
		}
	}
	return targets, down
}

// shuffledTasks is every sample of the run, in the order the seed gives.
func shuffledTasks(cfg Config, targets []*target) []task {
	var tasks []task
	for _, t := range targets {
		for _, c := range cfg.Cells {
			for i := range cfg.Samples {
				for _, arm := range []report.Arm{report.LayerFS, report.Native} {
					tasks = append(tasks, task{c, t, arm, i})
				}
			}
		}
	}
	rand.New(rand.NewPCG(uint64(cfg.Seed), 0)).Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	return tasks
}

// prepare brings a platform up and decides how samples reach a daemon on it.
func prepare(ctx context.Context, cfg Config, name string, log *slog.Logger) (*target, error) {
	if cfg.NewPlatform == nil {
		return nil, errors.New("no platform constructor")
	}
	p, err := cfg.NewPlatform(name)
	if err != nil {
		return nil, err
	}
	if err := p.Up(ctx); err != nil {
		return nil, err
	}
	id, err := p.Identity(ctx)
	if err != nil {
		p.Down(context.WithoutCancel(ctx))
		return nil, err
	}
	t := &target{name: name, p: p, id: id}
	switch {
	case p.Features().HostMounts:
		t.hostFS = true
		t.wsPlatform = name
		t.connect = func(ctx context.Context, dir string) (*client.Client, func(), error) {
			d, err := StartDaemon(ctx, dir, []platforms.Platform{p}, log)
			if err != nil {
				return nil, nil, err
			}
			return d.Client, func() { d.Close(context.WithoutCancel(ctx)) }, nil
		}
	case p.Features().RemoteDaemon:
		r, ok := p.(platforms.Remote)
		if !ok {
			p.Down(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("platform %s says it runs a guest daemon but gives no endpoint", name)
		}
		// The guest daemon keeps one Store: each sample gets a fresh
		// project in it instead of a fresh Store (docs/benchmarks.md).
		t.connect = func(ctx context.Context, _ string) (*client.Client, func(), error) {
			addr, tok, err := r.Endpoint(ctx)
			if err != nil {
				return nil, nil, err
			}
			// The samples' verification downloads cross the platform's
			// forward: compressed (the cells write runs of zeros).
			c, err := client.Dial(ctx, addr, client.WithToken(tok), client.WithCompressedDownloads())
			if err != nil {
				return nil, nil, err
			}
			return c, func() { c.Close() }, nil
		}
	default:
		p.Down(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("platform %s has no way to serve workspaces", name)
	}
	return t, nil
}

// onSharedStore returns t with its daemons on the shared Store at url: each
// sample's daemon is a host of a scope of its own in url's database and
// bucket (an empty Store, as an embedded sample's is), removed after it.
func (t *target) onSharedStore(url string, log *slog.Logger) (*target, error) {
	if url == "" {
		return nil, errors.New("no shared Store URL")
	}
	if !t.hostFS {
		return nil, fmt.Errorf("platform %s runs its own daemon, not one of this host on a shared Store", t.name)
	}
	s := *t
	s.name += SharedSuffix
	s.connect = func(ctx context.Context, dir string) (*client.Client, func(), error) {
		d, err := StartScopedFleetDaemon(ctx, dir, url, []platforms.Platform{t.p}, log)
		if err != nil {
			return nil, nil, err
		}
		return d.Client, func() {
			if err := d.Close(context.WithoutCancel(ctx)); err != nil {
				log.Warn("close the sample's fleet daemon and remove its Store scope", "err", err)
			}
		}, nil
	}
	return &s, nil
}

// baseCache writes each cell's base once per run, for host-side imports.
type baseCache struct {
	dir  string
	done map[string]string
}

func (b *baseCache) get(ctx context.Context, c cells.Cell) (string, error) {
	if b.done == nil {
		b.done = map[string]string{}
	}
	if d, ok := b.done[c.Base.Name]; ok {
		return d, nil
	}
	d := filepath.Join(b.dir, c.Base.Name)
	os.RemoveAll(d)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	if err := c.WriteBase(ctx, d); err != nil {
		return "", err
	}
	b.done[c.Base.Name] = d
	return d, nil
}

// timedBody is the cell's body as CELLS.md runs it, between two readings of
// the sandbox's clock that go to stderr after a marker.
func timedBody(body string) string {
	return `__t0=$(date +%s%N); ` + cells.Wrap(body) + `; __rc=$?; __t1=$(date +%s%N); echo "` + clockMark + ` $__t0 $__t1" >&2; exit $__rc`
}

const clockMark = "layerfs-bench-clock"

// commandTime reads the sandbox clock readings timedBody printed.
func commandTime(stderr []byte) (time.Duration, error) {
	lines := strings.Split(strings.TrimSpace(string(stderr)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) == 3 && f[0] == clockMark {
			t0, err0 := strconv.ParseInt(f[1], 10, 64)
			t1, err1 := strconv.ParseInt(f[2], 10, 64)
			if err0 != nil || err1 != nil || t1 < t0 {
				break
			}
			return time.Duration(t1 - t0), nil
		}
	}
	return 0, fmt.Errorf("no clock readings in the exec's stderr %q", tail(stderr))
}

func tail(b []byte) string {
	if len(b) > 300 {
		b = b[len(b)-300:]
	}
	return string(b)
}

// wsRunner runs verifier commands in a workspace's sandbox.
type wsRunner struct{ ws *client.Workspace }

func (r wsRunner) Run(ctx context.Context, body string) (string, int, error) {
	res, err := r.ws.Exec(ctx, body, client.ExecOptions{Timeout: 2 * time.Minute})
	if err != nil {
		return "", 0, err
	}
	return string(res.Stdout), res.ExitCode, nil
}

// verify checks a workspace's end state: through its mount when this host
// sees it, else from a download of its tree.
func verify(ctx context.Context, t *target, ws *client.Workspace, c cells.Cell, scratch string) error {
	dir := ws.MountPath()
	if !t.hostFS {
		dir = filepath.Join(scratch, "verify-"+ws.ID())
		if err := ws.Download(ctx, ".", dir); err != nil {
			return fmt.Errorf("download for verification: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	return verifier.Verify(ctx, os.DirFS(dir), c, wsRunner{ws})
}

func runSample(ctx context.Context, cfg Config, bases *baseCache, tk task, log *slog.Logger) report.Sample {
	s := report.Sample{
		Cell: tk.cell.ID, Platform: tk.target.name, Arm: tk.arm, Index: tk.index,
		Start: time.Now().UTC(), Identity: tk.target.id, Status: report.OK,
		Details: map[string]string{}, Phases: map[string]time.Duration{},
	}
	defer func(t0 time.Time) { s.Phases["total"] = time.Since(t0) }(time.Now())
	dir := filepath.Join(cfg.WorkDir, fmt.Sprintf("%s-%s-%s-%d", tk.cell.ID, tk.target.name, tk.arm, tk.index))
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		s.Status, s.Error = report.Failed, err.Error()
		return s
	}
	if !cfg.Keep {
		defer os.RemoveAll(dir)
	}
	s.Details["filesystem"] = DescribeFS(dir)
	c, release, err := tk.target.connect(ctx, filepath.Join(dir, "store"))
	if err != nil {
		s.Status, s.Error = report.Failed, "daemon: "+err.Error()
		return s
	}
	defer release()
	sr := &sampleRun{ctx: ctx, c: c, tk: tk, s: &s, bases: bases, scratch: dir, quota: cfg.QuotaBytes, dataPath: cfg.DataPath}
	if tk.arm == report.LayerFS {
		err = sr.layerfs()
	} else {
		err = sr.native()
	}
	switch {
	case errors.Is(err, errIneligible):
		s.Status, s.Error = report.Ineligible, err.Error()
	case err != nil:
		s.Status, s.Error = report.Failed, err.Error()
	case !s.Verified:
		s.Status = report.Failed
	}
	return s
}

var errIneligible = errors.New("ineligible")

type sampleRun struct {
	ctx      context.Context
	c        *client.Client
	tk       task
	s        *report.Sample
	bases    *baseCache
	scratch  string
	quota    int64 // Config.QuotaBytes
	dataPath string
}

// timed adds the time since t0 to the sample's phase name:
// defer r.timed("base", time.Now()).
func (r *sampleRun) timed(name string, t0 time.Time) {
	r.s.Phases[name] += time.Since(t0)
}

// project makes the sample's project with the cell's base as its first
// layer, captured from a directory on the daemon's host: the base written
// on this host when the daemon runs here, else the copy held in the guest
// for the run (guestBase).
func (r *sampleRun) project(name string) error {
	defer r.timed("base", time.Now())
	ctx, c, cell := r.ctx, r.c, r.tk.cell
	if cell.Base.Write == nil {
		_, err := c.CreateProject(ctx, wire.CreateProject{Name: name})
		return err
	}
	base, err := r.bases.get(ctx, cell)
	if err != nil {
		return err
	}
	if !r.tk.target.hostFS {
		gb, err := r.tk.target.guestBase(ctx, c, cell, base)
		if err != nil {
			return err
		}
		base = gb.dir
	}
	_, err = c.CreateProject(ctx, wire.CreateProject{Name: name, FromPath: base, Message: "base " + cell.Base.Name})
	return err
}

// nativeBase puts the cell's base into a native workspace: uploaded from
// this host when the daemon runs here, else checked out of the copy held
// in the guest (guestBase).
func (r *sampleRun) nativeBase(ws *client.Workspace) error {
	base, err := r.bases.get(r.ctx, r.tk.cell)
	if err != nil {
		return err
	}
	if r.tk.target.hostFS {
		return uploadDir(r.ctx, ws, base)
	}
	gb, err := r.tk.target.guestBase(r.ctx, r.c, r.tk.cell, base)
	if err != nil {
		return err
	}
	_, err = r.c.Checkout(r.ctx, gb.project, wire.Checkout{Ref: "main", Path: ws.MountPath()})
	return err
}

// uploadDir puts the entries of a local directory at a workspace's root.
func uploadDir(ctx context.Context, ws *client.Workspace, dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := ws.Upload(ctx, filepath.Join(dir, e.Name()), e.Name()); err != nil {
			return err
		}
	}
	return nil
}

// probe runs the cell's eligibility probe, if it has one.
func (r *sampleRun) probe(ws *client.Workspace) error {
	if err := cells.Eligible(r.ctx, wsRunner{ws}, r.tk.cell); err != nil {
		return fmt.Errorf("%w: %w", errIneligible, err)
	}
	return nil
}

// timedExec runs the cell body once, timed, and fills the exec figures.
func (r *sampleRun) timedExec(ws *client.Workspace) (*client.ExecResult, error) {
	t0 := time.Now()
	res, err := ws.Exec(r.ctx, timedBody(r.tk.cell.Body), client.ExecOptions{Timeout: 10 * time.Minute})
	wall := time.Since(t0)
	if err != nil {
		return nil, err
	}
	r.s.ExitCode = res.ExitCode
	r.s.ExecWall = wall
	if res.ExitCode != 0 {
		return res, fmt.Errorf("exit %d: %s", res.ExitCode, tail(res.Stderr))
	}
	cmd, err := commandTime(res.Stderr)
	if err != nil {
		return res, err
	}
	r.s.Command = cmd
	r.s.Overhead = wall - cmd
	return res, nil
}

// warm runs the body once, untimed, in a workspace made by open and ended
// before the timed run (the "earlier mount" of cache state class B).
func (r *sampleRun) warm(open func() (*client.Workspace, error)) error {
	defer r.timed("warm-up", time.Now())
	ws, err := open()
	if err != nil {
		return fmt.Errorf("warm-up workspace: %w", err)
	}
	defer ws.End(context.WithoutCancel(r.ctx), client.EndOptions{Discard: true})
	if err := r.probe(ws); err != nil {
		return err
	}
	res, err := ws.Exec(r.ctx, cells.Wrap(r.tk.cell.Body), client.ExecOptions{Timeout: 10 * time.Minute})
	if err != nil {
		return fmt.Errorf("warm-up run: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("warm-up run: exit %d: %s", res.ExitCode, tail(res.Stderr))
	}
	return ws.End(r.ctx, client.EndOptions{Discard: true})
}

func (r *sampleRun) layerfs() error {
	ctx, c, s := r.ctx, r.c, r.s
	project := "cell"
	if !r.tk.target.hostFS {
		// The guest daemon keeps one Store for the whole run: each sample
		// gets a project of its own in it.
		project = strings.ToLower(fmt.Sprintf("cell-%s-%s-%d-%d", r.tk.cell.ID, r.tk.arm, r.tk.index, time.Now().UnixNano()))
	}
	if err := r.project(project); err != nil {
		return fmt.Errorf("base: %w", err)
	}
	spec := client.WorkspaceSpec{Project: project, Branch: "main", Platform: r.tk.target.wsPlatform, QuotaBytes: r.quota, DataPath: r.dataPath}
	if err := r.warm(func() (*client.Workspace, error) { return c.CreateWorkspace(ctx, spec) }); err != nil {
		return err
	}

	t0 := time.Now()
	ws, err := c.CreateWorkspace(ctx, spec)
	s.Mount = time.Since(t0)
	if err != nil {
		return fmt.Errorf("mount: %w", err)
	}
	ended := false
	defer func() {
		if !ended {
			ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
		}
	}()
	if rc := ws.Info().Receipt; rc != nil {
		s.SQLMount = sqlStats(rc)
	}
	s.Details["data_path"] = ws.Info().DataPath

	res, err := r.timedExec(ws)
	if res != nil {
		s.Requests, s.RequestTime = map[string]int64{}, map[string]time.Duration{}
		for op, st := range res.Receipt.FUSE.ByOp {
			s.Requests[op] = st.Count
			s.RequestTime[op] = time.Duration(st.ServiceNs)
		}
		s.DaemonTime = time.Duration(res.Receipt.FUSE.ServiceNs)
		s.SQLRun = sqlStats(&res.Receipt)
	}
	if err != nil {
		return err
	}
	if st, err := ws.Status(ctx); err == nil {
		s.OverlayBytes = st.UpperBytes
	}
	tv := time.Now()
	err = verify(ctx, r.tk.target, ws, r.tk.cell, r.scratch)
	r.timed("verify live", tv)
	if err != nil {
		s.VerifyError = "live: " + err.Error()
		return nil
	}

	t1 := time.Now()
	cr, err := ws.Commit(ctx, "cell "+r.tk.cell.ID)
	s.Commit = time.Since(t1)
	r.timed("commit", t1)
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if cr.Receipt != nil {
		s.SQLCommit = sqlStats(cr.Receipt)
	}
	if st, err := c.Stats(ctx); err == nil {
		s.StoreBytes = st.DBBytes + st.PackBytes
	}

	tv = time.Now()
	fresh, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: project, Branch: "main", At: cr.Commit, Platform: r.tk.target.wsPlatform, DataPath: r.dataPath})
	if err != nil {
		return fmt.Errorf("workspace of the commit: %w", err)
	}
	verr := verify(ctx, r.tk.target, fresh, r.tk.cell, r.scratch)
	fresh.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	r.timed("verify commit", tv)
	if verr != nil {
		s.VerifyError = "commit: " + verr.Error()
		return nil
	}

	t2 := time.Now()
	err = ws.End(ctx, client.EndOptions{})
	s.Unmount = time.Since(t2)
	r.timed("end", t2)
	ended = err == nil
	if err != nil {
		return fmt.Errorf("unmount: %w", err)
	}
	s.Verified = true
	return nil
}

func (r *sampleRun) native() error {
	ctx, c, s := r.ctx, r.c, r.s
	open := func() (*client.Workspace, error) {
		ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Native: true, Platform: r.tk.target.wsPlatform})
		if err != nil {
			return nil, err
		}
		if r.tk.cell.Base.Write != nil {
			if err := r.nativeBase(ws); err != nil {
				ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
				return nil, fmt.Errorf("base: %w", err)
			}
		}
		return ws, nil
	}
	if err := r.warm(open); err != nil {
		return err
	}
	to := time.Now()
	ws, err := open()
	r.timed("open", to)
	if err != nil {
		return err
	}
	defer ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	if _, err := r.timedExec(ws); err != nil {
		return err
	}
	if st, err := ws.Status(ctx); err == nil {
		s.OverlayBytes = st.UpperBytes
	}
	tv := time.Now()
	err = verify(ctx, r.tk.target, ws, r.tk.cell, r.scratch)
	r.timed("verify live", tv)
	if err != nil {
		s.VerifyError = err.Error()
		return nil
	}
	s.Verified = true
	return nil
}

func sqlStats(r *wire.Receipt) report.SQLStats {
	return report.SQLStats{Statements: r.SQL.Statements, Transactions: r.SQL.Transactions, RowsWritten: r.SQL.Rows, BytesWritten: r.StoreBytesWritten}
}
