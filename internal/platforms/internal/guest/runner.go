package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// Runner runs one command line of a guest tool. A platform makes every tool
// call through it, so tests can check the exact argv against recorded
// fixtures and replay the tool's recorded outputs.
type Runner interface {
	// Run runs argv (argv[0] is the tool) to completion. A non-zero exit is
	// reported in Result.ExitCode with a nil error; the error is for a
	// command that could not be run at all (the tool is missing: wraps
	// exec.ErrNotFound) or was cut short by ctx.
	Run(ctx context.Context, argv []string, stdin io.Reader) (Result, error)
}

// Result is what one command printed and how it ended.
type Result struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
}

// ExecRunner runs commands with os/exec, finding the tool on PATH.
type ExecRunner struct {
	// Env, when set, is the whole environment of the tool (e.g. with
	// LIMA_HOME); nil inherits this process's environment.
	Env []string
	// Path, when set, is the tool's executable, run in place of argv[0]
	// found on PATH.
	Path string
	// Credential, when set, runs the tool as that user (a tool that
	// refuses root, run by a root process); Env should then give it that
	// user's HOME.
	Credential *syscall.Credential
}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, argv []string, stdin io.Reader) (Result, error) {
	if len(argv) == 0 {
		return Result{}, errors.New("empty command line")
	}
	path := r.Path
	if path == "" {
		var err error
		if path, err = exec.LookPath(argv[0]); err != nil {
			return Result{}, fmt.Errorf("find %s: %w", argv[0], err)
		}
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Env = r.Env
	if r.Credential != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.Credential}
	}
	// A tool that leaves children holding its pipes (ssh control masters)
	// must not hang Run after it exits or is killed.
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return res, fmt.Errorf("%s: %w", argv[0], ctx.Err())
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
		if res.ExitCode < 0 { // killed by a signal
			res.ExitCode = 128 + 9
		}
		return res, nil
	default:
		return res, fmt.Errorf("run %s: %w", argv[0], err)
	}
}
