package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/mountinfo"
)

// pivot makes the directory NEWROOT (a mount point) the root of the mount
// namespace it runs in, first moving the mounts MOUNT... (those that are
// mount points) to the same paths below it:
//
//	layerfs-supervise pivot NEWROOT MOUNT...
//
// The host runs it in a container's mount namespace (nsenter, as the
// host's root, so no capability of the container is needed) to make a
// workspace's own root, bound at NEWROOT, the container's root, with the
// container's /proc, /dev, /sys, /tmp, /workspace and the files Docker
// binds moved into it: the container's root image then only holds the
// root's shape until the pivot. Every process of the container whose root
// was the old one (its idle PID 1) moves with it, and the old root is
// detached. Each MOUNT must exist below NEWROOT.
func pivot(args []string) int {
	if len(args) < 1 || !filepath.IsAbs(args[0]) {
		fmt.Fprintf(os.Stderr, "usage: %s pivot NEWROOT MOUNT...\n", Name)
		return 2
	}
	if err := pivotTo(args[0], args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "%s: pivot to %s: %v\n", Name, args[0], err)
		return 1
	}
	return 0
}

func pivotTo(newRoot string, moves []string) error {
	// A mount cannot be moved from under a shared parent, and
	// pivot_root refuses shared mounts: nothing of this namespace
	// propagates anywhere from now on.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	points, err := mountPoints()
	if err != nil {
		return err
	}
	for _, m := range moves {
		m = filepath.Clean(m)
		if !filepath.IsAbs(m) || !points[m] {
			continue
		}
		if err := noSymlink(newRoot, m); err != nil {
			return err
		}
		if err := unix.Mount(m, filepath.Join(newRoot, m), "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s: %w", m, err)
		}
	}
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	// pivot_root(".", "."): the old root is stacked under the new one,
	// then detached from it.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	return unix.Chdir("/")
}

// noSymlink checks that no component of the absolute path p below root
// is a symlink: the root is what earlier execs left, and a mount is
// moved to a place of its own, not where they point it.
func noSymlink(root, p string) error {
	at := root
	for _, c := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		at = filepath.Join(at, c)
		fi, err := os.Lstat(at)
		if err != nil {
			return fmt.Errorf("mount point %s: %w", p, err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("mount point %s: %s is a symlink", p, at)
		}
	}
	return nil
}

// mountPoints are the mount points of this namespace.
func mountPoints() (map[string]bool, error) {
	ms, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ms))
	for _, m := range ms {
		out[m.Dir] = true
	}
	return out, nil
}
