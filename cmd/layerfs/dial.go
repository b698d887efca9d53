package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire/errclass"
)

// Daemon discovery for the verbs that talk to layerfsd:
//
//   - $LAYERFS_DAEMON (unix:///path, or tcp://host:port or http://host:port
//     with $LAYERFS_TOKEN) names a daemon explicitly; it is never
//     auto-started. Paths the verbs pass (--from, checkout's DIR) are then
//     paths on that daemon's host.
//   - Otherwise the daemon of the selected Store answers on
//     <store>/layerfsd.sock, and verbs that need one start it when nothing
//     answers there: `layerfsd serve --store DIR --idle-exit 10m` in its own
//     session, logging to <store>/layerfsd.log, so that it outlives the
//     command and exits by itself when unused.

const (
	daemonSocket = "layerfsd.sock"
	daemonLog    = "layerfsd.log"
	// startTimeout bounds the wait for an auto-started daemon to answer.
	startTimeout = 30 * time.Second
	// defaultIdleExit is how long an auto-started daemon stays up unused
	// ($LAYERFS_IDLE_EXIT overrides).
	defaultIdleExit = "10m"
)

func (a *app) socketPath() string { return filepath.Join(a.dir(), daemonSocket) }

// daemonAddr is the address to dial and whether it is the Store's own
// socket (which may be auto-started).
func (a *app) daemonAddr() (addr string, own bool) {
	if env := os.Getenv("LAYERFS_DAEMON"); env != "" {
		return env, false
	}
	return "unix://" + a.socketPath(), true
}

// dial connects to a running daemon without starting one.
func (a *app) dial(ctx context.Context) (*client.Client, error) {
	addr, _ := a.daemonAddr()
	var opts []client.Option
	if tok := os.Getenv("LAYERFS_TOKEN"); tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return client.Dial(dctx, addr, opts...)
}

// daemon connects to the daemon, starting the Store's own when none answers
// (which creates the Store when there is none).
func (a *app) daemon(ctx context.Context) (*client.Client, error) {
	c, err := a.dial(ctx)
	if err == nil {
		return c, nil
	}
	addr, own := a.daemonAddr()
	switch {
	case errclass.Of(err) != errclass.Internal && !client.IsDaemonLost(err): // it answered: unauthorized, ...
		return nil, fmt.Errorf("daemon on %s: %w", addr, err)
	case !own || !(notListening(err) || client.IsDaemonLost(err)): // lost: it died as we dialled
		return nil, fmt.Errorf("%w: no daemon answers on %s: %w", errclass.Unavailable, addr, err)
	}
	if a.supervised() {
		// Its supervisor is starting it again (after a crash): wait.
		return a.awaitDaemon(ctx, nil, nil)
	}
	if _, err := a.startDaemon(ctx, os.Getenv("LAYERFS_IDLE_EXIT")); err != nil {
		return nil, err
	}
	return a.dial(ctx)
}

// withDaemon runs fn with a client of the (auto-started) daemon.
func (a *app) withDaemon(cmd *cobra.Command, fn func(c *client.Client) error) error {
	c, err := a.daemon(cmd.Context())
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// withStore is withDaemon for the verbs about what a Store holds (history,
// gc, fsck, stats): with no daemon named, a Store that does not exist is
// refused rather than created empty by the daemon a verb would start.
func (a *app) withStore(cmd *cobra.Command, fn func(c *client.Client) error) error {
	if _, own := a.daemonAddr(); own && !store.Exists(a.dir()) {
		return fmt.Errorf("open store %s: %w (run: layerfs init --store %s)", a.dir(), store.ErrNoStore, a.dir())
	}
	return a.withDaemon(cmd, fn)
}

// hostPath makes a path given on the command line one the daemon can use:
// absolute, for the Store's own daemon (it runs on this host); as given, for
// a daemon named by $LAYERFS_DAEMON (a path on its host). "" stays "".
func (a *app) hostPath(p string) (string, error) {
	if _, own := a.daemonAddr(); !own || p == "" {
		return p, nil
	}
	return filepath.Abs(p)
}

// supervisorLock is layerfsd's SupervisorLockName.
const supervisorLock = "layerfsd.supervisor.lock"

// supervised reports whether a supervisor holds the Store's supervisor lock.
func (a *app) supervised() bool {
	f, err := os.Open(filepath.Join(a.dir(), supervisorLock))
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB), syscall.EWOULDBLOCK)
}

// notListening tells a missing or dead socket from other dial failures.
func notListening(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// findDaemon locates layerfsd: next to this executable, else on PATH.
func findDaemon() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "layerfsd")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath("layerfsd"); err == nil {
		return p, nil
	}
	return "", errors.New("cannot start a daemon: layerfsd is neither next to the layerfs executable nor on PATH")
}

// startDaemon starts layerfsd for the Store in the background and waits
// (bounded) until it answers. It returns the daemon's pid.
func (a *app) startDaemon(ctx context.Context, idleExit string) (int, error) {
	bin, err := findDaemon()
	if err != nil {
		return 0, err
	}
	if idleExit == "" {
		idleExit = defaultIdleExit
	}
	dir := a.dir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	logPath := filepath.Join(dir, daemonLog)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("daemon log: %w", err)
	}
	defer logf.Close()
	start, _ := logf.Seek(0, 2)
	// Supervised: a crash of the daemon is followed by a restart that
	// recovers its workspaces, and nothing it leaves stays a zombie.
	cmd := exec.Command(bin, "serve", "--supervise", "--store", dir, "--idle-exit", idleExit)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: the daemon survives this command and its terminal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c, err := a.awaitDaemon(ctx, exited, func() string { return logTail(logPath, start) })
	if err != nil {
		return 0, fmt.Errorf("%w; see %s", err, logPath)
	}
	pid := c.Version().PID
	c.Close()
	fmt.Fprintf(a.stderr, "layerfs: started layerfsd (pid %d, supervisor %d) for %s; it exits after %s unused\n", pid, cmd.Process.Pid, dir, idleExit)
	return pid, nil
}

// awaitDaemon dials until the Store's daemon answers, at most startTimeout.
// exited, when not nil, reports the end of the daemon this command started;
// tail then reads what it logged. An end because another daemon serves the
// Store (started at the same moment, or restarted by its supervisor) is
// waited out.
func (a *app) awaitDaemon(ctx context.Context, exited <-chan error, tail func() string) (*client.Client, error) {
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := a.dial(ctx)
		if err == nil {
			return c, nil
		}
		select {
		case werr := <-exited:
			if t := tail(); !strings.Contains(t, "another layerfsd already serves") {
				return nil, fmt.Errorf("layerfsd exited at start (%v): %s", werr, t)
			}
			exited = nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no layerfsd answered on %s within %s", a.socketPath(), startTimeout)
		}
	}
}

// logTail returns what the daemon logged since offset: the error it ended
// with, where it printed one, else its last lines.
func logTail(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return "see " + path
	}
	lines := strings.Split(strings.TrimSpace(string(bytes.TrimSpace(b[offset:]))), "\n")
	for _, l := range lines {
		if msg, ok := strings.CutPrefix(l, "layerfsd: "); ok {
			return msg
		}
	}
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
