package main

import (
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

func wsShellCmd(a *app) *cobra.Command {
	var opts client.ExecOptions
	cmd := &cobra.Command{
		Use:   "shell WS [-- CMD [ARGS...]]",
		Short: "An interactive shell (or CMD) on a terminal in a fresh sandbox on the workspace",
		Long: `Open an interactive shell (bash, or CMD with ARGS) on a terminal in a fresh
sandbox with the workspace at /workspace. This terminal is put in raw mode, so
every key, Ctrl-C included, reaches the sandbox's foreground process; its size
follows this window's. Leaving (the shell's exit) gives back the shell's exit
code; a connection that drops hangs the sandbox's terminal up.`,
		Args: func(cmd *cobra.Command, argv []string) error {
			switch dash := cmd.ArgsLenAtDash(); {
			case len(argv) == 0:
				return usageError{errors.New("ws shell: name a workspace")}
			case len(argv) > 1 && dash != 1:
				return usageError{errors.New("ws shell: give the command after --: ws shell WS -- CMD [ARGS...]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, argv []string) error {
			var code int
			err := a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				var err error
				code, err = a.shell(cmd, ws, argv[1:], opts)
				return err
			})
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&opts.Env, "env", "e", nil, "set NAME=VALUE in the shell's environment (repeatable)")
	f.StringVarP(&opts.Dir, "workdir", "w", "", "working directory relative to /workspace")
	f.DurationVar(&opts.Timeout, "timeout", 0, "end the shell after this long (default: the daemon's)")
	return cmd
}

// shell runs argv (empty: bash) on a terminal, this process's standard input
// in raw mode while it runs, and returns its exit code.
func (a *app) shell(cmd *cobra.Command, ws *client.Workspace, argv []string, opts client.ExecOptions) (int, error) {
	in := int(os.Stdin.Fd())
	size := wire.TerminalSize{}
	if rows, cols, ok := termSize(); ok {
		size = wire.TerminalSize{Rows: rows, Cols: cols}
	}
	opts.Stdout = a.stdout
	t, err := ws.Attach(cmd.Context(), orShell(argv), client.AttachOptions{ExecOptions: opts, TTY: &size})
	if err != nil {
		return 0, err
	}
	defer t.Close()
	if term.IsTerminal(in) {
		old, err := term.MakeRaw(in)
		if err != nil {
			return 0, err
		}
		defer func() { _ = term.Restore(in, old) }()
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for range winch {
			if rows, cols, ok := termSize(); ok {
				_ = t.Resize(rows, cols)
			}
		}
	}()
	go func() {
		// Keys as they are typed; the end of the input hangs up.
		_, _ = io.Copy(t, os.Stdin)
		_ = t.CloseStdin()
	}()
	res, err := t.Wait()
	if err != nil {
		return 0, err
	}
	return res.ExitCode, nil
}

// orShell is argv, or an interactive bash when it is empty.
func orShell(argv []string) []string {
	if len(argv) == 0 {
		return []string{"bash"}
	}
	return argv
}

// termSize is the size of the terminal this process writes to or reads
// from.
func termSize() (rows, cols int, ok bool) {
	for _, f := range []*os.File{os.Stdout, os.Stdin} {
		if c, r, err := term.GetSize(int(f.Fd())); err == nil && r > 0 && c > 0 {
			return r, c, true
		}
	}
	return 0, 0, false
}
