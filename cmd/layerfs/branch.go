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
		Short: "Show the commits reachable from a branch through every parent, newest first (BRANCH may be any REF)",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if limit < 0 {
				return usageError{fmt.Errorf("log: --limit must not be negative")}
			}
			return a.withStore(cmd, func(c *client.Client) error {
				// Pages follow the log's fixed order: each starts after the
				// last commit of the one before.
				log := []wire.Commit{}
				for after := ""; ; {
					n := logPage
					if limit > 0 {
						n = min(n, limit-len(log))
					}
					page, err := c.LogAfter(cmd.Context(), argv[0], argv[1], after, n)
					if err != nil {
						return err
					}
					log = append(log, page...)
					if len(page) < n || (limit > 0 && len(log) >= limit) {
						break
					}
					after = page[len(page)-1].ID
				}
				return a.emit(log, func(w io.Writer) {
					fmt.Fprintln(w, "COMMIT\tTIME\tFILES\tBYTES\tCHANGED\tMESSAGE")
					for _, e := range log {
						msg := oneLine(e.Message)
						if len(e.Parents) > 1 {
							parents := ""
							for i, p := range e.Parents {
								if i > 0 {
									parents += " "
								}
								parents += short(p)
							}
							msg = "(merge of " + parents + ") " + msg
						}
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\n", short(e.ID), showTime(e.Time),
							e.Stats.Files, showBytes(e.Stats.Bytes), e.Stats.Changed, msg)
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
