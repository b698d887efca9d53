package fusefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/mountinfo"
)

// fusectlDir is where the fuse control file system is mounted: one
// directory per FUSE connection, named by the mount's device minor, whose
// "abort" file ends the connection.
const fusectlDir = "/sys/fs/fuse/connections"

// CleanStale detaches every mount at dir, so that dir can be mounted
// again: what a crashed daemon left, served by nobody or by a server that
// hangs. It never sends a request to those mounts, since a request to a
// FUSE mount whose device is still held somewhere waits forever: it finds
// them in /proc/self/mountinfo, aborts each FUSE connection through the
// fuse control file system (mounting it when absent), after which every
// request to it fails at once with ENOTCONN, and then detaches the mount
// (MNT_DETACH), which also unblocks whoever still waits on it. The caller
// must own dir: a live server's mount there is cut off as well.
func CleanStale(dir string) error {
	dir = filepath.Clean(dir)
	if !mountRoot(dir) {
		return nil
	}
	for range 16 { // mounts may be stacked at dir
		ms, err := mountinfo.Read(mountinfo.Self)
		if err != nil {
			return fmt.Errorf("clean %s: %w", dir, err)
		}
		top, ok := topMountAt(ms, dir)
		if !ok {
			return nil
		}
		var abortErr error
		if strings.HasPrefix(top.FSType, "fuse") {
			abortErr = abortConnection(ms, top.Device)
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("clean %s: %w: %w", dir, ErrStale, errors.Join(err, abortErr))
		}
	}
	return fmt.Errorf("clean %s: %w: mounts keep appearing", dir, ErrStale)
}

// mountRoot reports whether something may be mounted at dir: false only
// when dir exists and statx says it is not the root of a mount, which
// spares reading the whole mount table (a read of /proc/self/mountinfo
// costs in proportion to every mount of the host). The flag comes from the
// VFS, and AT_STATX_DONT_SYNC with an empty mask keeps a FUSE file system
// mounted there from being asked anything: it answers from its cache.
func mountRoot(dir string) bool {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_DONT_SYNC, 0, &st)
	if err != nil || st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return true // cannot tell: look in the mount table
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// topMountAt returns the last mount listed at exactly dir: the one a path
// lookup reaches.
func topMountAt(ms []mountinfo.Mount, dir string) (mountinfo.Mount, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Dir == dir {
			return ms[i], true
		}
	}
	return mountinfo.Mount{}, false
}

// abortConnection aborts the FUSE connection of the file system on device
// ("0:N"). A connection whose server is gone and whose device nobody holds
// is aborted already; its control directory is then gone too.
func abortConnection(ms []mountinfo.Mount, device string) error {
	major, minor, ok := strings.Cut(device, ":")
	if !ok || major != "0" {
		return fmt.Errorf("fuse device %q: not an anonymous device", device)
	}
	if err := mountFusectl(ms); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(fusectlDir, minor, "abort"), os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("abort fuse connection %s: %w", minor, err)
	}
	_, err = f.WriteString("1")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("abort fuse connection %s: %w", minor, err)
	}
	return nil
}

// mountFusectl mounts the fuse control file system unless it is mounted.
func mountFusectl(ms []mountinfo.Mount) error {
	for _, m := range ms {
		if m.FSType == "fusectl" && m.Dir == fusectlDir {
			return nil
		}
	}
	if err := unix.Mount("fusectl", fusectlDir, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("mount the fuse control file system at %s: %w", fusectlDir, err)
	}
	return nil
}

// AbortHeldBy aborts every FUSE connection whose device process pid holds
// open, and returns how many it aborted. It is for a daemon that was killed
// while one of its threads waited on a request to its own mount: that
// thread waits, uninterruptibly, for an answer the dead server cannot give,
// so the process never finishes dying and never releases the device (nor
// its Store lock) until the connection is aborted from outside. The
// connections are read from the fdinfo of the process's remaining threads.
func AbortHeldBy(pid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	conns := map[string]bool{}
	for _, task := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/fdinfo", pid, task.Name())
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // a thread that is gone, or the exited leader's
		}
		for _, fd := range fds {
			b, err := os.ReadFile(filepath.Join(dir, fd.Name()))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "fuse_connection:"); ok {
					conns[strings.TrimSpace(v)] = true
				}
			}
		}
	}
	if len(conns) == 0 {
		return 0, nil
	}
	ms, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return 0, err
	}
	var errs []error
	for c := range conns {
		errs = append(errs, abortConnection(ms, "0:"+c))
	}
	return len(conns), errors.Join(errs...)
}

// AbortSource aborts the FUSE connection of every mount whose source (in
// /proc/self/mountinfo) is source, and returns how many it aborted. Like
// AbortHeldBy it is for a daemon stuck dying, and is the one that works
// once the dying process's descriptor table is gone (a thread closing its
// files at exit flushes a file on its own mount, and waits for itself).
func AbortSource(source string) (int, error) {
	ms, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, m := range ms {
		if m.Source == source && strings.HasPrefix(m.FSType, "fuse") {
			errs = append(errs, abortConnection(ms, m.Device))
			n++
		}
	}
	return n, errors.Join(errs...)
}
