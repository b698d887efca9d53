package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

func daemonCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Start, stop and inspect the Store's daemon (layerfsd)",
		Long: `Verbs that need a daemon start one for the selected Store when none answers
on <store>/layerfsd.sock; it exits by itself after $LAYERFS_IDLE_EXIT (default 10m)
without requests and without workspaces. $LAYERFS_DAEMON (unix:///path, or
tcp://host:port with $LAYERFS_TOKEN) selects another daemon instead, for
every verb.`,
	}
	cmd.AddCommand(daemonStatusCmd(a), daemonStartCmd(a), daemonStopCmd(a))
	return cmd
}

func daemonStatusCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Tell whether a daemon runs, and what it serves",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.dial(cmd.Context())
			if err != nil {
				addr, _ := a.daemonAddr()
				return fmt.Errorf("%w: no daemon answers on %s: %w", errclass.Unavailable, strings.TrimPrefix(addr, "unix://"), err)
			}
			defer c.Close()
			st, err := c.Daemon(cmd.Context())
			if err != nil {
				return err
			}
			return a.emit(st, func(w io.Writer) { daemonTable(w, st) })
		},
	}
}

func daemonTable(w io.Writer, st wire.DaemonStatus) {
	row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
	row("pid", fmt.Sprint(st.PID))
	if st.Supervisor != 0 {
		row("supervisor", fmt.Sprintf("pid %d (restarts the daemon if it crashes)", st.Supervisor))
	}
	row("version", st.Version.Version+" (api "+st.API+", "+st.GoVersion+")")
	row("store", st.Store)
	row("socket", st.Socket)
	if st.TCP != "" {
		row("tcp", st.TCP)
	}
	row("started", showTime(st.Started)+" (up "+time.Since(st.Started).Round(time.Second).String()+")")
	row("workspaces", fmt.Sprint(st.Workspaces))
	row("execs running", fmt.Sprint(st.Execs))
	row("platforms", strings.Join(st.Platforms, ", "))
	for _, iso := range st.Isolation {
		isolationRows(row, iso)
	}
	if len(st.HostNetwork) > 0 {
		row("host network", strings.Join(st.HostNetwork, ", ")+" (granted the host's network namespace)")
	}
	idle := st.IdleExit
	if idle == "" {
		idle = "never"
	}
	row("idle exit", idle)
}

// isolationRows are the rows that say what one platform's sandboxes get.
func isolationRows(row func(k, v string), iso wire.Isolation) {
	p := iso.Platform + " "
	if iso.UserNamespace != "" {
		row(p+"user namespace", "uid_map "+iso.UserNamespace+" (inside, host, size)")
	} else {
		row(p+"user namespace", "none: "+iso.NoUserNamespace)
	}
	row(p+"seccomp", iso.Seccomp)
	l := iso.Limits
	row(p+"limits", fmt.Sprintf("memory %s; pids %s; cpu %s; open files %s", l.Memory, l.Pids, l.CPU, l.OpenFiles))
	row(p+"network", iso.Network)
	if iso.Egress != "" {
		row(p+"egress", iso.Egress)
	}
	row(p+"boundary", iso.Boundary)
}

func daemonStartCmd(a *app) *cobra.Command {
	var idle string
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start the Store's daemon in the background (no-op when one runs)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, own := a.daemonAddr(); !own {
				return usageError{fmt.Errorf("$LAYERFS_DAEMON is set: that daemon is not started by this command")}
			}
			if _, err := time.ParseDuration(idle); err != nil {
				return usageError{fmt.Errorf("--idle-exit %q: %w", idle, err)}
			}
			if c, err := a.dial(cmd.Context()); err == nil {
				defer c.Close()
				fmt.Fprintf(a.stdout, "layerfsd already runs (pid %d) on %s\n", c.Version().PID, a.socketPath())
				return nil
			}
			pid, err := a.startDaemon(cmd.Context(), idle)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "layerfsd runs (pid %d) on %s\n", pid, a.socketPath())
			return nil
		},
	}
	cmd.Flags().StringVar(&idle, "idle-exit", defaultIdleExit, "exit after this long without requests and workspaces (0s: never)")
	return cmd
}

func daemonStopCmd(a *app) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop the daemon gracefully (running execs finish first) and wait for it",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := a.dial(ctx)
			if err != nil {
				fmt.Fprintln(a.stdout, "no daemon running")
				return nil
			}
			pid := c.Version().PID
			if err := c.StopDaemon(ctx); err != nil {
				return err
			}
			c.Close()
			_, own := a.daemonAddr()
			deadline := time.Now().Add(timeout)
			for {
				gone := processGone(pid)
				if !own {
					// A remote daemon's pid is not ours to probe: wait for its socket.
					c, err := a.dial(ctx)
					gone = err != nil
					if c != nil {
						c.Close()
					}
				}
				if gone {
					fmt.Fprintf(a.stdout, "layerfsd (pid %d) stopped\n", pid)
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("layerfsd (pid %d) still runs after %s", pid, timeout)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(50 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the daemon to exit")
	return cmd
}

// processGone reports whether pid has exited (a zombie counts as gone: its
// parent may not be here to reap it).
func processGone(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] == 'Z'
	}
	return false
}
