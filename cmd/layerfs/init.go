package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/store"
)

func initCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "init",
		Short: "Create a new, empty Store",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := store.Init(cmd.Context(), a.dir(), store.Options{})
			if err != nil {
				return err
			}
			if err := db.Close(); err != nil {
				return err
			}
			out := struct {
				Store  string `json:"store"`
				Schema int    `json:"schema"`
			}{a.dir(), store.SchemaVersion()}
			return a.emit(out, func(w io.Writer) {
				fmt.Fprintf(w, "initialized store %s (schema %d)\n", out.Store, out.Schema)
			})
		},
	}
}
