package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire/errclass"
)

// app is one invocation: the flags every verb shares and where output goes.
type app struct {
	root     *cobra.Command
	storeDir string
	json     bool
	stdout   io.Writer
	stderr   io.Writer
}

// exitError ends the command with a given exit code and no message: the
// exit code of a command run in a workspace, passed through.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError marks errors in how the command was called (exit code 2, as
// for an invalid argument).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run executes the command line args and returns the exit code: 0, else
// the exit code of the error's class (package errclass: 2 usage or invalid,
// 3 not found, 4 exists, 5 conflict, 6 unavailable, 7 unauthorized, 8 no
// space, 9 corrupt, 1 anything else). Errors are one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	a.root = &cobra.Command{
		Use:   "layerfs",
		Short: "LayerFS: copy-on-write workspaces with history for AI agents",
		Long: `LayerFS keeps projects as histories of immutable commits in a Store
(--store, else $LAYERFS_HOME, else ~/.local/share/layerfs).
REF names a layer (layer:N), a branch, or a commit (id or unique prefix).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	a.root.PersistentFlags().StringVar(&a.storeDir, "store", "", "store directory (default $LAYERFS_HOME or ~/.local/share/layerfs); for init, a shared Store's URL postgres://...?bucket=s3://HOST/BUCKET")
	a.root.PersistentFlags().BoolVar(&a.json, "json", false, "print JSON instead of a table")
	a.root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	a.root.SetOut(stdout)
	a.root.SetErr(stderr)
	a.root.SetArgs(args)
	commands(a)
	err := a.root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(stderr, "layerfs: "+oneLine(err.Error()))
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		return errclass.Invalid.ExitCode()
	}
	return errclass.ExitCode(err)
}

// oneLine folds a multi-line message (cobra's suggestions) into one line.
func oneLine(s string) string {
	var parts []string
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// args wraps a cobra argument check so that its failure is a usage error.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usageError{fmt.Errorf("%s: %w (usage: %s)", cmd.CommandPath(), err, cmd.UseLine())}
		}
		return nil
	}
}

func (a *app) dir() string {
	if a.storeDir != "" && a.storeURL() == "" {
		return a.storeDir
	}
	return store.DefaultDir()
}

// storeURL is --store when it names a shared Store (postgres://...) rather
// than a directory; only init uses it, to join the directory to that Store.
func (a *app) storeURL() string {
	if strings.HasPrefix(a.storeDir, "postgres://") || strings.HasPrefix(a.storeDir, "postgresql://") {
		return a.storeDir
	}
	return ""
}

// emit prints v as JSON with --json, else calls table with a tabwriter.
func (a *app) emit(v any, table func(w io.Writer)) error {
	if a.json {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// showPath quotes a path that holds bytes a table cannot show as is
// (newlines, tabs, invalid UTF-8).
func showPath(p string) string {
	if !utf8.ValidString(p) || strings.ContainsAny(p, "\t\n\r\"") || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 }) {
		return strconv.Quote(p)
	}
	return p
}

// orDash shows "" as "-" in a table.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func showTime(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") }

func showBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func author() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "layerfs"
}
