package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/bench/report"
)

// Figures of RunServicesExec.
const (
	FigExecBesideServices         = "exec true, two services running, SDK wall"
	FigExecOverheadBesideServices = "exec true, two services running, fixed overhead"
)

// twoServices are the services of the second arm: a Python HTTP server
// and a process that only sleeps.
var twoServices = []struct{ name, body string }{
	{"web", "exec python3 -m http.server 8000 --bind 127.0.0.1"},
	{"idle", "exec sleep 100000"},
}

// RunServicesExec measures an exec of true in a workspace without services
// and in one with two services running (its execs then run beside them,
// in their sandbox), the arms taking turns call by call, on the local
// platform of a daemon over a fresh Store.
func RunServicesExec(ctx context.Context, cfg SessionConfig) ([]report.SessionFigure, error) {
	if cfg.Calls <= 0 {
		cfg.Calls = 30
	}
	log, say := runOutputs(cfg.Logger, cfg.Progress)
	const name = "local"
	t, err := prepare(ctx, Config{NewPlatform: cfg.NewPlatform}, name, log)
	if err != nil {
		return nil, err
	}
	defer t.p.Down(context.WithoutCancel(ctx))
	dir := filepath.Join(cfg.WorkDir, "services-"+name)
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	c, release, err := t.connect(ctx, filepath.Join(dir, "store"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer release()
	s := &session{ctx: ctx, c: c, platform: name, calls: cfg.Calls, say: say, dir: dir, dataPath: cfg.DataPath}
	if err := s.base(); err != nil {
		return nil, err
	}
	var ws [2]*client.Workspace
	for i := range ws {
		if ws[i], err = c.CreateWorkspace(ctx, s.spec()); err != nil {
			return nil, err
		}
		defer ws[i].End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	}
	for _, sv := range twoServices {
		if _, err := ws[1].StartServiceShell(ctx, sv.body, client.ServiceOptions{Name: sv.name}); err != nil {
			return nil, fmt.Errorf("start service %s: %w", sv.name, err)
		}
	}
	for _, w := range ws {
		if _, err := w.Exec(ctx, "true", client.ExecOptions{}); err != nil { // one-off costs
			return nil, err
		}
	}
	say(name + ": exec true without and with two services running")
	arms := []*execArm{
		{ws: ws[0], wall: s.fig(report.FigWarmExec, "ms"), over: s.fig(FigExecOverhead, "ms")},
		{ws: ws[1], wall: s.fig(FigExecBesideServices, "ms"), over: s.fig(FigExecOverheadBesideServices, "ms")},
	}
	s.execTrue(arms, 0)
	if list, err := ws[1].Services(ctx); err != nil || len(list) != len(twoServices) || list[0].State != "running" || list[1].State != "running" {
		return nil, fmt.Errorf("the services did not run throughout: %+v %v", list, err)
	}
	var figs []report.SessionFigure
	for _, f := range s.figs {
		figs = append(figs, *f)
	}
	return figs, nil
}
