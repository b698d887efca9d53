package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/internal/mcpserver"
	"layerfs.dev/layerfs/internal/tokenfile"
)

func mcpCmd(a *app) *cobra.Command {
	var httpAddr, tokenFile string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve LayerFS to agents over the Model Context Protocol (stdio, or --http ADDR)",
		Long: `Serve LayerFS's tools (workspace_create, exec, read_file, write_file, list_dir,
stat, diff, commit, fork, log, checkout, workspace_end, ...) and workspace files as
resources to an MCP client. By default the session runs on stdin/stdout, as agents
start MCP servers; --http ADDR serves streamable HTTP instead, every request
carrying "Authorization: Bearer <token>" with the token in --token-file; its
streams resume after a dropped connection (GET with Last-Event-ID).
The daemon of the Store (or $LAYERFS_DAEMON) is started when none runs. See docs/mcp.md.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			srv, err := mcpserver.New(mcpserver.Config{Dial: a.daemon, Logger: log})
			if err != nil {
				return err
			}
			if httpAddr == "" {
				if tokenFile != "" {
					return usageError{errors.New("--token-file goes with --http")}
				}
				return srv.ServeStdio(cmd.Context())
			}
			return a.serveMCPHTTP(cmd.Context(), srv, httpAddr, tokenFile, log)
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP on this address (host:port) instead of stdio")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the bearer token HTTP clients must send (required with --http)")
	return cmd
}

func (a *app) serveMCPHTTP(ctx context.Context, srv *mcpserver.Server, addr, tokenFile string, log *slog.Logger) error {
	if tokenFile == "" {
		return usageError{errors.New("--http needs --token-file: the HTTP transport never runs without a token")}
	}
	token, warning, err := tokenfile.Read(tokenFile)
	if err != nil {
		return err
	}
	if warning != nil {
		log.Warn(warning.Error())
	}
	h, err := srv.Handler(token)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	fmt.Fprintf(a.stderr, "layerfs: MCP over streamable HTTP on http://%s/\n", l.Addr())
	served := make(chan error, 1)
	go func() { served <- hs.Serve(l) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}
