package applecontainer

import "layerfs.dev/layerfs/internal/platforms/internal/guest"

// Runner runs one `container` command line (argv[0] is "container"). Every
// CLI call the platform makes goes through it, so tests can check the
// exact argv against recorded fixtures and replay the CLI's recorded
// outputs. A non-zero exit is a Result, not an error; the error is for a
// command that could not run at all (the CLI missing: wraps
// exec.ErrNotFound) or was cut short by ctx.
type Runner = guest.Runner

// Result is what one command printed and how it ended.
type Result = guest.Result

// ExecRunner runs the CLI with os/exec, finding it on PATH; its Env, when
// set, is the CLI's whole environment.
type ExecRunner = guest.ExecRunner
