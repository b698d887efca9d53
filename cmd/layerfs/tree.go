package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

func diffCmd(a *app) *cobra.Command {
	var after string
	var limit int
	c := &cobra.Command{
		Use:   "diff PROJECT REF REF",
		Short: "List paths added, removed, modified or type-changed from the first REF to the second",
		Args:  args(cobra.ExactArgs(3)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if limit < 0 {
				return usageError{errors.New("diff: --limit must not be negative")}
			}
			return a.withStore(cmd, func(c *client.Client) error {
				// --limit 0 follows the pages to the end.
				out := wire.DiffPage{Changes: []wire.Change{}}
				opts := client.DiffOptions{Cursor: after, Limit: limit}
				for {
					page, err := c.Diff(cmd.Context(), argv[0], argv[1], argv[2], opts)
					if err != nil {
						return err
					}
					out.Changes = append(out.Changes, page.Changes...)
					out.Next = page.Next
					if limit > 0 || page.Next == "" {
						break
					}
					opts.Cursor = page.Next
				}
				return a.emit(out, func(w io.Writer) {
					fmt.Fprintln(w, "CHANGE\tTYPE\tPATH")
					for _, d := range out.Changes {
						typ := d.NewType
						if typ == "" {
							typ = d.OldType
						}
						fmt.Fprintf(w, "%s\t%s\t%s\n", d.Kind, typ, showPath(d.Path))
					}
					if out.Next != "" {
						fmt.Fprintf(w, "(more: --after %s)\n", showPath(out.Next))
					}
				})
			})
		},
	}
	c.Flags().StringVar(&after, "after", "", "list only paths after this one (the cursor of the previous page)")
	c.Flags().IntVar(&limit, "limit", 0, "list at most this many paths (0: all)")
	return c
}

func checkoutCmd(a *app) *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "checkout PROJECT REF DIR",
		Short: "Write REF's tree into DIR (which must be empty or absent unless --force)",
		Long: `Write REF's tree into DIR (which must be empty or absent unless --force).
DIR is written by the daemon: a path on its host ($LAYERFS_DAEMON's, when set).`,
		Args: args(cobra.ExactArgs(3)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				dir, err := a.hostPath(argv[2])
				if err != nil {
					return err
				}
				res, err := c.Checkout(cmd.Context(), argv[0], wire.Checkout{Ref: argv[1], Path: dir, Overwrite: force})
				if err != nil {
					return err
				}
				return a.emit(res, func(w io.Writer) {
					fmt.Fprintf(w, "checked out %s into %s: %d entries, %d files, %s\n", short(res.Commit), showPath(res.Path), res.Entries, res.Files, showBytes(res.Bytes))
				})
			})
		},
	}
	c.Flags().BoolVar(&force, "force", false, "write into a non-empty directory, replacing entries in the way")
	return c
}

func commitCmd(a *app) *cobra.Command {
	var from, msg string
	c := &cobra.Command{
		Use:   "commit PROJECT BRANCH --from DIR [-m MSG]",
		Short: "Capture DIR as the next commit on BRANCH (compare-and-swap on its head)",
		Long: `Capture DIR as the next commit on BRANCH (compare-and-swap on its head).
DIR is read by the daemon: a path on its host ($LAYERFS_DAEMON's, when set).`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if from == "" {
				return usageError{errors.New("commit: --from DIR is required")}
			}
			return a.withStore(cmd, func(c *client.Client) error {
				dir, err := a.hostPath(from)
				if err != nil {
					return err
				}
				res, err := c.CommitDir(cmd.Context(), argv[0], argv[1], wire.CommitDir{FromPath: dir, Message: msg, Author: author()})
				if err != nil {
					return err
				}
				if err := a.emit(res, func(w io.Writer) {
					fmt.Fprintf(w, "%s: %s on %s/%s\n", res.Result, short(res.Commit), argv[0], argv[1])
					if r := res.Receipt; r != nil {
						fmt.Fprintf(w, "new payload\t%s\nreused payload\t%s\n", showBytes(r.NewBytes), showBytes(r.ReusedBytes))
					}
				}); err != nil {
					return err
				}
				if res.Result == wire.HeadMoved {
					return fmt.Errorf("commit %s/%s: %w to %s while the directory was read; commit %s is stored but not published",
						argv[0], argv[1], errclass.HeadMoved, short(res.Head), short(res.Commit))
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&from, "from", "", "directory to capture")
	c.Flags().StringVarP(&msg, "message", "m", "", "commit message")
	return c
}
