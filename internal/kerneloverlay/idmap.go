package kerneloverlay

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/fsids"
)

// MountIDMapped mounts kernel overlayfs at target over id-mapped clones
// of lower and of dir (whose upper/ and work/ are the upper and work
// directories), as a workspace without a metadata layer is mounted.
func MountIDMapped(lower, dir, target string, m *IDMap) error {
	return mountOverlay(lower, dir, target, -1, "", m, false, false)
}

// mountOverlay mounts kernel overlayfs at target over the FUSE view at
// lower and dir's upper/ and work/ directories (overlayfs wants both on one
// mount), passed to the kernel as descriptors (fsconfig FSCONFIG_SET_FD,
// Linux 6.13 and later). With a metadata layer (meta, a mount's
// descriptor, >= 0), meta is the lower layer, and the data-only layers
// below it are the Store's cache directory cache (if not "") and then the
// view (see content.go); else the view is the lower.
//
// With m, the layers are id-mapped clones (see IDMap). The overlay does its
// own work in the layers (the work directory's subdirectories, copy-ups,
// whiteouts) with the credentials of whoever created it, and through an
// id-mapped layer only the mapped host ids can create anything: the file
// system is then created with file system uid and gid m.Root, keeping the
// daemon's capabilities. With volatile, the overlay never syncs its upper
// (see volatile.go).
func mountOverlay(lower, dir, target string, meta int, cache string, m *IDMap, volatile, verity bool) error {
	lf, err := openLowers(lower, meta, cache, m)
	if err != nil {
		return fmt.Errorf("mount overlay at %s: %w", target, err)
	}
	defer lf.close()
	return createOverlay(target, lf, dir, m, volatile, verity)
}

// lowers are an overlay's lower layers as descriptors, in fsconfig's
// order, each with its key: the metadata image's mount (id-mapped with
// the overlay's mapping), the Store's cache and the view as data-only
// layers; or the view alone as the lower. One set may serve any number
// of overlays (overlayfs takes its own private clone of each layer).
type lowers struct {
	layers []layerFd
	owned  []int // descriptors close closes (not a caller's meta)
}

type layerFd struct {
	key string
	fd  int
}

func (l lowers) close() {
	for _, fd := range l.owned {
		unix.Close(fd)
	}
}

// openLowers opens (with m, as id-mapped clones) the lower layers of an
// overlay: see mountOverlay. meta stays the caller's.
func openLowers(lower string, meta int, cache string, m *IDMap) (lowers, error) {
	var l lowers
	lo, err := layer(lower, m)
	if err != nil {
		return l, fmt.Errorf("lower: %w", err)
	}
	l.owned = append(l.owned, lo)
	if meta < 0 {
		l.layers = append(l.layers, layerFd{"lowerdir+", lo})
		return l, nil
	}
	if m != nil {
		// A mount fsmount made, never attached, may take an id-mapping.
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(m.UserNS.Fd())}
		if err := unix.MountSetattr(meta, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			l.close()
			return lowers{}, fmt.Errorf("id-map the metadata layer: %w", err)
		}
	}
	l.layers = append(l.layers, layerFd{"lowerdir+", meta})
	if cache != "" {
		c, err := layer(cache, m)
		if err != nil {
			l.close()
			return lowers{}, fmt.Errorf("the Store's cache: %w", err)
		}
		l.owned = append(l.owned, c)
		l.layers = append(l.layers, layerFd{"datadir+", c})
	}
	l.layers = append(l.layers, layerFd{"datadir+", lo})
	return l, nil
}

// createOverlay mounts kernel overlayfs at target over the lower layers
// lf with dir's upper/ and work/ as its upper and work directories, with
// verity=on when verity.
func createOverlay(target string, lf lowers, dir string, m *IDMap, volatile, verity bool) error {
	fail := func(what string, err error) error {
		return fmt.Errorf("mount overlay at %s: %s: %w", target, what, err)
	}
	ws, err := layer(dir, m)
	if err != nil {
		return fail("workspace directory", err)
	}
	defer unix.Close(ws)
	layers := append([]layerFd(nil), lf.layers...)
	for _, name := range []string{"upper", "work"} {
		fd, err := unix.Openat(ws, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(name, err)
		}
		defer unix.Close(fd)
		layers = append(layers, layerFd{name + "dir", fd})
	}
	create := func() (int, error) {
		fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
		if err != nil {
			return -1, fmt.Errorf("fsopen: %w", err)
		}
		defer unix.Close(fsfd)
		for _, l := range layers {
			if err := unix.FsconfigSetFd(fsfd, l.key, l.fd); err != nil {
				return -1, fmt.Errorf("%s: %w", l.key, err)
			}
		}
		for opt := range strings.SplitSeq(Options, ",") {
			k, v, _ := strings.Cut(opt, "=")
			if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
				return -1, fmt.Errorf("%s: %w", opt, err)
			}
		}
		if volatile {
			if err := unix.FsconfigSetFlag(fsfd, "volatile"); err != nil {
				return -1, fmt.Errorf("volatile: %w", err)
			}
		}
		if verity {
			if err := unix.FsconfigSetString(fsfd, "verity", "on"); err != nil {
				return -1, fmt.Errorf("verity=on: %w", err)
			}
		}
		if err := unix.FsconfigCreate(fsfd); err != nil {
			return -1, fmt.Errorf("create: %w", err)
		}
		return unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	}
	var mnt int
	if m != nil {
		err = fsids.Do(m.Root, func() (err error) { mnt, err = create(); return err })
	} else {
		mnt, err = create()
	}
	if err != nil {
		return fail("make the file system", err)
	}
	defer unix.Close(mnt)
	if err := unix.MoveMount(mnt, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fail("attach", err)
	}
	return nil
}

// layer opens the directory at path as a layer: an id-mapped clone of its
// mount with m, else an O_PATH descriptor of it.
func layer(path string, m *IDMap) (int, error) {
	if m != nil {
		return IDMappedClone(path, m)
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	return fd, nil
}

// IDMappedClone clones the mount at path (open_tree OPEN_TREE_CLONE, a
// detached bind mount of path alone, without the mounts below it) and
// id-maps it with m's user namespace: the mount as m's sandboxes see it,
// as a descriptor; it lasts until the descriptor is closed.
func IDMappedClone(path string, m *IDMap) (int, error) {
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

// HoldIDMap makes a user namespace whose ids 0 to size-1 are host ids
// host.. (a sandbox's mapping, for tests and benches that have no
// platform to ask), held by a process of its own; release kills it and
// closes the namespace.
func HoldIDMap(host, size uint32) (m *IDMap, release func(), err error) {
	cmd := exec.Command("sleep", "infinity")
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(host), Size: int(size)}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: ids, GidMappings: ids, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("user namespace: %w", err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, fmt.Errorf("user namespace: %w", err)
	}
	return &IDMap{UserNS: ns, Root: host, Size: size}, func() {
		ns.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}, nil
}
