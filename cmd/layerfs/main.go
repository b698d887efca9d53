package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"layerfs.dev/layerfs/internal/cloexec"
	"layerfs.dev/layerfs/internal/maxprocs"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
)

func main() {
	// The local platform re-executes this binary as the sandbox init when
	// the small init binary is not installed beside it.
	if sandbox.InitMain() {
		return
	}
	maxprocs.WithHeadroom() // see the package: exec latency after idle
	// Whatever this process inherited stays out of the sandboxes and
	// other children it starts.
	if err := cloexec.All(); err != nil {
		fmt.Fprintln(os.Stderr, "layerfs: "+err.Error())
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// commands lists the verb groups; new groups are appended here.
func commands(a *app) {
	a.root.AddCommand(
		initCmd(a),
		projectCmd(a),
		branchCmd(a),
		layerCmd(a),
		logCmd(a),
		diffCmd(a),
		checkoutCmd(a),
		commitCmd(a),
		mergeCmd(a),
		gcCmd(a),
		fsckCmd(a),
		statsCmd(a),
		benchCmd(a),
		daemonCmd(a),
		wsCmd(a),
		imageCmd(a),
		cellsCmd(a),
		mcpCmd(a),
	)
}
