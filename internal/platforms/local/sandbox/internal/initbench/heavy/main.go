package main

import (
	"database/sql"
	"fmt"
	"os"

	"github.com/docker/docker/client"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/spf13/cobra"
	"github.com/zeebo/blake3"
	_ "modernc.org/sqlite"

	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
)

func main() {
	if sandbox.InitMain() {
		return
	}
	// Keep the packages linked, as a daemon would use them.
	db, err := sql.Open("sqlite", ":memory:")
	if err == nil {
		db.Close()
	}
	_, _ = client.NewClientWithOpts(client.FromEnv)
	_ = gofs.Options{}
	_ = blake3.New()
	_ = (&cobra.Command{Use: "heavy"}).Execute()
	fmt.Fprintln(os.Stderr, "heavy is a sandbox init: run it through the launcher")
	os.Exit(2)
}
