package sandbox

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms/internal/userns"
)

// userNSEnv tells an init that the spawner started it in the launcher's
// user namespace, and with which mapping ("host:size").
const userNSEnv = "LAYERFS_SANDBOX_USERNS"

// cloneWorkspace clones the workspace for /workspace: nosuid, nodev,
// writable, and id-mapped with the user namespace ns when that is >= 0,
// so that ids inside the command's namespace are the ids on disk (its root
// creates files owned by 0, files owned by 1000 are 1000 inside). A file
// system that cannot be id-mapped gets errNoIDMap (wrapped) and no clone.
func cloneWorkspace(workspace string, ns int) (int, error) {
	if ns >= 0 {
		// Kernel overlayfs never can (its layers can: Config.IDMapped):
		// say so before cloning, not after a refused mount_setattr.
		var st unix.Statfs_t
		if err := unix.Statfs(workspace, &st); err == nil && st.Type == unix.OVERLAYFS_SUPER_MAGIC {
			return -1, fmt.Errorf("%w (%s)", errNoIDMap, fsName(st.Type))
		}
	}
	fd, err := cloneTree(unix.AT_FDCWD, workspace, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, unix.MOUNT_ATTR_RDONLY)
	if err != nil || ns < 0 {
		return fd, err
	}
	if err := userns.IDMap(fd, ns); err != nil {
		unix.Close(fd)
		var st unix.Statfs_t
		_ = unix.Statfs(workspace, &st)
		return -1, fmt.Errorf("%w (%s): %w", errNoIDMap, fsName(st.Type), err)
	}
	return fd, nil
}

// fsName names the file systems a workspace is usually on, for messages.
func fsName(magic int64) string {
	switch magic {
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "kernel overlayfs over layers that are not id-mapped"
	case unix.FUSE_SUPER_MAGIC:
		return "a FUSE server that does not allow id-mapped mounts"
	}
	return fmt.Sprintf("file system 0x%x", magic)
}

// errNoIDMap: the workspace's file system cannot be id-mapped, so the
// command runs in the host's user namespace (and the result says so).
var errNoIDMap = errors.New("the workspace cannot be id-mapped")
