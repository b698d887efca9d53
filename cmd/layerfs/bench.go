package main

import (
	"github.com/spf13/cobra"
)

func benchCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "bench", Short: "Benchmarks that print measured figures"}
	return c
}
