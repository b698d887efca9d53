package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/checkpoint"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// Checkpoints of a workspace with its processes: CheckpointWorkspace
// freezes the workspace's sandbox (platforms.Checkpointer), commits its
// files while every process is frozen (so the files and the processes are
// of one instant) and stores the process images in the Store as a
// checkpoint record (package checkpoint: content-addressed chunks, the
// record naming the files' commit, which GC and fsck follow).
// RestoreCheckpoint restores one into a workspace whose files are the
// checkpoint's (opened at its files' commit, or a fork of them): its
// services run again, each under its name, with a fresh log.

// CheckpointInfo is a checkpoint taken.
type CheckpointInfo struct {
	store.Checkpoint
	Services []string      // the services it holds, by name
	Frozen   time.Duration // how long the processes were frozen (the files' commit included)
	Took     time.Duration // the whole checkpoint, storing included
	Bytes    int64         // the images' bytes
}

// checkpointMeta is a checkpoint record's Meta: what the engine needs to
// give its services back their names.
type checkpointMeta struct {
	Services []checkpointService `json:"services"`
}

type checkpointService struct {
	Name    string   `json:"name"`
	Argv    []string `json:"argv"`
	Restart string   `json:"restart,omitempty"`
	Pid     int      `json:"pid"`
}

