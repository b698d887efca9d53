package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/bench"
	"layerfs.dev/layerfs/internal/stats"
)

// benchCrashCmd measures how long a crash of the daemon keeps the Store out
// of service: SIGKILL during an exec, to the first call that works.
func benchCrashCmd(a *app) *cobra.Command {
	var kills int
	c := &cobra.Command{
		Use:   "crash [--kills N]",
		Short: "Measure the time from SIGKILL of a supervised layerfsd (an exec running) to the first working call",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kills < 1 {
				return usageError{fmt.Errorf("--kills must be at least 1")}
			}
			bin, err := findDaemon()
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "layerfs-crash-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			res, err := bench.RunCrash(cmd.Context(), bench.CrashConfig{Daemon: bin, WorkDir: dir, Kills: kills,
				Progress: func(s string) {
					if !a.json {
						fmt.Fprintln(a.stderr, s)
					}
				}})
			if err != nil {
				return err
			}
			if a.json {
				return json.NewEncoder(a.stdout).Encode(res)
			}
			fmt.Fprintf(a.stdout, "time from SIGKILL of layerfsd (an exec running) to the first working call, %d kills:\n", len(res.Recovery))
			fmt.Fprintf(a.stdout, "  median %.0f ms, p95 %.0f ms, worst %.0f ms\n",
				stats.Median(res.Recovery), stats.Percentile(res.Recovery, 95), slices.Max(res.Recovery))
			fmt.Fprintf(a.stdout, "the killed exec's caller got: %s\n", res.ExecError)
			return nil
		},
	}
	c.Flags().IntVar(&kills, "kills", 20, "how many times to kill the daemon")
	return c
}
