package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/bench/storebench"
)

func benchCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Benchmarks that print measured figures"}
	var cfg storebench.Config
	var chunking string
	store := &cobra.Command{
		Use:   "store [--dir D]",
		Short: "Measure dedup growth, capture throughput and fork time against the issue-2 targets",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !a.json {
				cfg.Log = a.stderr
			}
			if chunking != "" {
				if _, err := fmt.Sscanf(chunking, "%d/%d/%d", &cfg.Chunking.Min, &cfg.Chunking.Avg, &cfg.Chunking.Max); err != nil {
					return usageError{fmt.Errorf("--chunking %q: want MIN/AVG/MAX in bytes", chunking)}
				}
				if err := cfg.Chunking.Validate(); err != nil {
					return usageError{err}
				}
			}
			rep, err := storebench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if a.json {
				if err := a.emit(rep, nil); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(a.stdout, "layerfs bench store")
				if err := rep.WriteTable(a.stdout); err != nil {
					return err
				}
			}
			if !rep.Passed() {
				return errors.New("bench store: some figures missed their targets")
			}
			return nil
		},
	}
	store.Flags().StringVar(&cfg.Dir, "dir", "", "directory for the stores and inputs (default: a temporary one, removed after)")
	store.Flags().IntVar(&cfg.Runs, "runs", 3, "samples per throughput figure")
	store.Flags().IntVar(&cfg.Forks, "forks", 200, "samples per fork figure")
	store.Flags().IntVar(&cfg.Merges, "merges", 50, "samples per merge figure")
	store.Flags().StringVar(&chunking, "chunking", "", "chunk sizes MIN/AVG/MAX in bytes to try (default: the built-in ones)")
	c.AddCommand(store, benchSessionCmd(a), benchServicesCmd(a), benchSpawnCmd(a), benchFSCmd(a), benchCrashCmd(a), benchFleetCmd(a), benchFirstReadCmd(a), benchImageCmd(a),
		benchPortsCmd(a))
	return c
}
