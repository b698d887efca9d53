package guest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"

	"layerfs.dev/layerfs/internal/platforms"
)

// Tool makes a platform's calls to its CLI. Every call goes through Runner
// and is logged at debug level; the errors are worded alike for every tool,
// starting with the platform's Prefix and wrapping its sentinels. What
// differs between tools is data here (names, hints, the version parser),
// plus the Refuse hook for a tool with a failure of its own to recognise.
//
// A Tool is used through a pointer: it remembers the version CheckVersion
// accepted.
type Tool struct {
	// Argv0 is the command ("limactl", "container", "msb").
	Argv0 string
	// Prefix starts every error message and log line: the platform's name.
	Prefix string
	// Missing is the error text for a tool that is not on PATH, with how
	// to install it; the error wraps platforms.ErrUnavailable.
	Missing string
	// Refuse, when set, sees the result of every command that ran and
	// returns the error to report instead of it, or nil. Its error follows
	// Prefix and ": ".
	Refuse func(Result) error
	// ParseVersion reads the output of `Argv0 --version` into the version
	// and its text as the tool printed it. CheckVersion needs it.
	ParseVersion func(out []byte) (Semver, string, error)
	// MinVersion is the oldest version CheckVersion accepts; Upgrade says
	// how to get a newer one.
	MinVersion Semver
	Upgrade    string
	Runner     Runner       // nil: ExecRunner{}
	Log        *slog.Logger // nil: silent

	mu      sync.Mutex
	version string // accepted by CheckVersion
}

// Run runs the tool with args. Only a command that could not run at all
// (or that Refuse rejects) is an error here; the caller judges the exit
// status, because only it knows what the tool's failure means.
func (t *Tool) Run(ctx context.Context, args ...string) (Result, error) {
	argv := append([]string{t.Argv0}, args...)
	if t.Log != nil {
		t.Log.Debug(t.Prefix+": run", "argv", argv)
	}
	run := t.Runner
	if run == nil {
		run = ExecRunner{}
	}
	res, err := run.Run(ctx, argv, nil)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return res, fmt.Errorf("%s: %s: %w", t.Prefix, t.Missing, platforms.ErrUnavailable)
		}
		return res, fmt.Errorf("%s: %s: %w", t.Prefix, strings.Join(argv[:min(len(argv), 3)], " "), err)
	}
	if t.Refuse != nil {
		if err := t.Refuse(res); err != nil {
			return res, fmt.Errorf("%s: %w", t.Prefix, err)
		}
	}
	return res, nil
}

// Must runs a command that has to succeed: a non-zero exit is an error
// wrapping platforms.ErrCommand, with the end of what the tool wrote to stderr.
func (t *Tool) Must(ctx context.Context, args ...string) (Result, error) {
	res, err := t.Run(ctx, args...)
	if err != nil {
		return res, err
	}
	if res.ExitCode != 0 {
		return res, fmt.Errorf("%s: %s %s exited with status %d: %w; stderr:\n%s",
			t.Prefix, t.Argv0, args[0], res.ExitCode, platforms.ErrCommand, Tail(res.Stderr, 20))
	}
	return res, nil
}

// CheckVersion makes sure the tool is there and at least MinVersion, by
// running `Argv0 --version` the first time; once a version passed, it runs
// nothing. Each failure wraps platforms.ErrUnavailable.
func (t *Tool) CheckVersion(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.version != "" {
		return nil
	}
	res, err := t.Run(ctx, "--version")
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s: %s --version exited with status %d: %w; stderr:\n%s",
			t.Prefix, t.Argv0, res.ExitCode, platforms.ErrUnavailable, Tail(res.Stderr, 10))
	}
	v, raw, err := t.ParseVersion(res.Stdout)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", t.Prefix, platforms.ErrUnavailable, err)
	}
	if v.Less(t.MinVersion) {
		return fmt.Errorf("%s: %s %s is too old, LayerFS needs %s or newer (%s): %w",
			t.Prefix, t.Argv0, raw, t.MinVersion, t.Upgrade, platforms.ErrUnavailable)
	}
	t.version = raw
	return nil
}

// Version is the version CheckVersion accepted, as the tool printed it; ""
// before that.
func (t *Tool) Version() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.version
}
