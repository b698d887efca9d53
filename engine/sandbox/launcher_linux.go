package sandbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/platforms"
)

// killGrace is how long past its timeout the launcher waits for the init
// to report before it kills the init itself.
const killGrace = 5 * time.Second

// Launcher starts sandboxes. The zero value is ready to use; a Launcher is
// safe for concurrent use.
type Launcher struct {
	// Exe is the binary re-executed as the sandbox init; it must call
	// InitMain first thing. Empty means this binary (/proc/self/exe, which
	// stays valid even if the file is replaced on disk).
	Exe string
	// Logger receives setup failures and cleanup problems; nil is silent.
	Logger *slog.Logger
	// NoCgroups makes the launcher use rlimits even where cgroups exist.
	NoCgroups bool

	once   sync.Once
	cg     *cgroups
	prefix string // names this launcher's cgroups: layerfs-<random>-<n>
	seq    atomic.Uint64

	mu      sync.Mutex
	running map[int]bool // pids of live inits

	// trace, when set, gets every exec's phase marks (tests).
	trace func([]mark)
}

func (l *Launcher) init() {
	l.once.Do(func() {
		var b [6]byte
		_, _ = rand.Read(b[:])
		l.prefix = "layerfs-" + hex.EncodeToString(b[:]) + "-"
		l.running = map[int]bool{}
		if l.NoCgroups {
			l.cg = &cgroups{}
			return
		}
		cg, err := detectCgroups()
		if err != nil {
			l.logger().Warn("no cgroups, falling back to rlimits", "err", err)
			cg = &cgroups{}
		}
		l.cg = cg
	})
}

func (l *Launcher) logger() *slog.Logger {
	if l.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.Logger
}

// Limits tells which limits this launcher enforces with cgroups (the rest
// fall back to rlimits, or to nothing).
func (l *Launcher) Limits() (memory, pids bool) {
	l.init()
	return l.cg.hasMemory(), l.cg.hasPids()
}

// Run runs one exec in a fresh sandbox and returns when the command and
// every process it started are gone. Output past the spec's limit is
// discarded and reported in the result. An error means the exec could not
// be run as asked (bad config, setup failure, canceled context); a command
// that fails is a result with a non-zero ExitCode and no error.
func (l *Launcher) Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	t0 := time.Now()
	lm := marks{}
	lm.add("run")
	l.init()
	var res platforms.ExecResult
	if err := cfg.validate(); err != nil {
		return res, err
	}
	ic, err := l.initConfig(cfg)
	if err != nil {
		return res, err
	}
	spec := cfg.Spec

	var cg *execCgroup
	if l.cg.hasMemory() || l.cg.hasPids() {
		cg, err = l.cg.create(l.prefix+strconv.FormatUint(l.seq.Add(1), 10), spec.MemoryBytes, ic.pids)
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrSetup, err)
		}
		defer func() {
			if err := cg.remove(); err != nil {
				l.logger().Warn("sandbox cgroup left behind", "err", err)
			}
		}()
	}
	if !l.cg.hasMemory() && spec.MemoryBytes > 0 {
		ic.RlimitAS = uint64(spec.MemoryBytes)
	}
	// RLIMIT_NPROC counts every process of the uid on the host, so it is
	// only a stand-in for the pids cgroup when the command is not root.
	if !l.cg.hasPids() && ic.UID != 0 {
		ic.RlimitNproc = uint64(ic.pids)
	}

	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return res, err
	}
	defer cfgW.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		return res, err
	}
	defer repR.Close()

	limit := spec.OutputLimit
	if limit == 0 {
		limit = platforms.DefaultOutputLimit
	}
	outW := &capWriter{w: stdout, limit: limit}
	errW := &capWriter{w: stderr, limit: limit}
	flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC)
	if !cfg.Network {
		flags |= unix.CLONE_NEWNET
	}
	exe := l.Exe
	if exe == "" {
		exe = "/proc/self/exe"
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{initArg0},
		Env:        []string{},
		Dir:        "/", // never the workspace: see the package comment
		Stdin:      spec.Stdin,
		Stdout:     outW,
		Stderr:     errW,
		ExtraFiles: []*os.File{cfgR, repW},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: flags,
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
		},
		// Everything that could hold the output pipes dies with the init;
		// this only bounds a Stdin reader that never returns.
		WaitDelay: time.Second,
	}
	if cg != nil && cg.fd >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cg.fd
	}
	err = cmd.Start()
	cfgR.Close()
	repW.Close()
	if err != nil {
		return res, fmt.Errorf("%w: start init: %v", ErrSetup, err)
	}
	lm.add("started")
	pid := cmd.Process.Pid
	l.track(pid, true)
	defer l.track(pid, false)

	var killed atomic.Bool
	kill := func() { killed.Store(true); _ = cmd.Process.Kill() }
	stopCtx := context.AfterFunc(ctx, kill)
	defer stopCtx()
	backstop := time.AfterFunc(ic.Timeout+killGrace, kill)
	defer backstop.Stop()

	// The init waits for its config, so it runs nothing before it is in
	// its cgroup.
	if cg != nil {
		if err := cg.add(pid); err != nil {
			kill()
			_ = cmd.Wait()
			return res, fmt.Errorf("%w: %v", ErrSetup, err)
		}
	}
	werr := json.NewEncoder(cfgW).Encode(ic)
	if cerr := cfgW.Close(); werr == nil {
		werr = cerr
	}
	lm.add("sent")
	raw, rerr := io.ReadAll(repR)
	lm.add("got")
	waitErr := cmd.Wait()
	lm.add("waited")
	if werr != nil {
		return res, fmt.Errorf("%w: send config: %v", ErrSetup, werr)
	}

	var rep initReport
	reported := rerr == nil && len(raw) > 0 && json.Unmarshal(raw, &rep) == nil
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("sandbox exec: %w", ctx.Err())
	case reported && rep.Error != "":
		l.logger().Warn("sandbox setup failed", "workspace", cfg.Workspace, "err", rep.Error)
		return res, fmt.Errorf("%w: %s", ErrSetup, rep.Error)
	case reported:
		res.ExitCode, res.Signal, res.TimedOut, res.Command = rep.ExitCode, rep.Signal, rep.TimedOut, rep.Command
	default:
		// The init died without a report: killed by the backstop, or by
		// the OOM killer of the exec's memory cgroup.
		res.TimedOut = killed.Load()
		res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), unix.SignalName(syscall.SIGKILL)
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				res.ExitCode, res.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
			}
		}
		l.logger().Warn("sandbox init ended without a report", "workspace", cfg.Workspace,
			"wait", waitErr, "oom", cg != nil && cg.oomKilled())
	}
	if cg != nil && res.ExitCode == 137 && cg.oomKilled() {
		l.logger().Info("sandbox hit its memory limit", "workspace", cfg.Workspace, "limit", spec.MemoryBytes)
	}
	res.OutputTruncated = outW.truncated || errW.truncated
	if cg != nil {
		if err := cg.remove(); err != nil {
			l.logger().Warn("sandbox cgroup left behind", "err", err)
		}
	}
	res.Wall = time.Since(t0)
	lm.add("done")
	l.tracePhases(lm, rep.Marks)
	if res.Command == 0 || res.Command > res.Wall {
		res.Command = res.Wall
	}
	res.Launch = res.Wall - res.Command
	if err := errors.Join(outW.err, errW.err); err != nil {
		return res, fmt.Errorf("sandbox output: %w", err)
	}
	return res, nil
}

