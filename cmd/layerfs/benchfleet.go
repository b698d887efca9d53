package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/bench"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/catalog"
)

// benchFleetCmd measures the fleet figures (issue 15): fork and small-commit
// latency on the embedded Store and on a shared one, and a large tree opened
// and read on the host that committed it and on one that never saw it.
func benchFleetCmd(a *app) *cobra.Command {
	var cfg bench.FleetConfig
	var dir string
	c := &cobra.Command{
		Use:   "fleet --url 'postgres://...?bucket=s3://HOST/BUCKET' [--files N] [--samples N]",
		Short: "Measure fork and commit latency on SQLite vs PostgreSQL+S3, and a large tree opened on a second host",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.URL == "" {
				return usageError{fmt.Errorf("--url is required: a shared Store's URL (docs/fleet.md)")}
			}
			if cfg.Files < bench.FilesPerLargeDir || cfg.Samples < 1 {
				return usageError{fmt.Errorf("--files must be at least %d, --samples at least 1", bench.FilesPerLargeDir)}
			}
			if dir == "" {
				d, err := os.MkdirTemp("", "layerfs-fleet-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				dir = d
			}
			cfg.WorkDir, _ = filepath.Abs(dir)
			cfg.NewPlatform = func(name string) (platforms.Platform, error) {
				return catalog.New(name, catalog.Options{Project: "fleet"})
			}
			cfg.Progress = func(what string) {
				if !a.json {
					fmt.Fprintln(a.stderr, what)
				}
			}
			rep, err := bench.RunFleet(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if a.json {
				return a.emit(rep, nil)
			}
			fmt.Fprintln(a.stdout, "layerfs bench fleet")
			return rep.WriteTable(a.stdout)
		},
	}
	c.Flags().StringVar(&cfg.URL, "url", os.Getenv("LAYERFS_BENCH_STORE_URL"), "the shared Store's URL (default $LAYERFS_BENCH_STORE_URL)")
	c.Flags().IntVar(&cfg.Files, "files", 10_000, "files of the tree opened on the second host")
	c.Flags().IntVar(&cfg.Samples, "samples", 50, "samples per latency figure")
	c.Flags().StringVar(&dir, "dir", "", "directory for the hosts' directories (default: a temporary one, removed after)")
	return c
}
