package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/commit"
	"layerfs.dev/layerfs/store"
)

func projectCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "project", Short: "Create and list projects"}
	c.AddCommand(projectCreateCmd(a), projectListCmd(a))
	return c
}

func projectCreateCmd(a *app) *cobra.Command {
	var from, msg string
	c := &cobra.Command{
		Use:   "create NAME [--from DIR]",
		Short: "Create a project: its first layer (DIR's contents, or empty) and branch main",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				var prog commit.Progress
				var p store.Project
				var id store.ID
				var st commit.Stats
				err := a.progress("import", &prog, func() error {
					var err error
					p, id, st, err = commit.CreateProject(cmd.Context(), db, argv[0], from, commit.Meta{Message: msg, Author: author()}, &commit.Options{Progress: &prog})
					return err
				})
				if err != nil {
					return err
				}
				out := struct {
					Project store.Project `json:"project"`
					Commit  store.ID      `json:"commit"`
					Stats   commit.Stats  `json:"stats"`
				}{p, id, st}
				return a.emit(out, func(w io.Writer) {
					fmt.Fprintf(w, "created project %s: layer 1 and branch main at %s\n", p.Name, id.Short())
					fmt.Fprintf(w, "files\t%d\nbytes\t%s\nnew payload\t%s\n", st.Delta.Files, showBytes(st.Delta.Bytes), showBytes(st.NewBytes))
				})
			})
		},
	}
	c.Flags().StringVar(&from, "from", "", "directory to import as the first layer")
	c.Flags().StringVarP(&msg, "message", "m", "", "commit message")
	return c
}

func projectListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List projects",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withDB(cmd.Context(), func(db *store.DB) error {
				ps, err := db.Projects(cmd.Context())
				if err != nil {
					return err
				}
				if ps == nil {
					ps = []store.Project{}
				}
				return a.emit(ps, func(w io.Writer) {
					fmt.Fprintln(w, "NAME\tLAYERS\tBRANCHES\tCREATED")
					for _, p := range ps {
						fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", p.Name, p.Layers, p.Branches, showTime(p.Created))
					}
				})
			})
		},
	}
}
