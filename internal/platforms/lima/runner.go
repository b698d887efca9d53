package lima

import "layerfs.dev/layerfs/internal/platforms/internal/guest"

// Runner runs one limactl command line (argv[0] is "limactl"). Every
// limactl call the platform makes goes through it, so tests can check the
// exact argv against recorded fixtures and replay limactl's recorded
// outputs. A non-zero exit is a Result, not an error; the error is for a
// command that could not run at all (limactl missing: wraps
// exec.ErrNotFound) or was cut short by ctx.
type Runner = guest.Runner

// Result is what one command printed and how it ended.
type Result = guest.Result

// ExecRunner runs limactl with os/exec, finding it on PATH; its Env, when
// set, is limactl's whole environment (e.g. with LIMA_HOME).
type ExecRunner = guest.ExecRunner
