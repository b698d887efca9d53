package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// portArg parses a port argument: 1-65535.
func portArg(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, usageError{fmt.Errorf("port %q: a TCP port is 1 to 65535", s)}
	}
	return n, nil
}

// forward is what `ws port` prints once it listens.
type forward struct {
	Workspace string `json:"workspace"`
	Port      int    `json:"port"`
	Listen    string `json:"listen"` // host:port, or unix:PATH
}

func wsPortCmd(a *app) *cobra.Command {
	var listen, sock string
	cmd := &cobra.Command{
		Use:   "port WS PORT",
		Short: "Forward a local TCP port (or unix socket) to PORT inside the workspace's sandbox (until Ctrl-C)",
		Long: `Listen on a local address (--listen, default 127.0.0.1 on a free port, or a unix
socket with --unix) and forward each connection to PORT on the loopback inside
the workspace's sandbox, through the daemon, which enters the sandbox's network
namespace for it: the sandbox's network stays its own. Plain TCP: HTTP,
WebSocket, a database. Prints the address it listens on, then runs until
interrupted. A connection made while nothing listens on PORT is closed, and
the reason printed on stderr.`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			port, err := portArg(argv[1])
			if err != nil {
				return err
			}
			if listen != "" && sock != "" {
				return usageError{errors.New("ws port: --listen or --unix, not both")}
			}
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				var l net.Listener
				var where string
				if sock != "" {
					if l, err = net.Listen("unix", sock); err != nil {
						return err
					}
					where = "unix:" + sock
				} else {
					if listen == "" {
						listen = "127.0.0.1:0"
					}
					if l, err = net.Listen("tcp", listen); err != nil {
						return err
					}
					where = l.Addr().String()
				}
				err := a.emit(forward{Workspace: ws.ID(), Port: port, Listen: where}, func(w io.Writer) {
					fmt.Fprintf(w, "forwarding %s -> %s port %d\n", where, ws.ID(), port)
				})
				if err != nil {
					l.Close()
					return err
				}
				if f, ok := a.stdout.(*os.File); ok {
					_ = f.Sync()
				}
				return ws.ForwardPort(cmd.Context(), l, port, func(err error) {
					fmt.Fprintf(a.stderr, "layerfs: forward to port %d: %v\n", port, err)
				})
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "local TCP address to listen on (default 127.0.0.1:0: a free port)")
	cmd.Flags().StringVar(&sock, "unix", "", "listen on this unix socket instead")
	return cmd
}

func wsShareCmd(a *app) *cobra.Command {
	var public bool
	cmd := &cobra.Command{
		Use:   "share WS PORT",
		Short: "A URL on the daemon's TCP listener that reaches PORT in the workspace with a token of its own",
		Long: `Share PORT inside the workspace's sandbox: print a URL on the daemon's TCP
listener (layerfsd serve --tcp) whose path carries a secret token; a browser
that has it reaches the port over HTTP (WebSocket upgrades and streamed answers
pass through) without the daemon's own token. The share lasts, across daemon
restarts, until ws unshare or the workspace's end. Asked again, it prints the
same URL. --public makes the token the workspace's id and the port, which
anyone who can reach the listener can guess: only when you mean it.`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			port, err := portArg(argv[1])
			if err != nil {
				return err
			}
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				sh, err := ws.SharePort(cmd.Context(), port, public)
				if err != nil {
					return err
				}
				return a.emit(sh, func(w io.Writer) { fmt.Fprintln(w, shareWhere(sh)) })
			})
		},
	}
	cmd.Flags().BoolVar(&public, "public", false, "a token anyone can guess (the workspace's id and the port)")
	return cmd
}

// shareWhere is a share's URL, or its path when the daemon has no TCP
// listener.
func shareWhere(sh wire.PortShare) string {
	if sh.URL != "" {
		return sh.URL
	}
	return sh.Path + " (the daemon has no TCP listener: layerfsd serve --tcp ADDR --token-file FILE)"
}

func wsSharesCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "shares WS",
		Short: "List the shares of the workspace's ports",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				list, err := ws.PortShares(cmd.Context())
				if err != nil {
					return err
				}
				return a.emit(list, func(w io.Writer) {
					fmt.Fprintln(w, "PORT\tPUBLIC\tCREATED\tURL")
					for _, sh := range list {
						fmt.Fprintf(w, "%d\t%v\t%s\t%s\n", sh.Port, sh.Public, showTime(sh.Created), shareWhere(sh))
					}
				})
			})
		},
	}
}

func wsUnshareCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "unshare WS PORT",
		Short: "Revoke the share of the workspace's port: its URL reaches nothing from then on",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			port, err := portArg(argv[1])
			if err != nil {
				return err
			}
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				return ws.UnsharePort(cmd.Context(), port)
			})
		},
	}
}
