package libkrun

import "layerfs.dev/layerfs/internal/platforms/internal/guest"

// Runner runs one msb command line (argv[0] is "msb"). Every msb call the
// platform makes goes through it, so tests can check the exact argv
// against recorded fixtures and replay msb's recorded outputs. A non-zero
// exit is a Result, not an error; the error is for a command that could
// not run at all (msb missing: wraps exec.ErrNotFound) or was cut short by
// ctx.
type Runner = guest.Runner

// Result is what one command printed and how it ended.
type Result = guest.Result

// ExecRunner runs msb with os/exec, finding it on PATH; its Env, when set,
// is msb's whole environment.
type ExecRunner = guest.ExecRunner
