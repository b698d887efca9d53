package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/wire"
)

// DefaultColdFiles is the size of the cold figure's tree.
const DefaultColdFiles = 10_000

// coldReads measures the cold figure (report.ColdRead) on each target
// whose daemon runs on this host, samples times: a fresh Store imports a
// tree of files files; with the page cache dropped, a new workspace
// reads every file; a checkout of the same tree into a native workspace
// is read the same way, with the page cache dropped again. The order of
// the two arms alternates sample by sample.
func coldReads(ctx context.Context, cfg Config, targets []*target, files, samples int, log *slog.Logger) []report.ColdRead {
	var out []report.ColdRead
	tree := filepath.Join(cfg.WorkDir, "cold-tree")
	var treeErr error
	for _, t := range targets {
		c := report.ColdRead{Platform: t.name, Files: files}
		switch {
		case !t.hostFS:
			c.NotRun = "its daemon runs in a guest, whose page cache this host cannot drop"
		case os.Geteuid() != 0:
			c.NotRun = "dropping the page cache needs root"
		}
		if c.NotRun == "" && treeErr == nil {
			if _, err := os.Stat(tree); err != nil {
				treeErr = writeTree(tree, max(files/FilesPerLargeDir, 1), FilesPerLargeDir)
			}
			if treeErr != nil {
				c.NotRun = "write the tree: " + treeErr.Error()
			}
		}
		for i := 0; c.NotRun == "" && i < samples; i++ {
			if cfg.Progress != nil {
				cfg.Progress(i, samples, fmt.Sprintf("cold first read %s #%d", t.name, i+1))
			}
			if err := coldSample(ctx, cfg, t, tree, i, &c); err != nil {
				log.Warn("cold figure not measured", "platform", t.name, "err", err)
				c.NotRun = firstLineOf(err.Error())
			}
		}
		out = append(out, c)
	}
	os.RemoveAll(tree)
	return out
}

// coldSample measures both arms of the cold figure once into c.
func coldSample(ctx context.Context, cfg Config, t *target, tree string, i int, c *report.ColdRead) error {
	dir := filepath.Join(cfg.WorkDir, fmt.Sprintf("cold-%s-%d", t.name, i))
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cl, release, err := t.connect(ctx, filepath.Join(dir, "store"))
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	defer release()
	if _, err := cl.CreateProject(ctx, wire.CreateProject{Name: "cold", FromPath: tree}); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	arms := []func() error{
		func() error {
			d, err := coldArm(ctx, cl, client.WorkspaceSpec{Project: "cold", Branch: "main", Platform: t.wsPlatform, DataPath: cfg.DataPath}, "")
			c.LayerFS = append(c.LayerFS, d)
			return err
		},
		func() error {
			d, err := coldArm(ctx, cl, client.WorkspaceSpec{Native: true, Platform: t.wsPlatform}, "cold")
			c.Native = append(c.Native, d)
			return err
		},
	}
	if i%2 == 1 {
		arms[0], arms[1] = arms[1], arms[0]
	}
	for _, arm := range arms {
		if err := arm(); err != nil {
			return err
		}
	}
	return nil
}

// coldArm opens a workspace of spec (a native one gets a checkout of
// project's main first), drops the page cache and times the read of
// every file.
func coldArm(ctx context.Context, c *client.Client, spec client.WorkspaceSpec, project string) (d time.Duration, err error) {
	ws, err := c.CreateWorkspace(ctx, spec)
	if err != nil {
		return 0, err
	}
	defer ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	if project != "" {
		if _, err := c.Checkout(ctx, project, wire.Checkout{Ref: "main", Path: ws.MountPath(), Overwrite: true}); err != nil {
			return 0, fmt.Errorf("native copy: %w", err)
		}
	}
	if err := dropCaches(); err != nil {
		return 0, err
	}
	return timedExecOf(ctx, ws, readAll)
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
