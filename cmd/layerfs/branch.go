package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/commit"
	"layerfs.dev/layerfs/store"
)

func branchCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "branch", Short: "Fork, list and delete branches"}
	c.AddCommand(branchForkCmd(a), branchListCmd(a), branchDeleteCmd(a))
	return c
}

func branchForkCmd(a *app) *cobra.Command {
	var from string
	c := &cobra.Command{
		Use:   "fork PROJECT NAME --from REF",
		Short: "Create branch NAME at REF (a layer:N, a branch or a commit); copies nothing",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if from == "" {
				return usageError{fmt.Errorf("branch fork: --from REF is required")}
			}
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				b, err := commit.Fork(cmd.Context(), db, argv[0], argv[1], from)
				if err != nil {
					return err
				}
				return a.emit(b, func(w io.Writer) {
					fmt.Fprintf(w, "forked branch %s of %s at %s\n", b.Name, b.Project, b.Head.Short())
				})
			})
		},
	}
	c.Flags().StringVar(&from, "from", "", "layer:N, branch or commit to fork from")
	return c
}

func branchListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list PROJECT",
		Short: "List a project's branches",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				bs, err := db.Branches(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
				if bs == nil {
					bs = []store.Branch{}
				}
				return a.emit(bs, func(w io.Writer) {
					fmt.Fprintln(w, "BRANCH\tHEAD\tUPDATED")
					for _, b := range bs {
						fmt.Fprintf(w, "%s\t%s\t%s\n", b.Name, b.Head.Short(), showTime(b.Updated))
					}
				})
			})
		},
	}
}

func branchDeleteCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "delete PROJECT NAME",
		Short: "Delete a branch (its commits stay until gc finds them unreachable)",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				if err := db.DeleteBranch(cmd.Context(), argv[0], argv[1]); err != nil {
					return err
				}
				out := map[string]string{"project": argv[0], "deleted": argv[1]}
				return a.emit(out, func(w io.Writer) { fmt.Fprintf(w, "deleted branch %s of %s\n", argv[1], argv[0]) })
			})
		},
	}
}

func layerCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "layer", Short: "Add and list a project's layers"}
	c.AddCommand(&cobra.Command{
		Use:   "add PROJECT BRANCH",
		Short: "Make BRANCH's head the project's next layer",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				l, err := commit.AddLayer(cmd.Context(), db, argv[0], argv[1])
				if err != nil {
					return err
				}
				return a.emit(l, func(w io.Writer) {
					fmt.Fprintf(w, "added layer %d of %s at %s\n", l.Index, l.Project, l.Commit.Short())
				})
			})
		},
	}, &cobra.Command{
		Use:   "list PROJECT",
		Short: "List a project's layers",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				ls, err := db.Layers(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
				if ls == nil {
					ls = []store.Layer{}
				}
				return a.emit(ls, func(w io.Writer) {
					fmt.Fprintln(w, "LAYER\tCOMMIT\tCREATED")
					for _, l := range ls {
						fmt.Fprintf(w, "layer:%d\t%s\t%s\n", l.Index, l.Commit.Short(), showTime(l.Created))
					}
				})
			})
		},
	})
	return c
}

func logCmd(a *app) *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use:   "log PROJECT BRANCH",
		Short: "Show a branch's commits, newest first (BRANCH may be any REF)",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				log, err := commit.Log(cmd.Context(), db, argv[0], argv[1], limit)
				if err != nil {
					return err
				}
				if log == nil {
					log = []commit.LogEntry{}
				}
				return a.emit(log, func(w io.Writer) {
					fmt.Fprintln(w, "COMMIT\tTIME\tFILES\tBYTES\tCHANGED\tMESSAGE")
					for _, e := range log {
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\n", e.ID.Short(), showTime(time.Unix(0, e.TimeNs)),
							e.Stats.Files, showBytes(e.Stats.Bytes), e.Stats.Changed, oneLine(e.Message))
					}
				})
			})
		},
	}
	c.Flags().IntVarP(&limit, "limit", "n", 0, "show at most this many commits (0: all)")
	return c
}
