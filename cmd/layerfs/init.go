package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/store"
)

func initCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a new, empty Store (or join a shared one with --store)",
		Long: `Create a new, empty Store in the LayerFS directory: SQLite and pack files there.

With --store postgres://...?bucket=s3://HOST[:PORT]/BUCKET (a shared Store's
URL rather than a directory), the directory ($LAYERFS_HOME, else
~/.local/share/layerfs) becomes this host's part of a shared Store instead:
references and the object index in PostgreSQL, chunk payloads in the S3
bucket, and only this host's caches and workspaces in the directory
(docs/fleet.md). The first host creates the schema and the bucket; the others
join them. Later commands and layerfsd open the directory as usual.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := store.Init(cmd.Context(), a.dir(), store.Options{URL: a.storeURL()})
			if err != nil {
				return err
			}
			out := struct {
				Store  string `json:"store"`
				Schema int    `json:"schema"`
				Shared bool   `json:"shared"`
				Node   string `json:"node,omitempty"`
				// CacheVerity: "on" when the cache's files are sealed
				// with fs-verity, else "off: " and why.
				CacheVerity string `json:"cache_verity"`
			}{a.dir(), store.SchemaVersion(), db.Shared(), db.Node(), db.CacheVerity()}
			if out.Shared {
				out.Schema = store.PostgresSchemaVersion()
			}
			if err := db.Close(); err != nil {
				return err
			}
			return a.emit(out, func(w io.Writer) {
				if out.Shared {
					fmt.Fprintf(w, "joined shared store from %s as node %s (schema %d)\n", out.Store, out.Node, out.Schema)
					return
				}
				fmt.Fprintf(w, "initialized store %s (schema %d)\n", out.Store, out.Schema)
				fmt.Fprintf(w, "cache fs-verity %s\n", out.CacheVerity)
			})
		},
	}
	return cmd
}
