package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms/internal/userns"
)

// userNSArg0 is the argv[0] of the process the launcher starts once to make
// the user namespace that id-maps every workspace (see holdUserNS).
const userNSArg0 = "layerfs-sandbox-userns"

// userNSEnv carries Launcher.UserNamespace to every init, "host:size", in
// its environment (a warm init needs it before its config, for the owner
// of /tmp); userNSFD is the launcher's namespace of that mapping.
const (
	userNSEnv = "LAYERFS_SANDBOX_USERNS"
	userNSFD  = 5
)

// holdUserNS makes the user namespace that id-maps every workspace:
// exe (the init binary) is started in one with mapping r, where InitMain
// only waits for its stdin to close (userns.Hold).
func holdUserNS(exe string, r IDRange) (*os.File, error) {
	return userns.Hold(exe, []string{userNSArg0}, r)
}

// userNSFromEnv is the mapping the launcher put in userNSEnv, if any.
func userNSFromEnv() (IDRange, bool) {
	r, err := userns.ParseArg(os.Getenv(userNSEnv))
	return r, err == nil
}

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

// userNSAttr puts the command forked with attr into a new user namespace
// with mapping r. Supplementary groups may be set inside (the map is written
// by the privileged init, so "deny" would protect nothing) and are: the
// command gets none.
func userNSAttr(attr *syscall.SysProcAttr, r IDRange) {
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.UidMappings, attr.GidMappings = r.Mapping(), r.Mapping()
	attr.GidMappingsEnableSetgroups = true
}

// seccompNotif and seccompNotifResp are struct seccomp_notif and
// seccomp_notif_resp of linux/seccomp.h.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  [64]byte // struct seccomp_data
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// answerNewUser serves the filter's listener (the clone program returns
// SECCOMP_RET_USER_NOTIF for a clone whose only namespace flag is
// CLONE_NEWUSER): the first such clone of thread forkTid, the init's own
// fork of the command, continues; every other, which can only come from the
// command and its children, fails with EPERM, as the rest of the filter's
// refusals. It returns when the listener fails (the init is exiting). It
// closes ready once it runs on a thread of its own.
func answerNewUser(listener int, forkTid int, ready chan<- struct{}) {
	runtime.LockOSThread() // never unlocked: the thread ends with the init
	close(ready)
	granted := false
	for {
		var req seccompNotif
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req)))
		switch errno {
		case 0:
		case unix.EINTR, unix.ENOENT: // interrupted; the caller died meanwhile
			continue
		default:
			return
		}
		resp := seccompNotifResp{ID: req.ID, Error: -int32(unix.EPERM)}
		if !granted && int(req.Pid) == forkTid {
			granted = true
			resp.Error, resp.Flags = 0, unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
		}
		_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
	}
}
