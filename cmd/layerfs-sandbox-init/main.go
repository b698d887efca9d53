package main

import (
	"fmt"
	"os"

	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
)

func main() {
	if sandbox.InitMain() {
		return
	}
	fmt.Fprintln(os.Stderr, "layerfs-sandbox-init is started by layerfsd for each exec; it is not run by hand")
	os.Exit(2)
}
