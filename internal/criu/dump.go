package criu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/wire/errclass"
)

// ExternalMount is a mount of the dumped tree that the images do not
// hold: its mount point (as the tree sees it) and the key a restore maps
// to its source.
type ExternalMount struct {
	Mountpoint string
	Key        string
}

// Dump is one dump of a process tree.
type Dump struct {
	// Pid is the tree's root, in this process's PID namespace.
	Pid int
	// Dir receives the images; WorkDir criu's log and the hook's FIFOs.
	Dir, WorkDir string
	// LeaveRunning lets the tree run on after the dump; else it is
	// killed once dumped.
	LeaveRunning bool
	// Mounts are external (see ExternalMount).
	Mounts []ExternalMount
	// ExternalUnix are the inodes of unix sockets of the tree whose peer
	// is outside it: the restore gives them back with Inherit.
	ExternalUnix []uint64
	// GhostLimit is the largest deleted file the images may hold (the
	// executable of a restored process is one); 0: criu's default.
	GhostLimit int64
	// Frozen, when not nil, runs while the tree is frozen and dumped; its
	// error fails the dump (the tree runs on).
	Frozen func(ctx context.Context) error
}

// DumpStats are what criu says the dump cost.
type DumpStats struct {
	// Frozen is how long the tree was frozen (criu's frozen_time, which
	// includes Frozen's run); Total is the whole run of criu.
	Frozen, Total time.Duration
	// Pages are the memory pages written, Bytes the images' size.
	Pages int64
	Bytes int64
}

// Run dumps the tree.
func (d *Dump) Run(ctx context.Context) (DumpStats, error) {
	args := []string{"-t", strconv.Itoa(d.Pid), "-D", d.Dir,
		// Established TCP connections are dumped with their state: those
		// inside the sandbox go on after a restore; one whose peer is
		// outside is reset by the restored side's first packet.
		"--tcp-established",
		// The tree's cgroup is the caller's to make: a restore joins the
		// one it is started in.
		"--manage-cgroups=ignore",
	}
	if d.LeaveRunning {
		args = append(args, "--leave-running")
	}
	for _, m := range d.Mounts {
		args = append(args, "--external", "mnt["+m.Mountpoint+"]:"+m.Key)
	}
	for _, ino := range d.ExternalUnix {
		args = append(args, "--external", "unix["+strconv.FormatUint(ino, 10)+"]")
	}
	if d.GhostLimit > 0 {
		args = append(args, "--ghost-limit", strconv.FormatInt(d.GhostLimit, 10))
	}
	var h *hook
	if d.Frozen != nil {
		var err error
		if h, err = newHook(d.WorkDir); err != nil {
			return DumpStats{}, err
		}
		defer h.close()
		args = append(args, "--action-script", h.script)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, "dump", ErrUnsupported, d.WorkDir, args, func(c *exec.Cmd) {
			if h != nil {
				c.Env = append(os.Environ(), hookEnv+"="+h.dir)
			}
		})
	}()
	var err error
	if h != nil {
		err = h.serve(ctx, d.Frozen, done)
	} else {
		err = <-done
	}
	if err != nil {
		return DumpStats{}, err
	}
	st := DumpStats{Total: time.Since(start)}
	st.Frozen, st.Pages = dumpStats(d.WorkDir, d.Dir)
	st.Bytes, _ = dirSize(d.Dir)
	return st, nil
}

// hookEnv names the hook's directory in criu's environment, which its
// action scripts inherit.
const hookEnv = "LAYERFS_CRIU_HOOK"

// hookScript is criu's action script: at post-dump (the tree frozen, the
// images complete) it says so on one FIFO and waits for the word on the
// other; anything but "ok" fails the dump, and the tree runs on.
const hookScript = `#!/bin/sh
[ "$CRTOOLS_SCRIPT_ACTION" = post-dump ] || exit 0
echo frozen >"$` + hookEnv + `/frozen" || exit 1
read answer <"$` + hookEnv + `/resume" || exit 1
[ "$answer" = ok ]
`

// hook is the daemon's end of the action script: both FIFOs open for
// reading and writing, so that neither side's open blocks and a read ends
// when the daemon closes them.
type hook struct {
	dir, script    string
	frozen, resume *os.File
}

func newHook(workDir string) (*hook, error) {
	dir, err := os.MkdirTemp(workDir, "hook-")
	if err != nil {
		return nil, fmt.Errorf("%w: checkpoint hook: %w", errclass.Internal, err)
	}
	h := &hook{dir: dir, script: filepath.Join(dir, "post-dump")}
	err = os.WriteFile(h.script, []byte(hookScript), 0o700)
	for _, n := range []string{"frozen", "resume"} {
		if err == nil {
			err = unix.Mkfifo(filepath.Join(dir, n), 0o600)
		}
	}
	if err == nil {
		h.frozen, err = os.OpenFile(filepath.Join(dir, "frozen"), os.O_RDWR, 0)
	}
	if err == nil {
		h.resume, err = os.OpenFile(filepath.Join(dir, "resume"), os.O_RDWR, 0)
	}
	if err != nil {
		h.close()
		return nil, fmt.Errorf("%w: checkpoint hook: %w", errclass.Internal, err)
	}
	return h, nil
}

func (h *hook) close() {
	for _, f := range []*os.File{h.frozen, h.resume} {
		if f != nil {
			f.Close()
		}
	}
	os.RemoveAll(h.dir)
}

// serve waits for the frozen tree, runs frozen and answers, and returns
// criu's result (done).
func (h *hook) serve(ctx context.Context, frozen func(context.Context) error, done <-chan error) error {
	said := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(h.frozen).ReadString('\n')
		said <- err
	}()
	select {
	case err := <-done: // criu ended before the tree was dumped
		h.close()
		return err
	case err := <-said:
		if err != nil {
			return errors.Join(fmt.Errorf("%w: checkpoint hook: %w", errclass.Internal, err), <-done)
		}
	}
	ferr := frozen(ctx)
	answer := "ok\n"
	if ferr != nil {
		answer = "fail\n"
	}
	if _, err := h.resume.WriteString(answer); err != nil && ferr == nil {
		ferr = fmt.Errorf("%w: checkpoint hook: %w", errclass.Internal, err)
	}
	err := <-done
	if ferr != nil {
		return ferr // criu's error is only that the hook said no
	}
	return err
}

// dirSize is the bytes of the regular files in dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}