// CheckpointWorkspace checkpoints workspace id with its running services;
// with stop, they end once dumped (a pause).
func (e *Engine) CheckpointWorkspace(ctx context.Context, id, message string, stop bool) (CheckpointInfo, error) {
	t0 := time.Now()
	ctx, acct := account.Open(ctx)
	if err := e.checkOpen(); err != nil {
		return CheckpointInfo{}, err
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return CheckpointInfo{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sb == nil {
		return CheckpointInfo{}, fmt.Errorf("%w: workspace %s ended", errclass.NotFound, id)
	}
	ck, ok := w.sb.(platforms.Checkpointer)
	if !ok {
		return CheckpointInfo{}, fmt.Errorf("%w: the %s platform cannot checkpoint processes; use the local platform", platforms.ErrNoServices, w.opts.Platform)
	}
	meta, svcs := e.runningServices(w, stop)
	scratch, err := os.MkdirTemp(e.workspaceDir(id), "checkpoint-")
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	defer os.RemoveAll(scratch)
	img := filepath.Join(scratch, "img")
	var files wire.CommitResult
	frozen := func(ctx context.Context) error {
		msg := "checkpoint"
		if message != "" {
			msg += ": " + message
		}
		var err error
		files, err = e.commitLocked(ctx, acct, w, id, wire.CommitRequest{Message: msg})
		return err
	}
	st, err := ck.Checkpoint(ctx, platforms.CheckpointSpec{Dir: img, WorkDir: scratch, Stop: stop, Frozen: frozen})
	if err != nil {
		for _, sv := range svcs {
			sv.mu.Lock()
			sv.stopping = false
			sv.mu.Unlock()
		}
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	b, _ := json.Marshal(meta)
	fc, err := store.ParseID(files.Commit)
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: the files' commit: %w", id, err)
	}
	rec, _, err := checkpoint.Save(ctx, e.db, img, store.Checkpoint{ID: checkpoint.NewID(), Project: w.rec.Project, Workspace: id,
		Files: fc, Message: message, Meta: b})
	if err != nil {
		return CheckpointInfo{}, err
	}
	out := CheckpointInfo{Checkpoint: rec, Frozen: st.Frozen, Took: time.Since(t0), Bytes: st.Bytes}
	for _, s := range meta.Services {
		out.Services = append(out.Services, s.Name)
	}
	e.log.Info("workspace checkpoint", "id", id, "checkpoint", rec.ID, "files", fc.Short(), "services", len(out.Services),
		"frozen_ms", float64(st.Frozen)/1e6, "ms", float64(out.Took)/1e6, "stop", stop)
	return out, nil
}

// runningServices lists w's running services for a checkpoint; with stop
// they are marked stopping, so that their end is no failure to restart.
func (e *Engine) runningServices(w *workspace, stop bool) (checkpointMeta, []*service) {
	var meta checkpointMeta
	var svcs []*service
	set := w.serviceSet()
	set.mu.Lock()
	defer set.mu.Unlock()
	for _, sv := range set.byName {
		sv.mu.Lock()
		if sv.cur != nil {
			meta.Services = append(meta.Services, checkpointService{Name: sv.name, Argv: sv.spec.Argv, Restart: sv.restart, Pid: sv.cur.Pid()})
			if stop {
				sv.stopping = true
			}
			svcs = append(svcs, sv)
		}
		sv.mu.Unlock()
	}
	return meta, svcs
}

// RestoreCheckpoint restores checkpoint ckpt's processes into workspace
// id, which must run no service, and returns its services, running.
func (e *Engine) RestoreCheckpoint(ctx context.Context, id, ckpt string) ([]wire.Service, time.Duration, error) {
	if err := e.checkOpen(); err != nil {
		return nil, 0, err
	}
	rec, err := e.db.Checkpoint(ctx, ckpt)
	if err != nil {
		return nil, 0, fmt.Errorf("restore %s: %w", ckpt, err)
	}
	var meta checkpointMeta
	if err := json.Unmarshal(rec.Meta, &meta); err != nil {
		return nil, 0, fmt.Errorf("%w: checkpoint %s: %w", errclass.Corrupt, ckpt, err)
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.sb == nil {
		return nil, 0, fmt.Errorf("%w: workspace %s ended", errclass.NotFound, id)
	}
	rs, ok := w.sb.(platforms.Checkpointer)
	host, _ := w.sb.(platforms.ServiceHost)
	if !ok || host == nil {
		return nil, 0, fmt.Errorf("%w: the %s platform cannot restore processes; use the local platform", platforms.ErrNoServices, w.opts.Platform)
	}
	scratch, err := os.MkdirTemp(e.workspaceDir(id), "restore-")
	if err != nil {
		return nil, 0, fmt.Errorf("restore %s: %w", ckpt, err)
	}
	defer os.RemoveAll(scratch)
	img := filepath.Join(scratch, "img")
	if _, err := checkpoint.Load(ctx, e.db, rec, img); err != nil {
		return nil, 0, err
	}
	set := w.serviceSet()
	set.mu.Lock()
	for _, s := range meta.Services {
		if old := set.byName[s.Name]; old != nil && !old.ended() {
			set.mu.Unlock()
			return nil, 0, fmt.Errorf("%w: service %q runs in workspace %s", errclass.Exists, s.Name, id)
		}
	}
	byPid := map[int]*service{}
	for _, s := range meta.Services {
		sv := &service{name: s.Name, spec: platforms.ExecSpec{Argv: s.Argv}, host: host, restart: s.Restart, log: newServiceLog(serviceLogBytes),
			wake: make(chan struct{}), done: make(chan struct{})}
		if sv.restart == "" {
			sv.restart = wire.RestartNo
		}
		sv.info = wire.Service{Name: s.Name, Argv: s.Argv, Restart: sv.restart, State: wire.ServiceRunning}
		byPid[s.Pid] = sv
	}
	output := func(pid int) (io.Writer, io.Writer) {
		if sv := byPid[pid]; sv != nil {
			return sv.log, sv.log
		}
		return io.Discard, io.Discard
	}
	runs, took, err := rs.RestoreServices(ctx, img, scratch, output)
	if err != nil {
		set.mu.Unlock()
		return nil, 0, fmt.Errorf("restore %s in %s: %w", ckpt, id, err)
	}
	var out []wire.Service
	var started []*service
	var startedRuns []platforms.Service
	for _, run := range runs {
		sv := byPid[run.Pid()]
		if sv == nil { // a service the record does not name: kept running, unnamed
			sv = &service{name: fmt.Sprintf("restored-%d", run.Pid()), host: host, restart: wire.RestartNo, log: newServiceLog(serviceLogBytes),
				wake: make(chan struct{}), done: make(chan struct{})}
			sv.info = wire.Service{Name: sv.name, Restart: wire.RestartNo, State: wire.ServiceRunning}
		}
		sv.mu.Lock()
		sv.cur = run
		sv.info.Pid, sv.info.Started = run.Pid(), run.Started()
		out = append(out, sv.snapshot())
		sv.mu.Unlock()
		set.byName[sv.name] = sv
		started = append(started, sv)
		startedRuns = append(startedRuns, run)
	}
	set.mu.Unlock()
	e.saveServices(w)
	for i, sv := range started {
		set.notify(sv)
		go e.supervise(w, sv, startedRuns[i])
	}
	e.log.Info("workspace restore", "id", id, "checkpoint", ckpt, "services", len(out), "ms", float64(took)/1e6)
	return out, took, nil
}

// OpenCheckpoint opens a new workspace on the checkpoint's project and
// branch at its files' commit and restores its processes there (`ws
// create --at CHECKPOINT`); spec's Project and At are the checkpoint's.
// A restore that fails ends the new workspace again.
func (e *Engine) OpenCheckpoint(ctx context.Context, ckpt string, spec wire.WorkspaceSpec) (wire.Workspace, []wire.Service, error) {
	rec, err := e.db.Checkpoint(ctx, ckpt)
	if err != nil {
		return wire.Workspace{}, nil, fmt.Errorf("open %s: %w", ckpt, err)
	}
	if spec.Branch == "" {
		if src, err := e.db.Workspace(ctx, rec.Workspace); err == nil {
			spec.Branch = src.Branch
		} else {
			spec.Branch = "main"
		}
	}
	spec.Project, spec.At = rec.Project, rec.Files.String()
	ws, err := e.CreateWorkspace(ctx, spec)
	if err != nil {
		return ws, nil, err
	}
	svcs, _, err := e.RestoreCheckpoint(ctx, ws.ID, ckpt)
	if err != nil {
		_ = e.EndWorkspace(context.WithoutCancel(ctx), ws.ID, true)
		return wire.Workspace{}, nil, err
	}
	return ws, svcs, nil
}

// ForkWithProcesses checkpoints workspace id, left running, and opens
// count workspaces from the checkpoint, each with the source's files (as
// the checkpoint committed them) and its services restored in a sandbox
// of its own. Forks made before a failure are ended again.
func (e *Engine) ForkWithProcesses(ctx context.Context, id string, count int) (CheckpointInfo, []wire.Workspace, error) {
	if count < 1 || count > wire.MaxForkCount {
		return CheckpointInfo{}, nil, fmt.Errorf("%w: count %d: want 1 to %d", errclass.Invalid, count, wire.MaxForkCount)
	}
	ck, err := e.CheckpointWorkspace(ctx, id, "fork", false)
	if err != nil {
		return ck, nil, err
	}
	var out []wire.Workspace
	for range count {
		ws, _, err := e.OpenCheckpoint(ctx, ck.ID, wire.WorkspaceSpec{})
		if err != nil {
			for _, w := range out {
				_ = e.EndWorkspace(context.WithoutCancel(ctx), w.ID, true)
			}
			return ck, nil, fmt.Errorf("fork %s with its processes: %w", id, err)
		}
		out = append(out, ws)
	}
	return ck, out, nil
}
