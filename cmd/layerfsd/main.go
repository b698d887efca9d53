package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/cloexec"
	"layerfs.dev/layerfs/internal/maxprocs"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
)

func main() {
	if sandbox.InitMain() {
		return
	}
	maxprocs.WithHeadroom() // see the package: exec latency after idle
	// Whatever this process inherited stays out of the sandboxes and
	// other children it starts.
	if err := cloexec.All(); err != nil {
		fmt.Fprintln(os.Stderr, "layerfsd: "+err.Error())
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{
		Use:           "layerfsd",
		Short:         "The LayerFS daemon",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	root.AddCommand(serveCmd(), versionCmd())
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var st exitStatus
	if errors.As(err, &st) {
		return int(st) // the supervised daemon has said why
	}
	fmt.Fprintln(stderr, "layerfsd: "+err.Error())
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

type usageError struct{ error }

// exitStatus ends the command with this status and no message of its own.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func (e usageError) Unwrap() error { return e.error }

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the daemon's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version())
			return err
		},
	}
}
