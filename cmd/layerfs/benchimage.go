package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/bench"
	"layerfs.dev/layerfs/internal/platforms/local"
)

// benchImageCmd measures images (issue 41): import, open, the first
// import numpy against docker run, a rebuild against Docker's.
func benchImageCmd(a *app) *cobra.Command {
	var cfg bench.ImageConfig
	var dir string
	c := &cobra.Command{
		Use:   "image [--rounds N] [--arms A,B] [--dir D]",
		Short: "Measure images: import and Store growth, open on an image, first import numpy against docker run, rebuild against docker build",
		Long: `Builds two images with the Docker engine from this host's Debian packages
(no registry is reachable): a base of about 300 MB (python3 with numpy, git,
build-essential's compilers; scripts/bench-image-setup installs what the
host lacks) and a second that adds one package (perl-modules-5.36) as one
layer. Imports both into a fresh Store (time, and the Store's growth for the
second against its layer's bytes), then measures, --rounds times each, side
by side: a workspace opened on the image against one on the host runtime
(--settle after a first workspace on the image, whose contents the daemon
prefetches in the background);
the first python3 -c 'import numpy' in a new workspace on the image against
docker run --rm of the same image, the page cache dropped before each (sync,
then echo 3 > /proc/sys/vm/drop_caches); a rebuild of a five-step build file
after an edit of its last step, layerfs image build against docker build
(cached); --arms picks some of them (open, numpy, rebuild). Needs root and a
Docker engine.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if cfg.Rounds < 1 {
				return usageError{fmt.Errorf("--rounds must be at least 1")}
			}
			for _, a := range cfg.Arms {
				if !slices.Contains(bench.ImageArms, a) {
					return usageError{fmt.Errorf("--arms: %q is not one of %q", a, bench.ImageArms)}
				}
			}
			if dir == "" {
				d, err := os.MkdirTemp("", "layerfs-bench-image-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				dir = d
			}
			var err error
			if cfg.WorkDir, err = filepath.Abs(dir); err != nil {
				return err
			}
			p := local.New(local.Options{})
			if err := p.Up(ctx); err != nil {
				return err
			}
			defer p.Down(ctx)
			cfg.Platform, cfg.Log = p, slog.New(slog.DiscardHandler)
			cfg.Progress = func(what string) {
				if !a.json {
					fmt.Fprintln(a.stderr, what)
				}
			}
			rep, err := bench.RunImage(ctx, cfg)
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
	c.Flags().IntVar(&cfg.Rounds, "rounds", 5, "samples of each timed figure")
	c.Flags().DurationVar(&cfg.Settle, "settle", 30*time.Second, "before the opens, how long to let the daemon's background work on the new image (its contents' prefetch) end")
	c.Flags().StringSliceVar(&cfg.Arms, "arms", nil, "the timed figures to measure after the imports: open, numpy, rebuild (default: all)")
	c.Flags().StringVar(&dir, "dir", "", "directory for the Store and the build context (default: a temporary one, removed after)")
	return c
}
