package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
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
		Long: `Create a project: its first layer (DIR's contents, or empty) and branch main.
DIR is read by the daemon: a path on its host ($LAYERFS_DAEMON's, when set).`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				dir, err := a.hostPath(from)
				if err != nil {
					return err
				}
				p, err := c.CreateProject(cmd.Context(), wire.CreateProject{Name: argv[0], FromPath: dir, Message: msg})
				if err != nil {
					return err
				}
				if a.json {
					return a.emit(p, nil)
				}
				b, err := c.Branch(cmd.Context(), p.Name, "main")
				if err != nil {
					return err
				}
				return a.emit(p, func(w io.Writer) {
					fmt.Fprintf(w, "created project %s: layer 1 and branch main at %s\n", p.Name, short(b.Head))
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
			return a.withStore(cmd, func(c *client.Client) error {
				ps, err := c.Projects(cmd.Context())
				if err != nil {
					return err
				}
				return a.emit(nonNil(ps), func(w io.Writer) {
					fmt.Fprintln(w, "NAME\tLAYERS\tBRANCHES\tCREATED")
					for _, p := range ps {
						fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", p.Name, p.Layers, p.Branches, showTime(p.Created))
					}
				})
			})
		},
	}
}
