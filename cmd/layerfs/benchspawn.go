package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/bench"
	"layerfs.dev/layerfs/internal/bench/report"
)

// benchSpawnCmd measures what an exec costs against what a process costs:
// CPU per exec, throughput, back-to-back latency and a spawn of N
// workspaces, each beside the same commands as plain processes.
func benchSpawnCmd(a *app) *cobra.Command {
	var daemons, dir, fsSpec string
	var cfg bench.SpawnConfig
	var noUserNS bool
	var parts string
	c := &cobra.Command{
		Use:   "spawn [--n 100] [--workers 8] [--execs 200] [--rounds 3] [--fs ext4:8G] [--daemon [NAME=]LAYERFSD,...]",
		Short: "Measure CPU per exec, throughput and a spawn of N workspaces against plain processes",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.N < 1 || cfg.Workers < 1 || cfg.Execs < 1 || cfg.Rounds < 1 {
				return usageError{fmt.Errorf("--n, --workers, --execs and --rounds must be at least 1")}
			}
			if parts != "" {
				cfg.Parts = strings.Split(parts, ",")
				for _, p := range cfg.Parts {
					if !slices.Contains(bench.SpawnParts, p) {
						return usageError{fmt.Errorf("--parts %q: want some of %s", p, strings.Join(bench.SpawnParts, ","))}
					}
				}
			}
			if daemons == "" {
				d, err := findDaemon()
				if err != nil {
					return err
				}
				daemons = "layerfsd=" + d
			}
			for i, spec := range strings.Split(daemons, ",") {
				name, bin, ok := strings.Cut(spec, "=")
				if !ok {
					name, bin = fmt.Sprintf("layerfsd-%d", i+1), spec
				}
				bin, _ = filepath.Abs(bin)
				d := bench.SpawnDaemon{Name: name, Bin: bin}
				if noUserNS {
					d.Args = append(d.Args, "--no-user-namespace")
				}
				cfg.Daemons = append(cfg.Daemons, d)
			}
			if dir == "" {
				d, err := os.MkdirTemp("", "layerfs-spawn-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				dir = d
			}
			cfg.WorkDir, _ = filepath.Abs(dir)
			if fsSpec != "" {
				mnt, cleanup, err := loopFS(cmd.Context(), cfg.WorkDir, fsSpec)
				if err != nil {
					return err
				}
				defer cleanup()
				cfg.WorkDir = mnt
			}
			cfg.Progress = func(what string) {
				if !a.json {
					fmt.Fprintln(a.stderr, what)
				}
			}
			var load0 unix.Sysinfo_t
			_ = unix.Sysinfo(&load0)
			res, err := bench.RunSpawn(cmd.Context(), cfg)
			if a.json {
				if jerr := report.WriteSessionJSON(a.stdout, res.Figures); jerr != nil {
					return jerr
				}
				return err
			}
			var load1 unix.Sysinfo_t
			_ = unix.Sysinfo(&load1)
			out := report.Results{Session: res.Figures, Machine: machine(cfg.WorkDir), Command: "layerfs " + strings.Join(os.Args[1:], " ")}
			fmt.Fprintf(a.stdout, "%s\n%s\nload average %s at the start, %s at the end\n\n", out.Command, out.Machine, loadAvg(load0), loadAvg(load1))
			if terr := out.WriteSessionText(a.stdout); terr != nil {
				return terr
			}
			fmt.Fprintln(a.stdout)
			for _, r := range res.Ratios {
				fmt.Fprintln(a.stdout, r)
			}
			return err
		},
	}
	c.Flags().IntVar(&cfg.N, "n", 100, "workspaces opened in a spawn, one command run in each")
	c.Flags().IntVar(&cfg.Workers, "workers", 8, "workspaces opened at a time in a spawn")
	c.Flags().IntVar(&cfg.Execs, "execs", 200, "execs of true per CPU figure")
	c.Flags().IntVar(&cfg.Rounds, "rounds", 3, "rounds of every figure (the arms alternate)")
	c.Flags().StringVar(&daemons, "daemon", "", "comma-separated layerfsd binaries to compare, each NAME=PATH or PATH (default: the layerfsd next to layerfs)")
	c.Flags().StringVar(&parts, "parts", "", "comma-separated parts to measure, of "+strings.Join(bench.SpawnParts, ",")+" (default: all)")
	c.Flags().BoolVar(&noUserNS, "no-user-namespace", false, "serve every arm with --no-user-namespace")
	c.Flags().StringVar(&dir, "dir", "", "directory for the Stores (default: a temporary one, removed after)")
	c.Flags().StringVar(&fsSpec, "fs", "", "put the Stores on a fresh loop-mounted file system: ext4:SIZE or xfs:SIZE (e.g. ext4:8G)")
	return c
}

// loadAvg formats the 1, 5 and 15 minute load averages.
func loadAvg(si unix.Sysinfo_t) string {
	f := func(v uint64) float64 { return float64(v) / float64(1<<unix.SI_LOAD_SHIFT) }
	return fmt.Sprintf("%.2f %.2f %.2f", f(si.Loads[0]), f(si.Loads[1]), f(si.Loads[2]))
}
