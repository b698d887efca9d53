package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"layerfs.dev/layerfs/client"
)

// DefaultMaxOutput is how much of each exec stream a result keeps.
const DefaultMaxOutput = 64 << 10

// Config configures a Server.
type Config struct {
	// Dial connects to layerfsd. Required.
	Dial func(ctx context.Context) (*client.Client, error)
	// Version is reported to clients in the initialize answer (default:
	// the module version of the build).
	Version string
	// MaxOutput bounds each exec stream in a result (DefaultMaxOutput when 0).
	MaxOutput int
	// Logger receives the server's own log; nil is silent.
	Logger *slog.Logger
	// Streams bounds what the HTTP transport keeps for resumptions.
	Streams StreamLimits
	// Now is the clock of the HTTP transport's event store (time.Now when
	// nil).
	Now func() time.Time
}

// Server is the MCP server over one daemon. It is safe for concurrent use
// by several sessions.
type Server struct {
	cfg Config
	mcp *mcp.Server
	log *slog.Logger

	mu sync.Mutex
	c  *client.Client // nil until the first call, and after a transport failure

	watches watchSet // open watches of the watch tool
}

// instructions is what a model reads about the server as a whole.
const instructions = `LayerFS gives you workspaces: copy-on-write directories over a project's history, where commands run in a fresh sandbox per exec (the workspace is the sandbox's /workspace).
A typical session: project_create (once) -> workspace_create -> write_file / exec / read_file -> commit -> workspace_end.
Commits go to the workspace's branch by compare-and-swap; when another agent committed first, commit merges your work with theirs and the workspace then holds both. update brings the branch's new commits into a workspace before you commit; on a conflict the files get <<<<<<< ======= >>>>>>> markers to edit away before committing.
fork makes a new branch from any ref in O(1) to try an alternative; fork_workspace opens copies of a workspace, uncommitted changes included; merge brings one branch into another.
A ref is "layer:N", a branch name, or a commit id (or a unique prefix).
Paths are relative to the workspace root and never leave it.`

// New builds the server with every tool and the file resources.
func New(cfg Config) (*Server, error) {
	if cfg.Dial == nil {
		return nil, errors.New("mcpserver: Config.Dial is required")
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.Version == "" {
		cfg.Version = "devel"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			cfg.Version = bi.Main.Version
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "layerfs", Title: "LayerFS workspaces", Version: cfg.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: log})
	if err := s.addTools(); err != nil {
		return nil, err
	}
	s.addResources()
	return s, nil
}

// MCP is the underlying SDK server (for in-process transports in tests).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// ServeStdio serves one session on stdin and stdout until the client
// closes it or ctx ends.
func (s *Server) ServeStdio(ctx context.Context) error {
	defer s.close()
	return s.mcp.Run(ctx, &mcp.StdioTransport{})
}

// client returns the daemon's client, dialing it when there is none.
func (s *Server) client(ctx context.Context) (*client.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		return s.c, nil
	}
	c, err := s.cfg.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot reach layerfsd: %w", err)
	}
	s.c = c
	return c, nil
}

// failed forgets c after an error that was not an answer of the API (the
// daemon died, exited idle, or the connection broke: daemon_lost), so the
// next call dials again (and starts a daemon if none runs).
func (s *Server) failed(c *client.Client, err error) {
	if err == nil || (client.Code(err) != "" && !client.IsDaemonLost(err)) || errors.Is(err, context.Canceled) || errors.As(err, new(*inputError)) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == c {
		s.log.Info("forgetting the daemon connection after a failure", "err", err)
		c.Close()
		s.c = nil
	}
}

func (s *Server) close() {
	s.closeWatches()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		s.c.Close()
		s.c = nil
	}
}

// inputError is a tool argument the server itself refuses (before any call
// to the daemon).
type inputError struct{ msg string }

func (e *inputError) Error() string { return "invalid_argument: " + e.msg }

func badInput(format string, args ...any) error {
	return &inputError{msg: fmt.Sprintf(format, args...)}
}
