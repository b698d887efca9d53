package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/bench"
	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/internal/cells"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/catalog"
)

func cellsCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "cells", Short: "The twelve cells: LayerFS against a plain directory, per platform"}
	c.AddCommand(cellsListCmd(a), cellsRunCmd(a))
	return c
}

func cellsListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the cells and their bodies",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			all := cells.All()
			return a.emit(all, func(w io.Writer) {
				fmt.Fprintln(w, "CELL\tGROUP\tTITLE\tBASE\tBODY")
				for _, c := range all {
					g := c.Group
					if g == "" {
						g = "twelve"
					}
					b := c.Base.Name
					if b == "" {
						b = "empty"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.ID, g, c.Title, b, c.Body)
				}
			})
		},
	}
}

// selectCells reads --cells: ids, "twelve" (the default), "extended" or "all".
func selectCells(spec string) ([]cells.Cell, error) {
	switch spec {
	case "", "twelve":
		return cells.Twelve(), nil
	case "extended":
		return cells.Extended(), nil
	case "all":
		return cells.All(), nil
	}
	return cells.Select(strings.Split(spec, ","))
}

// cellsRun is the flags of cells run and what it does with them.
type cellsRun struct {
	platformList, cellList, out, guestDaemon, fsSpec string
	dataPaths, storeList, storeURL                   string
	samples, coldFiles                               int
	seed, quotaBytes                                 int64
	keep                                             bool
}

