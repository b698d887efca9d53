package local

import (
	"context"
	"fmt"
	"io"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
)

var _ platforms.Checkpointer = (*Sandbox)(nil)

// Checkpoint checkpoints the workspace's resident sandbox
// (sandbox.Session.Checkpoint).
func (s *Sandbox) Checkpoint(ctx context.Context, spec platforms.CheckpointSpec) (platforms.CheckpointStats, error) {
	if err := s.enter(); err != nil {
		return platforms.CheckpointStats{}, fmt.Errorf("local: checkpoint %s: %w", s.w.ID, err)
	}
	defer s.running.Done()
	st, err := s.session.Checkpoint(ctx, sandbox.CheckpointOptions{Dir: spec.Dir, WorkDir: spec.WorkDir, Stop: spec.Stop, Frozen: spec.Frozen})
	if err != nil {
		return platforms.CheckpointStats{}, fmt.Errorf("local: checkpoint %s: %w", s.w.ID, err)
	}
	return platforms.CheckpointStats{Frozen: st.Frozen, Total: st.Total, Bytes: st.Bytes}, nil
}

// RestoreServices restores a checkpoint as the workspace's resident
// sandbox (sandbox.Session.Restore), with this workspace at /workspace.
func (s *Sandbox) RestoreServices(ctx context.Context, dir, workDir string, output func(pid int) (io.Writer, io.Writer)) ([]platforms.Service, time.Duration, error) {
	if err := s.enter(); err != nil {
		return nil, 0, fmt.Errorf("local: restore in %s: %w", s.w.ID, err)
	}
	defer s.running.Done()
	svcs, st, err := s.session.Restore(ctx, sandbox.Config{
		Workspace: s.w.HostPath, RootDir: s.w.RootDir, RootWritable: s.w.RootWritable, Network: s.w.Network, IDMapped: s.w.IDMapped,
	}, sandbox.RestoreOptions{Dir: dir, WorkDir: workDir, Output: output})
	if err != nil {
		return nil, 0, fmt.Errorf("local: restore in %s: %w", s.w.ID, err)
	}
	out := make([]platforms.Service, len(svcs))
	for i, sv := range svcs {
		out[i] = sv
	}
	return out, st.Total, nil
}

// enter counts a call in, unless the sandbox is closed.
func (s *Sandbox) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return platforms.ErrClosed
	}
	s.running.Add(1)
	return nil
}
