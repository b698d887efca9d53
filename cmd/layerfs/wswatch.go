package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

func wsWatchCmd(a *app) *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "watch WS",
		Short: "Print a workspace's changes as they happen, by any process (until it ends or Ctrl-C)",
		Long: `Print one line per change in the workspace (created, modified, removed,
renamed), made by any process on the host or in any sandbox, until the
workspace ends or the command is interrupted; --json prints the API's
FileEvent lines. "watching" on stderr says when changes are being followed.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				st, err := ws.Watch(cmd.Context(), prefix)
				if err != nil {
					return err
				}
				defer st.Close()
				fmt.Fprintf(a.stderr, "watching %s\n", ws.ID())
				enc := json.NewEncoder(a.stdout)
				for {
					ev, err := st.Next()
					switch {
					case errors.Is(err, io.EOF), err != nil && cmd.Context().Err() != nil:
						return nil
					case err != nil:
						return err
					}
					if a.json {
						if err := enc.Encode(ev); err != nil {
							return err
						}
					} else {
						fmt.Fprintln(a.stdout, showEvent(ev))
					}
					if ev.Kind == wire.EventEnded {
						return nil
					}
				}
			})
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "watch only this directory of the workspace")
	return cmd
}

func showEvent(ev wire.FileEvent) string {
	switch ev.Kind {
	case wire.EventDropped:
		return fmt.Sprintf("dropped\t%d changes (the reader was behind)", ev.Count)
	case wire.EventOverflow, wire.EventEnded:
		return ev.Kind
	case wire.EventService:
		if sv := ev.Service; sv != nil {
			return fmt.Sprintf("service\t%s\t%s\t%s", sv.Name, sv.State, showExit(*sv))
		}
		return ev.Kind
	case "renamed":
		return fmt.Sprintf("renamed\t%s <- %s\t%s", showPath(ev.Path), showPath(ev.OldPath), ev.Type)
	case "removed":
		return fmt.Sprintf("removed\t%s", showPath(ev.Path))
	case wire.EventNet:
		if n := ev.Net; n != nil {
			at := n.Address
			if n.Port != 0 {
				at = fmt.Sprintf("%s:%d", n.Address, n.Port)
			}
			return fmt.Sprintf("net %s\t%s %s %s\t%s", n.Verdict, n.Proto, n.Name, at, n.Reason)
		}
	}
	return fmt.Sprintf("%s\t%s\t%s\t%d", ev.Kind, showPath(ev.Path), ev.Type, ev.Size)
}
