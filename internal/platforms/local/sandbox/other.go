//go:build !linux

package sandbox

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
)

// Launcher starts sandboxes; on this operating system it cannot.
type Launcher struct {
	Exe       string
	Logger    *slog.Logger
	NoCgroups bool
}

// Run reports ErrUnsupported.
func (l *Launcher) Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	return platforms.ExecResult{}, ErrUnsupported
}

// Session runs execs as Run does.
type Session struct{ l *Launcher }

// NewSession returns a Session of the launcher.
func (l *Launcher) NewSession() *Session { return &Session{l: l} }

// Run reports ErrUnsupported.
func (s *Session) Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) (platforms.ExecResult, error) {
	return s.l.Run(ctx, cfg, stdout, stderr)
}

// Close does nothing: nothing was started.
func (s *Session) Close(ctx context.Context) error { return nil }

// Limits reports that nothing is enforced.
func (l *Launcher) Limits() (memory, pids bool) { return false, false }

// Settle returns at once: nothing was started.
func (l *Launcher) Settle(ctx context.Context) error { return nil }

// RemoveStale removes nothing: nothing was started.
func (l *Launcher) RemoveStale(olderThan time.Duration) ([]string, error) { return nil, nil }

// Leaks reports nothing: nothing was started.
func (l *Launcher) Leaks(ctx context.Context) ([]string, error) { return nil, nil }

// IsInit is false: there are no sandbox inits here.
func IsInit() bool { return false }

// InitMain returns false: there are no sandbox inits here.
func InitMain() bool { return false }

// NetNamespaces opens nothing: there are no sandboxes here.
func (s *Session) NetNamespaces() ([]*os.File, error) { return nil, nil }
