package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/bench/fsbench"
	"layerfs.dev/layerfs/internal/cells"
	"layerfs.dev/layerfs/internal/fusefs"
)

// benchFSCmd measures the FUSE path alone: the cell bodies straight on a
// workspace mount served by this process, against a plain directory.
// benchFS is the flags of bench fs and what it does with them.
type benchFS struct {
	cellList, dir, fsSpec, cpuProfile string
	samples                           int
	noPassthrough, fsync              bool
	dataPaths                         string
}

func benchFSCmd(a *app) *cobra.Command {
	var b benchFS
	c := &cobra.Command{
		Use:   "fs [--cells C01,...] [--samples N] [--dir D] [--fs ext4:8G|xfs:8G] [--data-path fuse,overlay,overlay-nometa,floor,view] [--fsync] [--no-passthrough] [--cpuprofile F]",
		Short: "Run the cell bodies straight on a workspace mount and in a plain directory: the FUSE path alone",
		Long: `Runs each cell's body directly (no sandbox, no daemon API) on a fresh
LayerFS workspace mount served by this process and in a plain directory on
the same file system, following the cells' method (a fresh Store per sample,
the base committed first, one untimed warm-up run on an earlier mount, a
fresh mount for the timed run, every end state verified). Prints per cell
the median [min-max] of each arm, the ratio, the FUSE requests the timed body
caused by opcode, the daemon's service time per request and the data path.
With --fs, both arms run on a fresh loop-mounted file system of that type
(an image under --dir), unmounted and removed at the end.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			ctx := cmd.Context()
			cs, err := selectCells(b.cellList)
			if err != nil {
				return usageError{err}
			}
			if b.samples < 1 {
				return usageError{fmt.Errorf("--samples %d: want at least 1", b.samples)}
			}
			dir := b.dir
			if dir == "" {
				d, err := os.MkdirTemp("", "layerfs-benchfs-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				dir = d
			}
			if dir, err = filepath.Abs(dir); err != nil {
				return err
			}
			if b.fsSpec != "" {
				mnt, cleanup, lerr := loopFS(ctx, dir, b.fsSpec)
				if lerr != nil {
					return lerr
				}
				defer func() {
					if cerr := cleanup(); err == nil {
						err = cerr
					}
				}()
				dir = mnt
			}
			if b.cpuProfile != "" {
				stop, err := startCPUProfile(b.cpuProfile)
				if err != nil {
					return err
				}
				defer func() {
					if cerr := stop(); err == nil && cerr != nil {
						err = fmt.Errorf("--cpuprofile: %w", cerr)
					}
				}()
			}
			return b.run(ctx, a, cs, dir)
		},
	}
	b.flags(c)
	return c
}

func (b *benchFS) flags(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&b.cellList, "cells", "twelve", "comma-separated cell ids, or twelve, extended, all")
	f.IntVar(&b.samples, "samples", 5, "timed samples per cell and arm")
	f.StringVar(&b.dir, "dir", "", "scratch directory on the file system under test (default: a temporary one, removed after)")
	f.StringVar(&b.fsSpec, "fs", "", "run on a fresh loop-mounted file system made under --dir: ext4:SIZE (with a journal) or xfs:SIZE (reflinks), e.g. ext4:8G")
	f.StringVar(&b.dataPaths, "data-path", "fuse", "comma-separated LayerFS arms, each run beside its own native arm: fuse, overlay (kernel overlayfs over the metadata image, the FUSE view as its data-only layer), overlay-nometa (over the FUSE view alone), floor (kernel overlayfs over a plain directory), view (a workspace's mount path where sandboxes have a user namespace: the host view of the overlay over id-mapped layers)")
	f.BoolVar(&b.fsync, "fsync", false, "mount LayerFS as a workspace of durability fsync (fsync honoured, copy-ups synced) rather than commit, the default")
	f.BoolVar(&b.noPassthrough, "no-passthrough", false, "serve file data through the daemon instead of FUSE passthrough")
	f.StringVar(&b.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the daemon side, setup included) to this file")
}

// startCPUProfile profiles this process into the file at path until stop.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// run benches the cells cs in dir on each data path and prints or emits
// the reports; a cell whose end state did not verify fails the command.
func (b *benchFS) run(ctx context.Context, a *app, cs []cells.Cell, dir string) error {
	paths := strings.Split(b.dataPaths, ",")
	reps := map[string]any{}
	var bad []string
	if !a.json {
		fmt.Fprintf(a.stdout, "command: layerfs %s\n", strings.Join(os.Args[1:], " "))
	}
	for _, path := range paths {
		progress, finish := a.sampleProgress()
		rep, err := fsbench.Run(ctx, fsbench.Config{
			Dir:      dir,
			Samples:  b.samples,
			Cells:    cs,
			Mount:    fusefs.Options{NoPassthrough: b.noPassthrough, NoSync: !b.fsync},
			DataPath: path,
			Fsync:    b.fsync,
			Progress: progress,
		})
		finish()
		if err != nil {
			return fmt.Errorf("data path %s: %w", path, err)
		}
		reps[path] = rep.JSON()
		if !a.json {
			fmt.Fprintf(a.stdout, "\ndata path: %s\n", path)
			if err := rep.Table(a.stdout); err != nil {
				return err
			}
		}
		for _, r := range rep.Results {
			if r.VerifyErr != "" {
				bad = append(bad, path+" "+r.Cell)
			}
		}
	}
	if a.json {
		if err := a.emit(reps, nil); err != nil {
			return err
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("bench fs: %s did not verify", strings.Join(bad, ", "))
	}
	return nil
}