func cellsRunCmd(a *app) *cobra.Command {
	var r cellsRun
	c := &cobra.Command{
		Use:   "run [--platform local,docker,...] [--cells C01,...] [--samples N] [--out DIR] [--fs ext4:8G|xfs:8G] [--data-path overlay,fuse] [--stores embedded,shared]",
		Short: "Run the cells on each platform, LayerFS and native, and print the comparison",
		Long: `Runs every cell on every platform, in a LayerFS workspace and in a plain
directory on the same file system through the same sandbox, following the
method of docs/benchmarks.md: a fresh Store per sample, the base committed
first, one untimed warm-up run, then a fresh mount for the timed run, verified
live and again from its commit. Writes samples.jsonl, summary.json, cells.md,
cells.txt and ratios.png to the output directory and prints the table.
With --fs, the Stores and native directories live on a fresh loop-mounted
file system of that type (an image under the output directory), unmounted
and removed at the end. With --stores embedded,shared, each host platform
runs twice in the one randomised run, each with its own native arm: on the
embedded Store and, as "PLATFORM+shared", on the shared Store at
--store-url (each sample a host of an empty scope of its own in that
database and bucket); the notes give the ratio of the geometric means.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			cfg, err := r.config()
			if err != nil {
				return err
			}
			if r.fsSpec != "" {
				mnt, cleanup, lerr := loopFS(cmd.Context(), cfg.OutDir, r.fsSpec)
				if lerr != nil {
					return lerr
				}
				defer func() {
					if cerr := cleanup(); err == nil {
						err = cerr
					}
				}()
				cfg.WorkDir = filepath.Join(mnt, "work")
				cfg.Machine += "; work on " + bench.DescribeFS(mnt)
			}
			return r.run(cmd.Context(), a, cfg)
		},
	}
	r.flags(c)
	return c
}

func (r *cellsRun) flags(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&r.platformList, "platform", "local", "comma-separated platforms: "+strings.Join(catalog.Names, ", "))
	f.StringVar(&r.cellList, "cells", "twelve", "comma-separated cell ids, or twelve, extended, all")
	f.IntVar(&r.samples, "samples", 5, "timed samples per cell, platform and arm")
	f.IntVar(&r.coldFiles, "cold-files", bench.DefaultColdFiles, "files of the cold figure's tree: a new workspace's first read of a committed tree against a native read, the page cache dropped for both, in the table under the cells (needs root); 0 leaves it out")
	f.StringVar(&r.out, "out", "", "output directory (default ./layerfs-cells-DATE)")
	f.Int64Var(&r.seed, "seed", 0, "seed of the randomised sample order (default: from the clock)")
	f.BoolVar(&r.keep, "keep", false, "keep each sample's Store and directories under OUT/work")
	f.StringVar(&r.dataPaths, "data-path", "", "comma-separated data paths of the LayerFS arm, each run beside its own native arm: overlay, fuse (default: the daemon's)")
	f.StringVar(&r.fsSpec, "fs", "", "run the Stores and native directories on a fresh loop-mounted file system: ext4:SIZE (with a journal) or xfs:SIZE (reflinks), e.g. ext4:8G")
	f.StringVar(&r.storeList, "stores", bench.StoreEmbedded, "comma-separated Stores of the host platforms' daemons, each beside its own native arm: embedded, shared")
	f.StringVar(&r.storeURL, "store-url", os.Getenv("LAYERFS_BENCH_STORE_URL"), "the shared Store's URL for --stores shared (default $LAYERFS_BENCH_STORE_URL)")
	f.StringVar(&r.guestDaemon, "guest-daemon", "", "layerfsd binary for VM guests (default: the one beside layerfs)")
	f.Int64Var(&r.quotaBytes, "quota-bytes", 0, "give each LayerFS workspace a quota of this many bytes (to measure its cost)")
}

// config checks the flags and makes the run's configuration; a bad flag
// is a usage error.
func (r *cellsRun) config() (bench.Config, error) {
	cs, err := selectCells(r.cellList)
	if err != nil {
		return bench.Config{}, usageError{err}
	}
	if r.samples < 1 {
		return bench.Config{}, usageError{fmt.Errorf("--samples %d: want at least 1", r.samples)}
	}
	plats := strings.Split(r.platformList, ",")
	for _, p := range plats {
		if !contains(catalog.Names, p) {
			return bench.Config{}, usageError{fmt.Errorf("--platform %q: known platforms are %s", p, strings.Join(catalog.Names, ", "))}
		}
	}
	out := r.out
	if out == "" {
		out = "layerfs-cells-" + time.Now().Format("20060102-150405")
	}
	if out, err = filepath.Abs(out); err != nil {
		return bench.Config{}, err
	}
	if r.fsSpec != "" && r.keep {
		return bench.Config{}, usageError{fmt.Errorf("--keep and --fs: the loop file system is unmounted at the end, so nothing could be kept")}
	}
	guestDaemon := r.guestDaemon
	if guestDaemon == "" {
		guestDaemon, _ = findDaemon()
	}
	stores := strings.Split(r.storeList, ",")
	for _, s := range stores {
		if s != bench.StoreEmbedded && s != bench.StoreShared {
			return bench.Config{}, usageError{fmt.Errorf("--stores %q: want %s or %s", s, bench.StoreEmbedded, bench.StoreShared)}
		}
		if s == bench.StoreShared && r.storeURL == "" {
			return bench.Config{}, usageError{fmt.Errorf("--stores shared needs --store-url (or $LAYERFS_BENCH_STORE_URL): a shared Store's URL (docs/fleet.md)")}
		}
	}
	coldFiles := r.coldFiles
	if coldFiles <= 0 {
		coldFiles = -1 // left out
	}
	return bench.Config{
		Cells:          cs,
		Platforms:      plats,
		Samples:        r.samples,
		OutDir:         out,
		Seed:           r.seed,
		Keep:           r.keep,
		QuotaBytes:     r.quotaBytes,
		Stores:         stores,
		SharedStoreURL: r.storeURL,
		ColdFiles:      coldFiles,
		Command:        "layerfs " + strings.Join(os.Args[1:], " "),
		Machine:        machine(out),
		NewPlatform: func(name string) (platforms.Platform, error) {
			return catalog.New(name, catalog.Options{Project: "cells", GuestDaemon: guestDaemon})
		},
	}, nil
}

// run makes one run per data path, each with its own native arm, in
// OUT/<path> when there are several, and prints or emits the results.
func (r *cellsRun) run(ctx context.Context, a *app, cfg bench.Config) error {
	paths := strings.Split(r.dataPaths, ",")
	var all []any
	bad, total := 0, 0
	for _, path := range paths {
		run := cfg
		run.DataPath = path
		if len(paths) > 1 {
			run.OutDir = filepath.Join(cfg.OutDir, path)
			if run.WorkDir != "" {
				run.WorkDir = filepath.Join(cfg.WorkDir, path)
			}
			run.Command += " (data path " + path + ")"
		}
		finish := a.cellsProgress(&run)
		res, err := bench.Run(ctx, run)
		finish()
		if err != nil {
			return fmt.Errorf("data path %s: %w", path, err)
		}
		all = append(all, res.Summarize())
		if !a.json {
			if len(paths) > 1 {
				fmt.Fprintf(a.stdout, "\ndata path: %s\n", path)
			}
			if err := res.WriteText(a.stdout); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "\nresults in %s\n", run.OutDir)
		}
		for _, s := range res.Samples {
			if !s.Good() {
				bad++
			}
		}
		total += len(res.Samples)
	}
	if a.json {
		var v any = all
		if len(all) == 1 {
			v = all[0]
		}
		if err := a.emit(v, nil); err != nil {
			return err
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d samples failed or did not verify (see %s under %s)", bad, total, report.SamplesFile, cfg.OutDir)
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// machine describes this host for the notes under the tables.
func machine(dir string) string {
	var u unix.Utsname
	unix.Uname(&u)
	var si unix.Sysinfo_t
	unix.Sysinfo(&si)
	os.MkdirAll(dir, 0o755)
	return fmt.Sprintf("%s, kernel %s, %d CPUs, %.0f GiB, %s; output on %s",
		runtime.GOOS+"/"+runtime.GOARCH, unix.ByteSliceToString(u.Release[:]), runtime.NumCPU(),
		float64(si.Totalram)*float64(si.Unit)/(1<<30), runtime.Version(), bench.DescribeFS(dir))
}

// cellsProgress shows a bar of samples on a terminal; it returns the
// function that clears it.
func (a *app) cellsProgress(cfg *bench.Config) func() {
	progress, finish := a.sampleProgress()
	cfg.Progress = progress
	return finish
}

// sampleProgress reports samples as they start: a bar on a terminal, else
// a line each on stderr. finish clears the bar.
func (a *app) sampleProgress() (progress func(done, total int, what string), finish func()) {
	f, ok := a.stderr.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return func(done, total int, what string) {
			if done < total {
				fmt.Fprintf(a.stderr, "[%d/%d] %s\n", done+1, total, what)
			}
		}, func() {}
	}
	var bar *progressbar.ProgressBar
	return func(done, total int, what string) {
			if bar == nil {
				bar = progressbar.NewOptions(total,
					progressbar.OptionSetWriter(f),
					progressbar.OptionShowCount(),
					progressbar.OptionSetElapsedTime(true),
					progressbar.OptionSetPredictTime(true),
					progressbar.OptionClearOnFinish(),
				)
			}
			bar.Describe(what)
			bar.Set(done)
		}, func() {
			if bar != nil {
				bar.Finish()
			}
		}
}

// loopFS makes the file system --fs asks for under dir (bench.LoopFS); a
// malformed spec is a usage error.
func loopFS(ctx context.Context, dir, spec string) (mnt string, cleanup func() error, err error) {
	mnt, cleanup, err = bench.LoopFS(ctx, dir, spec)
	if errors.Is(err, bench.ErrLoopSpec) {
		return "", nil, usageError{fmt.Errorf("--fs: %w", err)}
	}
	return mnt, cleanup, err
}
