package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
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
			return a.withStore(cmd, func(c *client.Client) error {
				b, err := c.ForkBranch(cmd.Context(), argv[0], argv[1], from)
				if err != nil {
					return err
				}
				return a.emit(b, func(w io.Writer) {
					fmt.Fprintf(w, "forked branch %s of %s at %s\n", b.Name, b.Project, short(b.Head))
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
			return a.withStore(cmd, func(c *client.Client) error {
				bs, err := c.Branches(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
				return a.emit(nonNil(bs), func(w io.Writer) {
					fmt.Fprintln(w, "BRANCH\tHEAD\tUPDATED")
					for _, b := range bs {
						fmt.Fprintf(w, "%s\t%s\t%s\n", b.Name, short(b.Head), showTime(b.Updated))
					}
				})
			})
		},
	}
}

func branchDeleteCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "delete PROJECT NAME",
		Short: "Delete a branch (refused while a workspace stands on it; its commits stay until gc finds them unreachable)",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				if err := c.DeleteBranch(cmd.Context(), argv[0], argv[1]); err != nil {
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
			return a.withStore(cmd, func(c *client.Client) error {
				l, err := c.AddLayer(cmd.Context(), argv[0], argv[1])
				if err != nil {
					return err
				}
				return a.emit(l, func(w io.Writer) {
					fmt.Fprintf(w, "added layer %d of %s at %s\n", l.Index, l.Project, short(l.Commit))
				})
			})
		},
	}, &cobra.Command{
		Use:   "list PROJECT",
		Short: "List a project's layers",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				ls, err := c.Layers(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
				return a.emit(nonNil(ls), func(w io.Writer) {
					fmt.Fprintln(w, "LAYER\tCOMMIT\tCREATED")
					for _, l := range ls {
						fmt.Fprintf(w, "layer:%d\t%s\t%s\n", l.Index, short(l.Commit), showTime(l.Created))
					}
				})
			})
		},
	})
	return c
}

// logPage is the most commits the API returns at once.
const logPage = 10000

func logCmd(a *app) *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use:   "log PROJECT BRANCH",
		Short: "Show a branch's commits, newest first (BRANCH may be any REF)",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if limit < 0 {
				return usageError{fmt.Errorf("log: --limit must not be negative")}
			}
			return a.withStore(cmd, func(c *client.Client) error {
				// Page by parents: the next page starts at the last
				// commit's parent.
				log := []wire.Commit{}
				for ref := argv[1]; ref != ""; {
					n := logPage
					if limit > 0 {
						n = min(n, limit-len(log))
					}
					page, err := c.Log(cmd.Context(), argv[0], ref, n)
					if err != nil {
						return err
					}
					log = append(log, page...)
					ref = ""
					if len(page) == n && (limit == 0 || len(log) < limit) {
						ref = page[len(page)-1].Parent
					}
				}
				return a.emit(log, func(w io.Writer) {
					fmt.Fprintln(w, "COMMIT\tTIME\tFILES\tBYTES\tCHANGED\tMESSAGE")
					for _, e := range log {
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\n", short(e.ID), showTime(e.Time),
							e.Stats.Files, showBytes(e.Stats.Bytes), e.Stats.Changed, oneLine(e.Message))
					}
				})
			})
		},
	}
	c.Flags().IntVarP(&limit, "limit", "n", 0, "show at most this many commits (0: all)")
	return c
}

// nonNil makes an empty list print as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
