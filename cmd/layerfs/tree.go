package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/commit"
	"layerfs.dev/layerfs/store"
)

// rootOf resolves ref to its commit's root tree.
func rootOf(cmd *cobra.Command, db *store.DB, project, ref string) (store.ID, store.ID, error) {
	id, err := db.ResolveRef(cmd.Context(), project, ref)
	if err != nil {
		return id, id, err
	}
	c, err := db.Commit(cmd.Context(), id)
	if err != nil {
		return id, id, err
	}
	return id, c.Root, nil
}

func diffCmd(a *app) *cobra.Command {
	var after string
	var limit int
	c := &cobra.Command{
		Use:   "diff PROJECT REF REF",
		Short: "List paths added, removed, modified or type-changed from the first REF to the second",
		Args:  args(cobra.ExactArgs(3)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				_, from, err := rootOf(cmd, db, argv[0], argv[1])
				if err != nil {
					return err
				}
				_, to, err := rootOf(cmd, db, argv[0], argv[2])
				if err != nil {
					return err
				}
				diffs, next, err := commit.Diff(cmd.Context(), db, from, to, after, limit)
				if err != nil {
					return err
				}
				if diffs == nil {
					diffs = []commit.Difference{}
				}
				out := struct {
					Diffs []commit.Difference `json:"diffs"`
					Next  string              `json:"next,omitempty"`
				}{diffs, next}
				return a.emit(out, func(w io.Writer) {
					fmt.Fprintln(w, "CHANGE\tTYPE\tPATH")
					for _, d := range diffs {
						e := d.New
						if e == nil {
							e = d.Old
						}
						fmt.Fprintf(w, "%s\t%s\t%s\n", d.Kind, e.Type, showPath(d.Path))
					}
					if next != "" {
						fmt.Fprintf(w, "(more: --after %s)\n", showPath(next))
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
		Args:  args(cobra.ExactArgs(3)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				id, root, err := rootOf(cmd, db, argv[0], argv[1])
				if err != nil {
					return err
				}
				var prog commit.Progress
				var st commit.CheckoutStats
				err = a.progress("checkout", &prog, func() error {
					st, err = commit.Checkout(cmd.Context(), db, root, argv[2], &commit.CheckoutOptions{Overwrite: force, Progress: &prog})
					return err
				})
				if err != nil {
					return err
				}
				out := struct {
					Commit store.ID             `json:"commit"`
					Dir    string               `json:"dir"`
					Stats  commit.CheckoutStats `json:"stats"`
				}{id, argv[2], st}
				return a.emit(out, func(w io.Writer) {
					fmt.Fprintf(w, "checked out %s into %s: %d entries, %d files, %s\n", id.Short(), argv[2], st.Entries, st.Files, showBytes(st.Bytes))
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
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if from == "" {
				return usageError{fmt.Errorf("commit: --from DIR is required")}
			}
			if _, err := os.Stat(from); err != nil {
				return err
			}
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				var prog commit.Progress
				var p commit.Published
				var st commit.Stats
				err := a.progress("commit", &prog, func() error {
					var err error
					p, st, err = commit.CommitDir(cmd.Context(), db, argv[0], argv[1], from, commit.Meta{Message: msg, Author: author()}, &commit.Options{Progress: &prog})
					return err
				})
				if err != nil {
					return err
				}
				out := struct {
					commit.Published
					Stats commit.Stats `json:"stats"`
				}{p, st}
				if err := a.emit(out, func(w io.Writer) {
					fmt.Fprintf(w, "%s: %s on %s/%s\n", p.Result, p.Commit.Short(), argv[0], argv[1])
					fmt.Fprintf(w, "files read\t%d\nbytes read\t%s\nnew payload\t%s\n", st.Files, showBytes(st.Bytes), showBytes(st.NewBytes))
				}); err != nil {
					return err
				}
				return p.Err()
			})
		},
	}
	c.Flags().StringVar(&from, "from", "", "directory to capture")
	c.Flags().StringVarP(&msg, "message", "m", "", "commit message")
	return c
}
