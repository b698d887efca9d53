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
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/commit"
	"layerfs.dev/layerfs/store"
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

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run executes the command line args and returns the exit code: 0, 1 for
// failures, 2 for usage errors. Errors are one line on stderr.
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
	a.root.PersistentFlags().StringVar(&a.storeDir, "store", "", "store directory (default $LAYERFS_HOME or ~/.local/share/layerfs)")
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
		return 2
	}
	return 1
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
	if a.storeDir != "" {
		return a.storeDir
	}
	return store.DefaultDir()
}

// open opens the store; verbs close it when done.
func (a *app) open(ctx context.Context) (*store.DB, error) {
	db, err := store.Open(ctx, a.dir(), store.Options{})
	if errors.Is(err, store.ErrNoStore) {
		return nil, fmt.Errorf("%w (run: layerfs init --store %s)", err, a.dir())
	}
	return db, err
}

// withDB runs fn on the open store and closes it, keeping fn's error first.
func (a *app) withDB(ctx context.Context, fn func(db *store.DB) error) (err error) {
	db, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	return fn(db)
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

// progress shows a spinner with live counts on stderr while fn runs, when
// stderr is a terminal; otherwise it only runs fn.
func (a *app) progress(what string, p *commit.Progress, fn func() error) error {
	f, ok := a.stderr.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return fn()
	}
	bar := progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(f),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond),
	)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				bar.Describe(fmt.Sprintf("%s: %d entries, %s", what, p.Entries.Load(), showBytes(p.Bytes.Load())))
				_ = bar.Add(1)
			}
		}
	}()
	err := fn()
	close(done)
	wg.Wait()
	_ = bar.Finish()
	return err
}

// fsckProgress is a progress bar with a known total for fsck.
func (a *app) fsckProgress() (func(done, total int), func()) {
	f, ok := a.stderr.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return nil, func() {}
	}
	var bar *progressbar.ProgressBar
	return func(done, total int) {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("fsck"),
					progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(100*time.Millisecond))
			}
			_ = bar.Set(done)
		}, func() {
			if bar != nil {
				_ = bar.Finish()
			}
		}
}

func author() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "layerfs"
}
