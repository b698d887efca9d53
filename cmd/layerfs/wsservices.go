package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// Services: commands kept running in a workspace's sandbox
// (docs/concepts.md#services).

func wsRunCmd(a *app) *cobra.Command {
	var (
		body string
		opts client.ServiceOptions
	)
	cmd := &cobra.Command{
		Use:   "run WS [--name NAME] [--restart on-failure] (-c BODY | -- CMD [ARGS...])",
		Short: "Start a service: a command that keeps running in the workspace's sandbox",
		Long: `Start a command that keeps running in the workspace's sandbox after this
command returns, beside its execs: they see it (ps), reach it (localhost) and
may signal it. Its output goes to a log of its own (layerfs ws logs WS NAME).
  layerfs ws run WS --name web -- python3 -m http.server 8000
  layerfs ws run WS -c 'npm run dev'
--restart on-failure starts it again after a non-zero exit or a signal, with
a backoff. A command that cannot start fails here, with the reason.`,
		Args: func(cmd *cobra.Command, argv []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case len(argv) == 0:
				return usageError{errors.New("ws run: name a workspace")}
			case body != "" && len(argv) > 1:
				return usageError{errors.New("ws run: give -c BODY or -- CMD [ARGS...], not both")}
			case body == "" && (dash != 1 || len(argv) < 2):
				return usageError{errors.New("ws run: give -c BODY or -- CMD [ARGS...] after the workspace")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				var (
					sv  client.Service
					err error
				)
				if body != "" {
					sv, err = ws.StartServiceShell(cmd.Context(), body, opts)
				} else {
					sv, err = ws.StartService(cmd.Context(), argv[1:], opts)
				}
				if err != nil {
					return err
				}
				return a.emit(sv, func(w io.Writer) {
					fmt.Fprintf(w, "%s\tpid %d\t%s\n", sv.Name, sv.Pid, sv.State)
				})
			})
		},
	}
	cmd.Flags().StringVarP(&body, "command", "c", "", "a shell body (bash -o pipefail -c)")
	cmd.Flags().StringVar(&opts.Name, "name", "", "the service's name (default: the command's base name)")
	cmd.Flags().StringVar(&opts.Restart, "restart", "", "no (the default) or on-failure")
	cmd.Flags().StringArrayVarP(&opts.Env, "env", "e", nil, "NAME=VALUE in its environment (repeatable)")
	cmd.Flags().StringVar(&opts.Dir, "dir", "", "its working directory, relative to /workspace")
	return cmd
}

func wsServicesCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "services WS",
		Short: "List a workspace's services, running or ended",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				list, err := ws.Services(cmd.Context())
				if err != nil {
					return err
				}
				return a.emit(wire.ServiceList{Services: list}, func(w io.Writer) {
					fmt.Fprintln(w, "NAME\tSTATE\tPID\tSTARTED\tRESTARTS\tEXIT\tCOMMAND")
					for _, sv := range list {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", sv.Name, sv.State, showPid(sv.Pid),
							sv.Started.Local().Format(time.DateTime), sv.Restarts, showExit(sv), strings.Join(sv.Argv, " "))
					}
				})
			})
		},
	}
}

func showPid(pid int) string {
	if pid == 0 {
		return "-"
	}
	return fmt.Sprint(pid)
}

// showExit is how a service ended: its code or signal, and why.
func showExit(sv client.Service) string {
	switch {
	case sv.ExitCode == nil:
		return "-"
	case sv.Signal != "":
		return sv.Signal + " (" + sv.Reason + ")"
	}
	return fmt.Sprintf("%d (%s)", *sv.ExitCode, sv.Reason)
}

func wsLogsCmd(a *app) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs WS NAME [-f]",
		Short: "Print a service's output (its last MiB); -f follows it until it ends",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				return ws.ServiceLogs(cmd.Context(), argv[1], follow, a.stdout)
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print what comes, until the service ends or Ctrl-C")
	return cmd
}

func wsStopCmd(a *app) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "stop WS NAME",
		Short: "Stop a service: SIGTERM, then SIGKILL after --grace",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if grace < 0 {
				return usageError{errors.New("ws stop: --grace must not be negative")}
			}
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				sv, err := ws.StopService(cmd.Context(), argv[1], grace)
				if err != nil {
					return err
				}
				return a.emit(sv, func(w io.Writer) { fmt.Fprintf(w, "%s\t%s\t%s\n", sv.Name, sv.State, showExit(sv)) })
			})
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", wire.DefaultStopGrace, "how long after SIGTERM to send SIGKILL")
	return cmd
}

func wsWaitCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "wait WS NAME",
		Short: "Wait until a service has ended for good; its exit code becomes this command's",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			var code int
			err := a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				sv, err := ws.WaitService(cmd.Context(), argv[1])
				if err != nil {
					return err
				}
				if sv.ExitCode != nil {
					code = *sv.ExitCode
				}
				return a.emit(sv, func(w io.Writer) { fmt.Fprintf(w, "%s\t%s\t%s\n", sv.Name, sv.State, showExit(sv)) })
			})
			if err == nil && code != 0 {
				return exitError{code}
			}
			return err
		},
	}
}
