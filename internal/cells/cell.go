package cells

import (
	"context"
	"fmt"
	"strings"

	"layerfs.dev/layerfs/wire/errclass"
)

// Errors a caller checks with errors.Is.
var (
	// ErrUnknown: no cell has the requested id.
	ErrUnknown = errclass.New(errclass.NotFound, "unknown cell")
	// ErrUnavailable: a base cannot be built on this host (a tool such as
	// git or go is missing); the wrapped message says which.
	ErrUnavailable = errclass.New(errclass.Unavailable, "base unavailable")
	// ErrIneligible: the sandbox cannot run the cell (its probe failed);
	// the sample is kept and reported as ineligible, never as a time.
	ErrIneligible = errclass.New(errclass.Unavailable, "cell ineligible")
)

// Cell is one workload: a shell body run once in a sandbox whose working
// directory is a workspace holding the cell's base, and the end state that
// body must leave. A sample's lifecycle is
//
//	Base.Write into a directory -> commit it as the project's first layer
//	-> (Probe) -> run Body -> verify Expect() on the workspace
//	-> commit -> verify Expect() again on a fresh workspace of the commit
//
// Cells are values: the functions they hold are deterministic and keep no
// state, so a runner may build a base once and reuse the directory.
type Cell struct {
	ID    string // "C01".."C12" for the twelve, "X01".. for the extended set
	Title string // what it does, in a few words
	// Body is run as bash -o pipefail -c '{ BODY; } >/dev/null' with the
	// workspace as the working directory; see Wrap.
	Body string
	Base Base
	// Group is "" for the twelve cells and "extended" for the others;
	// tables give each group its own geometric mean.
	Group string
	// Probe, when set, is a body run in the sandbox before the cell: a
	// non-zero exit makes the cell ineligible there, its stdout saying why.
	Probe string
	// Expect returns the end state the verifier checks.
	Expect func() Expectation
}

// Base is what a workspace holds before the body runs. The zero Base is the
// empty workspace.
type Base struct {
	Name string // "" for empty, else a short name ("big", "repo", ...)
	// Write fills dir (an existing, empty directory) with the base. Nil for
	// the empty base. It is deterministic: the same bytes, names and modes
	// on every call (modification times are not part of a base).
	Write func(ctx context.Context, dir string) error
}

// WriteBase writes c's base into dir, which must exist; the empty base
// writes nothing.
func (c Cell) WriteBase(ctx context.Context, dir string) error {
	if c.Base.Write == nil {
		return nil
	}
	if err := c.Base.Write(ctx, dir); err != nil {
		return fmt.Errorf("cell %s: write base %s: %w", c.ID, c.Base.Name, err)
	}
	return nil
}

// Wrap is the exact command line body the harness runs for a cell: the body
// in a group with its stdout discarded, as CELLS.md specifies. It is meant
// for platforms.ShellArgv, which adds bash -o pipefail -c.
func Wrap(body string) string { return "{ " + body + "; } >/dev/null" }

// Runner runs a shell body in the sandbox, with the workspace root as the
// working directory. It is the same shape as verifier.Runner.
type Runner interface {
	Run(ctx context.Context, body string) (stdout string, exitCode int, err error)
}

// Eligible runs c's probe through r and returns nil when the sandbox can run
// the cell, an error wrapping ErrIneligible with the probe's reason when it
// cannot, or the runner's own error.
func Eligible(ctx context.Context, r Runner, c Cell) error {
	if c.Probe == "" {
		return nil
	}
	out, code, err := r.Run(ctx, c.Probe)
	if err != nil {
		return fmt.Errorf("cell %s: probe: %w", c.ID, err)
	}
	if code != 0 {
		reason := strings.TrimSpace(out)
		if reason == "" {
			reason = fmt.Sprintf("probe exited %d", code)
		}
		return fmt.Errorf("cell %s: %w: %s", c.ID, ErrIneligible, reason)
	}
	return nil
}

// All returns the twelve cells followed by the extended set.
func All() []Cell { return append(Twelve(), Extended()...) }

// ByID returns the cell with the given id (case-insensitive) from All.
func ByID(id string) (Cell, error) {
	for _, c := range All() {
		if strings.EqualFold(c.ID, id) {
			return c, nil
		}
	}
	return Cell{}, fmt.Errorf("cell %q: %w", id, ErrUnknown)
}

// Select returns the cells named by ids, in the order given; no ids means
// the twelve.
func Select(ids []string) ([]Cell, error) {
	if len(ids) == 0 {
		return Twelve(), nil
	}
	out := make([]Cell, 0, len(ids))
	for _, id := range ids {
		c, err := ByID(strings.TrimSpace(id))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