// initConfig resolves a validated Config into what the init is sent.
func (l *Launcher) initConfig(cfg Config) (initConfigX, error) {
	s := cfg.Spec
	ws, err := realDir(cfg.Workspace)
	if err != nil {
		return initConfigX{}, fmt.Errorf("%w: workspace: %v", ErrInvalidConfig, err)
	}
	root := ""
	if cfg.RootDir != "" {
		if root, err = realDir(cfg.RootDir); err != nil {
			return initConfigX{}, fmt.Errorf("%w: root dir: %v", ErrInvalidConfig, err)
		}
	}
	dir, _ := cleanDir(s.Dir)
	timeout := s.Timeout
	if timeout == 0 {
		timeout = platforms.DefaultTimeout
	}
	pids := s.Pids
	if pids == 0 {
		pids = platforms.DefaultPids
	}
	host := s.Hostname
	if host == "" {
		host = DefaultHostname
	}
	return initConfigX{initConfig: initConfig{
		Workspace: ws, RootDir: root, Network: cfg.Network,
		Argv: s.Argv, Env: sandboxEnv(s.Env), Dir: dir, Timeout: timeout,
		UID: s.UID, GID: s.GID, Hostname: host,
	}, pids: pids}, nil
}

// initConfigX is the wire config plus what only the launcher needs.
type initConfigX struct {
	initConfig
	pids int
}

// MarshalJSON sends only the wire part.
func (x initConfigX) MarshalJSON() ([]byte, error) { return json.Marshal(x.initConfig) }

// realDir resolves symlinks in an absolute path and checks it is a
// directory: the init clones it without following symlinks.
func realDir(p string) (string, error) {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(r)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", p)
	}
	return r, nil
}

func (l *Launcher) track(pid int, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on {
		l.running[pid] = true
	} else {
		delete(l.running, pid)
	}
}

// Leaks lists what this launcher's past execs left behind on the host:
// cgroups that were not removed and inits still running. Empty while no
// exec is in flight means clean.
func (l *Launcher) Leaks() ([]string, error) {
	l.init()
	var out []string
	l.mu.Lock()
	for pid := range l.running {
		out = append(out, "sandbox init still running: pid "+strconv.Itoa(pid))
	}
	l.mu.Unlock()
	for _, parent := range []string{l.cg.unified, l.cg.memory, l.cg.pids} {
		if parent == "" {
			continue
		}
		ents, err := os.ReadDir(parent)
		if err != nil {
			return out, err
		}
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), l.prefix) {
				out = append(out, "sandbox cgroup left behind: "+filepath.Join(parent, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// capWriter passes the first limit bytes to w and drains the rest, so a
// chatty command never blocks on a full pipe. A failing w is remembered and
// the stream still drained.
type capWriter struct {
	w         io.Writer
	limit, n  int64
	truncated bool
	err       error
}

func (c *capWriter) Write(p []byte) (int, error) {
	keep := p
	if room := c.limit - c.n; int64(len(p)) > room {
		keep = p[:max(room, 0)]
		c.truncated = true
	}
	c.n += int64(len(keep))
	if len(keep) > 0 && c.w != nil && c.err == nil {
		if _, err := c.w.Write(keep); err != nil {
			c.err = err
		}
	}
	return len(p), nil
}

// tracePhases logs (at debug level) how long each phase of an exec took,
// merging the launcher's and the init's marks on their shared clock.
func (l *Launcher) tracePhases(launcher, init marks) {
	all := append(slices.Clone(launcher), init...)
	slices.SortStableFunc(all, func(a, b mark) int { return cmp.Compare(a.NS, b.NS) })
	if l.trace != nil {
		l.trace(all)
	}
	if !l.logger().Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := make([]any, 0, 2*len(all))
	for i := 1; i < len(all); i++ {
		attrs = append(attrs, all[i].Name, time.Duration(all[i].NS-all[i-1].NS))
	}
	l.logger().Debug("sandbox phases", attrs...)
}
