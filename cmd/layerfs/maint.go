package main

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

func gcCmd(a *app) *cobra.Command {
	var req wire.GCRequest
	c := &cobra.Command{
		Use:   "gc",
		Short: "Delete objects and pack bytes that no branch, layer or workspace reaches",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				r, err := c.GC(cmd.Context(), req)
				if err != nil {
					return err
				}
				return a.emit(r, func(w io.Writer) {
					if r.DryRun {
						fmt.Fprintln(w, "dry run\tnothing was deleted")
					}
					fmt.Fprintf(w, "live commits\t%d\nlive chunks\t%d\ndead objects\t%d\ndead chunk bytes\t%s\n", r.LiveCommits, r.LiveChunks, r.ObjectsRemoved, showBytes(r.DeadChunkBytes))
					fmt.Fprintf(w, "packs rewritten\t%d\npacks deleted\t%d\nreclaimed\t%s\n", r.PacksRewritten, r.PacksDeleted, showBytes(r.BytesReclaimed))
				})
			})
		},
	}
	c.Flags().BoolVar(&req.DryRun, "dry-run", false, "count what would be deleted, delete nothing")
	c.Flags().BoolVar(&req.Vacuum, "vacuum", false, "also rebuild the SQLite file to return free pages")
	return c
}

func fsckCmd(a *app) *cobra.Command {
	var req wire.FsckRequest
	c := &cobra.Command{
		Use:   "fsck",
		Short: "Check SQLite integrity, every reference, object hash and pack range, and the cache of contents",
		Long: `Checks SQLite's integrity, that every reference resolves, that every object
and chunk hashes to its ID, that every chunk lies within its pack, and that
every file of the cache of contents holds its content (it reads the cache
whole, as it reads the packs; --skip-cache leaves it out). With --repair,
the cache files found damaged are evicted: they are made again from the
packs on next use.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				rep, err := c.FsckWith(cmd.Context(), req)
				if err != nil {
					return err
				}
				rep.Problems = nonNil(rep.Problems)
				if err := a.emit(rep, func(w io.Writer) {
					fmt.Fprintf(w, "refs\t%d\nobjects\t%d\nchunks\t%d\nbytes verified\t%s\npacks\t%d\n", rep.Refs, rep.Objects, rep.Chunks, showBytes(rep.Bytes), rep.Packs)
					fmt.Fprintf(w, "cache files verified\t%d (%s)\nproblems\t%d\n", rep.CacheFiles, showBytes(rep.CacheBytes), len(rep.Problems))
					for _, p := range rep.Problems {
						fmt.Fprintf(w, "  %s %s: %s\n", p.Where, p.Object, p.Problem)
					}
					if req.Repair {
						fmt.Fprintf(w, "repaired\t%d damaged cache files evicted\n", rep.Repaired)
					}
				}); err != nil {
					return err
				}
				if !rep.OK && int64(len(rep.Problems)) > rep.Repaired {
					return fmt.Errorf("%w: fsck: %d problems, the first: %s %s: %s", errclass.Corrupt, len(rep.Problems), rep.Problems[0].Where, rep.Problems[0].Object, rep.Problems[0].Problem)
				}
				return nil
			})
		},
	}
	c.Flags().BoolVar(&req.Repair, "repair", false, "evict the cache files found damaged (made again from the packs on next use)")
	c.Flags().BoolVar(&req.SkipCache, "skip-cache", false, "leave the cache of contents unchecked (faster: the cache is read whole otherwise)")
	return c
}

func statsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Count objects and show logical vs stored bytes and the dedup ratio",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				st, err := c.Stats(cmd.Context())
				if err != nil {
					return err
				}
				return a.emit(st, func(w io.Writer) {
					fmt.Fprintln(w, "OBJECTS\tCOUNT\tBYTES")
					for _, k := range slices.Sorted(maps.Keys(st.Objects)) {
						fmt.Fprintf(w, "%s\t%d\t%s\n", k, st.Objects[k], showBytes(st.ObjectBytes[k]))
					}
					fmt.Fprintf(w, "\nprojects\t%d\nbranches\t%d\nlayers\t%d\nworkspaces\t%d\n", st.Projects, st.Branches, st.Layers, st.Workspaces)
					fmt.Fprintf(w, "logical bytes\t%s\nstored bytes\t%s\ndedup ratio\t%.2f\n", showBytes(st.LogicalBytes), showBytes(st.StoredBytes), st.DedupRatio)
					fmt.Fprintf(w, "database\t%s\npacks\t%s in %d files\n", showBytes(st.DBBytes), showBytes(st.PackBytes), st.PackFiles)
					limit := "no bound"
					if st.CacheLimit > 0 {
						limit = "bound " + showBytes(st.CacheLimit)
					}
					fmt.Fprintf(w, "cache\t%s, %d contents (%s)\n", showBytes(st.CacheBytes), st.CacheFiles, limit)
					fmt.Fprintf(w, "cache verified\t%d (by this daemon since it started; %d unverified, checked on first use)\n", st.CacheVerified, st.CacheUnverified)
					fmt.Fprintf(w, "cache fs-verity\t%s\n", st.CacheVerity)
				})
			})
		},
	}
}
