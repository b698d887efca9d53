package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/bench"
	"layerfs.dev/layerfs/internal/bench/report"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/catalog"
)

// benchSessionCmd measures the session and scale figures: workspace open
// and close, exec latency and overhead, commit, fork, throughput, memory.
func benchSessionCmd(a *app) *cobra.Command {
	var platformList, dir, dataPath string
	var calls, idle, large int
	c := &cobra.Command{
		Use:   "session [--platform local,docker] [--calls N] [--data-path overlay|fuse]",
		Short: "Measure workspace open/close, exec latency and overhead, commit, fork+create, throughput and idle memory",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if calls < 1 || idle < 1 || large < bench.FilesPerLargeDir {
				return usageError{fmt.Errorf("--calls and --idle must be at least 1, --large-tree at least %d", bench.FilesPerLargeDir)}
			}
			if dir == "" {
				d, err := os.MkdirTemp("", "layerfs-session-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				dir = d
			}
			dir, _ = filepath.Abs(dir)
			daemon, _ := findDaemon() // without it, no separate-daemon figures
			cfg := bench.SessionConfig{
				Daemon:    daemon,
				Platforms: strings.Split(platformList, ","),
				Calls:     calls,
				Idle:      idle,
				LargeTree: large,
				WorkDir:   dir,
				DataPath:  dataPath,
				NewPlatform: func(name string) (platforms.Platform, error) {
					return catalog.New(name, catalog.Options{Project: "session"})
				},
				Progress: func(what string) {
					if !a.json {
						fmt.Fprintln(a.stderr, what)
					}
				},
			}
			figs, err := bench.RunSession(cmd.Context(), cfg)
			res := report.Results{Session: figs, Machine: machine(dir), Command: "layerfs " + strings.Join(os.Args[1:], " ")}
			if a.json {
				if jerr := report.WriteSessionJSON(a.stdout, figs); jerr != nil {
					return jerr
				}
			} else if terr := res.WriteSessionText(a.stdout); terr != nil {
				return terr
			}
			return err
		},
	}
	c.Flags().StringVar(&platformList, "platform", "local", "comma-separated platforms")
	c.Flags().StringVar(&dataPath, "data-path", "", "workspaces' data path: overlay or fuse (default: the daemon's)")
	c.Flags().IntVar(&calls, "calls", 30, "samples per latency figure")
	c.Flags().IntVar(&idle, "idle", 100, "workspaces held open for the memory figure")
	c.Flags().IntVar(&large, "large-tree", 100_000, "files of the tree for the scale figures (open over it, commit 1 changed file)")
	c.Flags().StringVar(&dir, "dir", "", "directory for the Store (default: a temporary one, removed after)")
	return c
}

// benchServicesCmd measures an exec of true beside two running services
// against one in a workspace without services.
func benchServicesCmd(a *app) *cobra.Command {
	var calls int
	c := &cobra.Command{
		Use:   "services [--calls N]",
		Short: "Measure an exec of true with two services running in the workspace, beside one without",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if calls < 1 {
				return usageError{fmt.Errorf("--calls must be at least 1")}
			}
			dir, err := os.MkdirTemp("", "layerfs-services-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			cfg := bench.SessionConfig{
				Calls:   calls,
				WorkDir: dir,
				NewPlatform: func(name string) (platforms.Platform, error) {
					return catalog.New(name, catalog.Options{Project: "session"})
				},
				Progress: func(what string) {
					if !a.json {
						fmt.Fprintln(a.stderr, what)
					}
				},
			}
			figs, err := bench.RunServicesExec(cmd.Context(), cfg)
			res := report.Results{Session: figs, Machine: machine(dir), Command: "layerfs " + strings.Join(os.Args[1:], " ")}
			if a.json {
				if jerr := report.WriteSessionJSON(a.stdout, figs); jerr != nil {
					return jerr
				}
			} else if terr := res.WriteSessionText(a.stdout); terr != nil {
				return terr
			}
			return err
		},
	}
	c.Flags().IntVar(&calls, "calls", 30, "samples per figure")
	return c
}
