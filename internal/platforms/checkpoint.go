package platforms

import (
	"context"
	"io"
	"time"
)

// Checkpointer is implemented by ServiceHosts whose sandbox, with every
// process its services run, can be checkpointed into a directory of
// images and restored from one into another workspace's sandbox.
type Checkpointer interface {
	// Checkpoint freezes the sandbox's processes, dumps them into
	// spec.Dir and, unless spec.Stop, lets them run on. What cannot be
	// checkpointed is refused (errclass Invalid, naming the process and
	// the resource) before anything is frozen; a sandbox that runs no
	// service is refused too.
	Checkpoint(ctx context.Context, spec CheckpointSpec) (CheckpointStats, error)
	// RestoreServices restores the checkpoint in dir as this sandbox's
	// services, which must run none, and returns them running; output
	// gives each one's writers by its pid (nil discards). A restore that
	// fails leaves nothing running and nothing mounted.
	RestoreServices(ctx context.Context, dir, workDir string, output func(pid int) (stdout, stderr io.Writer)) ([]Service, time.Duration, error)
}

// CheckpointSpec is one checkpoint's.
type CheckpointSpec struct {
	Dir, WorkDir string
	Stop         bool
	// Frozen runs while every process is frozen and the images are
	// complete: what must be captured at the same instant (the files).
	// Its error fails the checkpoint, and the processes run on.
	Frozen func(ctx context.Context) error
}

// CheckpointStats are what a checkpoint cost: how long the processes
// were frozen, the whole dump, and the images' bytes.
type CheckpointStats struct {
	Frozen, Total time.Duration
	Bytes         int64
}
