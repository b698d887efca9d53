package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/bench"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/catalog"
)

// benchFirstReadCmd measures the first-read figures (issue 31): a tree
// imported and read whole by a new workspace, with the page cache warm and
// dropped, against native reads of the same tree; a commit of changed
// files and their first read; in each daemon mode, side by side.
func benchFirstReadCmd(a *app) *cobra.Command {
	var cfg bench.FirstReadConfig
	var dir, fsSpec, modes string
	c := &cobra.Command{
		Use:   "firstread [--tree DIR | --files N] [--changes N] [--samples N] [--modes ready,lazy] [--dir D] [--fs ext4:8G|xfs:8G]",
		Short: "Measure a new workspace's first read of an imported tree against a native read, page cache warm and dropped",
		Long: `Imports a tree (--tree, e.g. "$(go env GOROOT)/src", or a written one of
--files files) into a fresh Store and reads every file of it in the first
workspace opened on it (find . -type f -print0 | xargs -0 cat), right after
the import and, on another fresh Store, with the page cache dropped (and
again after the daemon is restarted on that Store, when no content of its
cache is trusted yet and each is read and checked first); then in a second
workspace; then commits --changes changed files and reads them
in a new workspace with the page cache dropped. The native arm reads a
checkout of the same trees through the same sandbox, with the page cache
dropped and warm. Each sample runs every mode: ready (the daemon's own:
contents in the cache when captured, images built when published, missing
contents prefetched) and lazy (contents materialized by their first read,
images built by the first open). Needs root (it drops the page cache).
With --fs, everything runs on a fresh loop-mounted file system of that
type, the tree copied onto it first.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			ctx := cmd.Context()
			if cfg.Samples < 1 || cfg.Changes < 1 {
				return usageError{fmt.Errorf("--samples and --changes must be at least 1")}
			}
			for _, m := range strings.Split(modes, ",") {
				if m != string(bench.Ready) && m != string(bench.Lazy) {
					return usageError{fmt.Errorf("--modes %q: want %s or %s", m, bench.Ready, bench.Lazy)}
				}
				cfg.Modes = append(cfg.Modes, bench.DaemonMode(m))
			}
			if dir == "" {
				d, err := os.MkdirTemp("", "layerfs-firstread-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				dir = d
			}
			if dir, err = filepath.Abs(dir); err != nil {
				return err
			}
			if fsSpec != "" {
				mnt, cleanup, lerr := loopFS(ctx, dir, fsSpec)
				if lerr != nil {
					return lerr
				}
				defer func() {
					if cerr := cleanup(); err == nil {
						err = cerr
					}
				}()
				dir = mnt
				if cfg.Tree != "" {
					// The native arm and the Store on one file system.
					copied := filepath.Join(dir, "tree")
					if err := copyTree(cfg.Tree, copied); err != nil {
						return fmt.Errorf("copy --tree onto %s: %w", fsSpec, err)
					}
					cfg.Tree = copied
				}
			}
			cfg.WorkDir = dir
			cfg.NewPlatform = func(name string) (platforms.Platform, error) {
				return catalog.New(name, catalog.Options{Project: "firstread"})
			}
			cfg.Progress = func(what string) {
				if !a.json {
					fmt.Fprintln(a.stderr, what)
				}
			}
			rep, err := bench.RunFirstRead(ctx, cfg)
			if err != nil {
				return err
			}
			if a.json {
				return a.emit(rep, nil)
			}
			fmt.Fprintf(a.stdout, "command: layerfs %s\n", strings.Join(os.Args[1:], " "))
			return rep.WriteTable(a.stdout)
		},
	}
	c.Flags().StringVar(&cfg.Tree, "tree", "", "directory to import (default: a written tree of --files files)")
	c.Flags().IntVar(&cfg.Files, "files", 10_000, "files of the written tree (100 a directory, 1-8 KiB each)")
	c.Flags().IntVar(&cfg.Changes, "changes", 1_000, "files the commit changes")
	c.Flags().IntVar(&cfg.Samples, "samples", 3, "samples per mode")
	c.Flags().StringVar(&modes, "modes", "ready,lazy", "comma-separated daemon modes: ready (the daemon's own) and lazy (nothing readied ahead)")
	c.Flags().StringVar(&dir, "dir", "", "directory for the Stores and native copies (default: a temporary one, removed after)")
	c.Flags().StringVar(&fsSpec, "fs", "", "run on a fresh loop-mounted file system, TYPE:SIZE (ext4:8G journaled ext4, xfs:8G XFS with reflinks)")
	return c
}

// copyTree copies the directory src to dst (which must not exist) with
// cp -a.
func copyTree(src, dst string) error {
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp -a: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
