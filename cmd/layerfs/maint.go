package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/store"
)

func gcCmd(a *app) *cobra.Command {
	var opts store.GCOptions
	c := &cobra.Command{
		Use:   "gc",
		Short: "Delete objects and pack bytes that no branch, layer or workspace reaches",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// GC needs the Store to itself: while a daemon serves it, the
			// daemon collects (its workspaces are roots it knows).
			if c, err := a.dial(cmd.Context()); err == nil {
				defer c.Close()
				if opts.DryRun || opts.Vacuum {
					return usageError{errors.New("gc --dry-run and --vacuum need the Store to themselves: stop its daemon first (layerfs daemon stop)")}
				}
				r, err := c.GC(cmd.Context())
				if err != nil {
					return err
				}
				return a.emit(r, func(w io.Writer) {
					fmt.Fprintf(w, "collected by\tthe daemon\nobjects removed\t%d\npacks rewritten\t%d\nreclaimed\t%s\n", r.ObjectsRemoved, r.PacksRewritten, showBytes(r.BytesReclaimed))
				})
			}
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				st, err := db.GC(cmd.Context(), opts)
				if err != nil {
					return err
				}
				return a.emit(st, func(w io.Writer) {
					fmt.Fprintf(w, "live commits\t%d\nlive chunks\t%d\ndead objects\t%d\ndead chunks\t%d (%s)\n", st.LiveCommits, st.LiveChunks, st.DeadObjects, st.DeadChunks, showBytes(st.DeadChunkBytes))
					fmt.Fprintf(w, "packs rewritten\t%d\npacks deleted\t%d\ndisk before\t%s\ndisk after\t%s\nreclaimed\t%s\n", st.PacksRewritten, st.PacksDeleted, showBytes(st.DiskBefore), showBytes(st.DiskAfter), showBytes(st.Reclaimed))
				})
			})
		},
	}
	c.Flags().BoolVar(&opts.DryRun, "dry-run", false, "count what would be deleted, delete nothing")
	c.Flags().BoolVar(&opts.Vacuum, "vacuum", false, "also rebuild the SQLite file to return free pages")
	return c
}

func fsckCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "fsck",
		Short: "Check SQLite integrity, every reference, every object hash and every pack range",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				progress, finish := a.fsckProgress()
				rep, err := db.Fsck(cmd.Context(), progress)
				finish()
				if err != nil {
					return err
				}
				if rep.Problems == nil {
					rep.Problems = []store.Problem{}
				}
				if err := a.emit(rep, func(w io.Writer) {
					fmt.Fprintf(w, "refs\t%d\nobjects\t%d\nchunks\t%d\nbytes verified\t%s\npacks\t%d\nproblems\t%d\n", rep.Refs, rep.Objects, rep.Chunks, showBytes(rep.Bytes), rep.Packs, len(rep.Problems))
					for _, p := range rep.Problems {
						fmt.Fprintln(w, "  "+p.String())
					}
				}); err != nil {
					return err
				}
				return rep.Err()
			})
		},
	}
}

func statsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Count objects and show logical vs stored bytes and the dedup ratio",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				st, err := db.Stats(cmd.Context())
				if err != nil {
					return err
				}
				return a.emit(st, func(w io.Writer) {
					fmt.Fprintln(w, "OBJECTS\tCOUNT\tBYTES")
					for _, k := range []struct {
						name string
						s    store.KindStats
					}{{"chunks", st.Chunks}, {"manifests", st.Manifests}, {"trees", st.Trees}, {"commits", st.Commits}} {
						fmt.Fprintf(w, "%s\t%d\t%s\n", k.name, k.s.Count, showBytes(k.s.Bytes))
					}
					fmt.Fprintf(w, "\nprojects\t%d\nbranches\t%d\nlayers\t%d\nworkspaces\t%d\n", st.Projects, st.Branches, st.Layers, st.Workspaces)
					fmt.Fprintf(w, "logical bytes\t%s\nstored bytes\t%s\ndedup ratio\t%.2f\n", showBytes(st.LogicalBytes), showBytes(st.StoredBytes), st.DedupRatio)
					fmt.Fprintf(w, "database\t%s\npacks\t%s in %d files\ncache\t%s\n", showBytes(st.DBBytes), showBytes(st.PackBytes), st.PackFiles, showBytes(st.CacheBytes))
				})
			})
		},
	}
}
