package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/bench/storebench"
)

func benchCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Benchmarks that print measured figures"}
	var cfg storebench.Config
	store := &cobra.Command{
		Use:   "store [--dir D]",
		Short: "Measure dedup growth, capture throughput and fork time against the issue-2 targets",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !a.json {
				cfg.Log = a.stderr
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
	c.AddCommand(store)
	_ = io.Discard
	return c
}
