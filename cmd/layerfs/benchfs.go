package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/bench/fsbench"
	"layerfs.dev/layerfs/internal/fusefs"
)

// benchFSCmd measures the FUSE path alone: the cell bodies straight on a
// workspace mount served by this process, against a plain directory.
func benchFSCmd(a *app) *cobra.Command {
	var (
		cellList, dir, fsSpec, cpuProfile string
		samples                           int
		noPassthrough, fsync              bool
		dataPaths                         string
	)
	c := &cobra.Command{
		Use:   "fs [--cells C01,...] [--samples N] [--dir D] [--fs ext4:8G|xfs:8G] [--data-path fuse,overlay,overlay-nometa,floor] [--fsync] [--no-passthrough] [--cpuprofile F]",
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
			cs, err := selectCells(cellList)
			if err != nil {
				return usageError{err}
			}
			if samples < 1 {
				return usageError{fmt.Errorf("--samples %d: want at least 1", samples)}
			}
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
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					f.Close()
					return err
				}
				defer func() {
					pprof.StopCPUProfile()
					if cerr := f.Close(); err == nil && cerr != nil {
						err = fmt.Errorf("--cpuprofile: %w", cerr)
					}
				}()
			}
			paths := strings.Split(dataPaths, ",")
			reps := map[string]any{}
			var bad []string
			if !a.json {
				fmt.Fprintf(a.stdout, "command: layerfs %s\n", strings.Join(os.Args[1:], " "))
			}
			for _, path := range paths {
				progress, finish := a.sampleProgress()
				rep, err := fsbench.Run(ctx, fsbench.Config{
					Dir:      dir,
					Samples:  samples,
					Cells:    cs,
					Mount:    fusefs.Options{NoPassthrough: noPassthrough, NoSync: !fsync},
					DataPath: path,
					Fsync:    fsync,
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
		},
	}
	f := c.Flags()
	f.StringVar(&cellList, "cells", "twelve", "comma-separated cell ids, or twelve, extended, all")
	f.IntVar(&samples, "samples", 5, "timed samples per cell and arm")
	f.StringVar(&dir, "dir", "", "scratch directory on the file system under test (default: a temporary one, removed after)")
	f.StringVar(&fsSpec, "fs", "", "run on a fresh loop-mounted file system made under --dir: ext4:SIZE (with a journal) or xfs:SIZE (reflinks), e.g. ext4:8G")
	f.StringVar(&dataPaths, "data-path", "fuse", "comma-separated LayerFS arms, each run beside its own native arm: fuse, overlay (kernel overlayfs over the metadata image, the FUSE view as its data-only layer), overlay-nometa (over the FUSE view alone), floor (kernel overlayfs over a plain directory)")
	f.BoolVar(&fsync, "fsync", false, "mount LayerFS as a workspace of durability fsync (fsync honoured, copy-ups synced) rather than commit, the default")
	f.BoolVar(&noPassthrough, "no-passthrough", false, "serve file data through the daemon instead of FUSE passthrough")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the daemon side, setup included) to this file")
	return c
}
