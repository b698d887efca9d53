package engine

import (
	"context"
	"fmt"
	"io"
	"time"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// execSpec turns a request into the platform's spec: platforms.FromRequest
// is the one place an exec is checked, with the engine's ids as the
// default uid and gid.
func (e *Engine) execSpec(req wire.ExecRequest) (platforms.ExecSpec, error) {
	return platforms.FromRequest(req, e.uid, e.gid)
}

// startExec registers a running exec unless the engine is draining.
func (e *Engine) startExec() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return fmt.Errorf("the daemon is shutting down: %w", errclass.Unavailable)
	}
	e.execs.Add(1)
	e.metrics.running.Add(1)
	return nil
}

func (e *Engine) endExec() {
	e.metrics.running.Add(-1)
	e.execs.Done()
}

// Exec runs one command in a fresh sandbox with the workspace at
// /workspace, streaming its output to stdout and stderr. A command that
// fails (non-zero exit, timeout) is a result, not an error; errors are for
// requests that could not run.
func (e *Engine) Exec(ctx context.Context, id string, req wire.ExecRequest, stdout, stderr io.Writer) (wire.ExecResult, error) {
	if req.TTY != nil {
		return wire.ExecResult{}, fmt.Errorf("%w: tty: a terminal takes its input as it is typed: attach the exec (POST /v1/workspaces/{id}/attach)", errclass.Invalid)
	}
	spec, err := e.execSpec(req)
	if err != nil {
		return wire.ExecResult{}, err
	}
	return e.run(ctx, id, req, spec, stdout, stderr)
}

// Attach runs one command as Exec does, with its input streamed from
// stdin (its end is the end of the command's input; on a terminal, req.TTY,
// it hangs the terminal up) and a terminal's new sizes from resize.
func (e *Engine) Attach(ctx context.Context, id string, req wire.ExecRequest, stdin io.Reader, stdout, stderr io.Writer, resize <-chan wire.TerminalSize) (wire.ExecResult, error) {
	if len(req.Stdin) > 0 {
		return wire.ExecResult{}, fmt.Errorf("%w: stdin: an attached exec's input streams on its connection; the request carries none", errclass.Invalid)
	}
	spec, err := e.execSpec(req)
	if err != nil {
		return wire.ExecResult{}, err
	}
	spec.Stdin = stdin
	if spec.Terminal != nil {
		spec.Terminal.Resize = resize
	}
	return e.run(ctx, id, req, spec, stdout, stderr)
}

// run runs a normalized spec (of req) in the workspace's sandbox and adds
// the receipt.
func (e *Engine) run(ctx context.Context, id string, req wire.ExecRequest, spec platforms.ExecSpec, stdout, stderr io.Writer) (wire.ExecResult, error) {
	ctx, acct := account.Open(ctx) // the receipt: what this exec did
	w, err := e.get(ctx, id)
	if err != nil {
		return wire.ExecResult{}, err
	}
	if err := e.startExec(); err != nil {
		return wire.ExecResult{}, err
	}
	defer e.endExec()
	// Counted before the lock is taken: an update, which refuses to run
	// under an exec, sees one that waits for a commit too.
	w.execs.Add(1)
	defer w.execs.Add(-1)
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.sb == nil {
		return wire.ExecResult{}, fmt.Errorf("%w: workspace %s ended", errclass.NotFound, id)
	}
	if w.opts.Image != nil {
		// The image's defaults where the request named none; what an
		// attach streams stays.
		stdin, term := spec.Stdin, spec.Terminal
		if spec, err = imageSpec(w.opts.Image, req); err != nil {
			return wire.ExecResult{}, err
		}
		spec.Stdin, spec.Terminal = stdin, term
	}
	t0 := time.Now()
	use := w.use.enter(acct)
	r, err := w.sb.Exec(ctx, spec, stdout, stderr)
	shared := w.use.leave(use)
	wall := time.Since(t0)
	if err == nil {
		err = e.heldToIsolation(ctx, w.opts.Platform, r)
	}
	if err != nil {
		e.metrics.execErrors.Add(1)
		return wire.ExecResult{}, fmt.Errorf("exec in %s: %w", id, err)
	}
	res := wire.ExecResult{ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, OutputTruncated: r.OutputTruncated}
	var upper wire.UpperStats
	if w.mnt != nil {
		upper = e.upperTook(ctx, w)
		e.metrics.observeUpper(upper)
	}
	res.Receipt = storeReceipt(acct, commit.Stats{})
	res.Receipt.WallNs = wall.Nanoseconds()
	res.Receipt.CommandNs = r.Command.Nanoseconds()
	res.Receipt.LaunchNs = (wall - r.Command).Nanoseconds()
	res.Receipt.Platform, res.Receipt.UserNamespace = w.opts.Platform, r.UserNamespace
	res.Receipt.Image = w.opts.Image.ref()
	res.Receipt.Quota = e.quotaUsage(w)
	res.Receipt.SharedMount = shared
	res.Receipt.Network = r.Network
	if r.Network == nil {
		mode, _ := w.net.now()
		res.Receipt.Network = &wire.NetUsage{Mode: mode}
	}
	e.metrics.net.bytesOut.Add(res.Receipt.Network.BytesOut)
	e.metrics.net.bytesIn.Add(res.Receipt.Network.BytesIn)
	if w.mnt != nil {
		res.Receipt.FUSE = fuseStats(fusefs.Stats{RequestStats: acct.FUSE()})
		res.Receipt.Upper = upper
	}
	e.metrics.observeExec(wall, r.ExitCode)
	return res, nil
}
