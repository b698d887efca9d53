package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// CrashConfig configures RunCrash.
type CrashConfig struct {
	Daemon  string // the layerfsd binary
	WorkDir string // where the Store goes
	Kills   int
	// Progress, when set, is told what runs.
	Progress func(string)
}

// CrashResult is what RunCrash measured, in milliseconds per kill.
type CrashResult struct {
	// Recovery is, per kill, the time from SIGKILL of the daemon (while an
	// exec writes in a mounted workspace) to the first call that works:
	// the supervisor's restart, the Store's opening, the workspace's
	// recovery and the call itself.
	Recovery []float64
	// ExecError is the error the killed exec's caller got (the last one).
	ExecError string
}

// RunCrash starts `layerfsd serve --supervise` on a fresh Store with one
// workspace, then Kills times: starts an exec that writes in a loop, kills
// the daemon with SIGKILL, and times until a workspace listing works again
// through a new connection. Each kill must also leave the workspace mounted
// with its files.
func RunCrash(ctx context.Context, cfg CrashConfig) (CrashResult, error) {
	var res CrashResult
	say := func(s string) {
		if cfg.Progress != nil {
			cfg.Progress(s)
		}
	}
	d, err := spawnDaemon(cfg.Daemon, filepath.Join(cfg.WorkDir, "store"), "--supervise")
	if err != nil {
		return res, err
	}
	defer d.stop()
	dial := func() (*client.Client, error) { return d.dial(ctx) }
	c, err := dial()
	if err != nil {
		return res, err
	}
	if _, err := c.CreateProject(ctx, wire.CreateProject{Name: "crash"}); err != nil {
		return res, err
	}
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "crash", Branch: "main"})
	if err != nil {
		return res, err
	}
	id := ws.ID()
	c.Close()
	for i := range cfg.Kills {
		say(fmt.Sprintf("kill %d of %d", i+1, cfg.Kills))
		c, err := dial()
		if err != nil {
			return res, err
		}
		st, err := c.Daemon(ctx)
		if err != nil {
			return res, err
		}
		ws, err := c.Workspace(ctx, id)
		if err != nil {
			return res, err
		}
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := ws.Exec(ctx, "echo started; for j in $(seq 1 100000); do echo $j > w$((j%50)); done",
				client.ExecOptions{Stdout: &firstWrite{started: started}})
			done <- err
		}()
		select {
		case <-started:
		case err := <-done:
			return res, fmt.Errorf("exec ended before the kill: %v", err)
		}
		if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
			return res, err
		}
		t0 := time.Now()
		c2, err := dial()
		if err != nil {
			return res, err
		}
		res.Recovery = append(res.Recovery, float64(time.Since(t0))/float64(time.Millisecond))
		if err := <-done; err != nil {
			res.ExecError = err.Error()
		}
		w, err := c2.Workspace(ctx, id)
		if err != nil || w.Info().State != wire.StateMounted {
			return res, fmt.Errorf("kill %d: workspace after recovery: %v %+v", i+1, err, w)
		}
		c.Close()
		c2.Close()
	}
	return res, nil
}

// firstWrite closes started on the first write.
type firstWrite struct {
	started chan struct{}
	done    bool
}

func (w *firstWrite) Write(p []byte) (int, error) {
	if !w.done {
		w.done = true
		close(w.started)
	}
	return len(p), nil
}

// spawned is a layerfsd process serving a Store, as the CLI starts one.
type spawned struct {
	cmd    *exec.Cmd
	socket string
	log    bytes.Buffer
}

// spawnDaemon starts `layerfsd serve --store store args...` (the Store is
// made if missing).
func spawnDaemon(bin, store string, args ...string) (*spawned, error) {
	d := &spawned{socket: "unix://" + filepath.Join(store, "layerfsd.sock")}
	d.cmd = exec.Command(bin, append([]string{"serve", "--store", store}, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = &d.log, &d.log
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return d, nil
}

// dial connects to the daemon once it answers a listing, within a minute.
func (d *spawned) dial(ctx context.Context) (*client.Client, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := client.Dial(ctx, d.socket)
		if err == nil {
			if _, err = c.Workspaces(ctx); err == nil {
				return c, nil
			}
			c.Close()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("no daemon answered: %v; log:\n%s", err, d.log.String())
		}
		time.Sleep(time.Millisecond)
	}
}

// stop ends the daemon as a user would (SIGTERM) and waits for it.
func (d *spawned) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	_ = d.cmd.Wait()
}
