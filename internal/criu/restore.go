package criu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"layerfs.dev/layerfs/wire/errclass"
)

// Inherit is a descriptor a restored tree takes in place of one it held:
// Resource names what it held as criu's --inherit-fd does ("pipe:[INO]",
// "socket:[INO]", with the inode the dump saw).
type Inherit struct {
	File     *os.File
	Resource string
}

// Restore is one restore of a dump.
type Restore struct {
	// Dir holds the images; WorkDir gets criu's log and pid file.
	Dir, WorkDir string
	// Root is the directory the restored mount namespace's root is a
	// bind of (criu needs one when the dump holds a mount namespace; ""
	// when it does not).
	Root string
	// Mounts maps each external mount's key (ExternalMount.Key) to the
	// path bound in its place.
	Mounts map[string]string
	// Inherit are the descriptors the tree inherits, in order.
	Inherit []Inherit
}

// Argv is criu's command line for the restore, binary first, with the
// inherited descriptors at firstFD, firstFD+1, ... in Inherit's order.
func (r *Restore) Argv(firstFD int) ([]string, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	args := []string{bin, "restore", "--work-dir", r.WorkDir, "--log-file", r.logPath(), "-v2",
		"-D", r.Dir,
		// Detached, as a child of whoever started criu, which waits for it.
		"--restore-detached", "--restore-sibling", "--pidfile", r.pidPath(),
		"--tcp-established", "--manage-cgroups=ignore",
	}
	if r.Root != "" {
		args = append(args, "--root", r.Root)
	}
	keys := make([]string, 0, len(r.Mounts))
	for k := range r.Mounts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "--external", "mnt["+k+"]:"+r.Mounts[k])
	}
	for i, in := range r.Inherit {
		args = append(args, "--inherit-fd", "fd["+strconv.Itoa(firstFD+i)+"]:"+in.Resource)
	}
	return args, nil
}

func (r *Restore) logPath() string { return filepath.Join(r.WorkDir, "restore.log") }
func (r *Restore) pidPath() string { return filepath.Join(r.WorkDir, "restored.pid") }

// Pid is the restored root's pid, once criu succeeded.
func (r *Restore) Pid() (int, error) {
	b, err := os.ReadFile(r.pidPath())
	if err != nil {
		return 0, fmt.Errorf("%w: restored pid: %w", errclass.Internal, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%w: restored pid: %w", errclass.Internal, err)
	}
	return pid, nil
}

// Took is how long criu said forking and restoring the tree took.
func (r *Restore) Took() time.Duration { return restoreStats(r.WorkDir) }

// Failed is err, how criu's run ended, with its log's errors.
func (r *Restore) Failed(ctx context.Context, err error) error {
	f := &Failure{Op: "restore", Errors: logErrors(r.logPath()), Log: r.logPath(), Exit: err}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: criu restore: %w", errclass.Unavailable, ctx.Err())
	}
	return fmt.Errorf("%w: %w", errclass.Internal, f)
}

// Run runs the restore in this process's mount namespace (its Root and
// mount sources as they are) and returns the restored root's pid: a child
// of this process.
func (r *Restore) Run(ctx context.Context) (int, error) {
	argv, err := r.Argv(3)
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	for _, in := range r.Inherit {
		cmd.ExtraFiles = append(cmd.ExtraFiles, in.File)
	}
	// Started from a goroutine of its own: the restored root is the
	// child of the thread that forked criu, and its parent-death signal
	// fires if that thread ends (the runtime ends a thread only when a
	// goroutine locked to it returns).
	errc := make(chan error, 1)
	go func() { errc <- cmd.Run() }()
	if err := <-errc; err != nil {
		return 0, r.Failed(ctx, err)
	}
	return r.Pid()
}
