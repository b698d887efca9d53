package kerneloverlay

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/fsids"
)

// MountIDMapped mounts kernel overlayfs at target over id-mapped clones of
// lower and of dir (whose upper/ and work/ are the upper and work
// directories: overlayfs wants both on one mount), passed to the kernel as
// descriptors (fsconfig FSCONFIG_SET_FD, Linux 6.13 and later).
//
// The overlay does its own work in the layers (the work directory's
// subdirectories, copy-ups, whiteouts) with the credentials of whoever
// created it, and through an id-mapped layer only the mapped host ids can
// create anything: the file system is created with file system uid and
// gid m.Root, keeping the daemon's capabilities.
func MountIDMapped(lower, dir, target string, m *IDMap) error {
	fail := func(what string, err error) error {
		return fmt.Errorf("mount overlay at %s over id-mapped layers: %s: %w", target, what, err)
	}
	lo, err := idmappedClone(lower, m)
	if err != nil {
		return fail("lower", err)
	}
	defer unix.Close(lo)
	ws, err := idmappedClone(dir, m)
	if err != nil {
		return fail("workspace directory", err)
	}
	defer unix.Close(ws)
	layers := map[string]int{"lowerdir+": lo}
	for key, name := range map[string]string{"upperdir": "upper", "workdir": "work"} {
		fd, err := unix.Openat(ws, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(name, err)
		}
		defer unix.Close(fd)
		layers[key] = fd
	}
	var mnt int
	err = fsids.Do(m.Root, func() error {
		fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
		if err != nil {
			return fmt.Errorf("fsopen: %w", err)
		}
		defer unix.Close(fsfd)
		// The lower first: fsconfig takes lower layers in order.
		for _, key := range []string{"lowerdir+", "upperdir", "workdir"} {
			if err := unix.FsconfigSetFd(fsfd, key, layers[key]); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
		for opt := range strings.SplitSeq(Options, ",") {
			k, v, _ := strings.Cut(opt, "=")
			if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
				return fmt.Errorf("%s: %w", opt, err)
			}
		}
		if err := unix.FsconfigCreate(fsfd); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		mnt, err = unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return fail("make the file system", err)
	}
	defer unix.Close(mnt)
	if err := unix.MoveMount(mnt, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fail("attach", err)
	}
	return nil
}

// idmappedClone clones the mount at path (open_tree OPEN_TREE_CLONE, a
// detached bind mount of path alone, without the mounts below it) and
// id-maps it with m's user namespace.
func idmappedClone(path string, m *IDMap) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("clone %s: %w", path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(m.UserNS.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("id-map %s: %w", path, err)
	}
	return fd, nil
}
