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
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/catalog"
)

// benchFleetCmd measures the fleet figures (issue 15): fork and small-commit
// latency on the embedded Store and on a shared one, a large tree opened
// and read on the host that committed it and on one that never saw it, and
// the aggregate exec throughput of one, two and three daemons.
func benchFleetCmd(a *app) *cobra.Command {
	var cfg bench.FleetConfig
	var dir, figures, logFile string
	c := &cobra.Command{
		Use:   "fleet --url 'postgres://...?bucket=s3://HOST/BUCKET' [--figures latency,open,execs] [--files N] [--samples N] [--rounds N] [--exec-for D] [--clients N]",
		Short: "Measure fork and commit latency on SQLite vs PostgreSQL+S3, a large tree opened on a second host, exec throughput of 1-3 daemons",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.URL == "" {
				return usageError{fmt.Errorf("--url is required: a shared Store's URL (docs/fleet.md)")}
			}
			if cfg.Files < bench.FilesPerLargeDir || cfg.Samples < 1 || cfg.Rounds < 1 {
				return usageError{fmt.Errorf("--files must be at least %d, --samples and --rounds at least 1", bench.FilesPerLargeDir)}
			}
			if cfg.ExecFor <= 0 || cfg.ExecClients < 1 {
				return usageError{fmt.Errorf("--exec-for must be positive, --clients at least 1")}
			}
			cfg.Figures = strings.Split(figures, ",")
			for _, f := range cfg.Figures {
				if !slices.Contains(bench.FleetFigures, f) {
					return usageError{fmt.Errorf("--figures %q: known figures are %s", f, strings.Join(bench.FleetFigures, ", "))}
				}
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
			if logFile != "" {
				f, err := os.Create(logFile)
				if err != nil {
					return err
				}
				defer f.Close()
				cfg.Logger = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))
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
	c.Flags().IntVar(&cfg.Rounds, "rounds", 1, "rounds of the open figure, each on a new tree")
	c.Flags().StringVar(&figures, "figures", strings.Join(bench.FleetFigures, ","), "comma-separated figures to measure: latency (fork, small commit), open (the large tree on a second host), execs (exec throughput of 1, 2 and 3 daemons)")
	c.Flags().DurationVar(&cfg.ExecFor, "exec-for", 20*time.Second, "how long each exec-throughput round runs")
	c.Flags().IntVar(&cfg.ExecClients, "clients", 2, "concurrent callers per daemon in the exec throughput, each running true in a loop")
	c.Flags().StringVar(&dir, "dir", "", "directory for the hosts' directories (default: a temporary one, removed after)")
	c.Flags().StringVar(&logFile, "log", "", "write the hosts' daemons' logs (JSON lines) to this file")
	return c
}
