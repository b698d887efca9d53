package kerneloverlay

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Volatile overlays.
//
// A workspace whose durability is "commit" is mounted with overlayfs's
// volatile option (Config.Volatile): overlayfs then never syncs its upper,
// neither when it copies a committed file up before the file's first write
// (the sync would be most of a large file's copy-up, where a native
// overwrite only dirties the page cache) nor
// on fsync(2) or syncfs(2) in the workspace. A commit's data is synced by
// the Store; a crash of the daemon loses nothing, since the page cache
// outlives it; a crash of the host can lose or garble what was written
// since the last commit.
//
// overlayfs marks its work directory at a volatile mount and refuses to
// mount it again while the mark is there. The mark is cleared where it can
// only mean that a daemon stopped: at a mount in the boot the mark was made
// in (the page cache still holds every write), and by Settle after a clean
// unmount, which syncs the upper first. A mark from another boot means the
// host stopped with the workspace mounted: the workspace is mounted anyway,
// and its DataPath says that its changes since the last commit may be
// incomplete.

// volatileMark is where overlayfs marks the work directory of the
// workspace directory dir at a volatile mount.
func volatileMark(dir string) string {
	return filepath.Join(workDir(dir), "work", "incompat", "volatile")
}

// MountBootXattr, on a workspace's work directory, holds the boot ID of
// its last volatile mount: an xattr of a directory that is there anyway,
// so that a workspace's first mount creates no file for it.
const MountBootXattr = "trusted.layerfs.mount_boot_id"

// bootID is this boot's ID.
var bootID = sync.OnceValues(func() ([]byte, error) {
	return os.ReadFile("/proc/sys/kernel/random/boot_id")
})

// clearVolatile removes a volatile mount's mark from dir's work directory,
// reporting whether the mark was made in an earlier boot; with volatile it
// records this boot for the mount about to be made.
func clearVolatile(dir string, volatile bool) (hostStopped bool, err error) {
	boot, err := bootID()
	if err != nil {
		return false, err
	}
	mark := volatileMark(dir)
	if _, err := os.Lstat(mark); err == nil {
		had := make([]byte, 64)
		n, err := unix.Getxattr(workDir(dir), MountBootXattr, had)
		hostStopped = err != nil || string(had[:n]) != string(boot)
		if err := os.RemoveAll(mark); err != nil {
			return false, fmt.Errorf("clear the volatile mark: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if volatile {
		// Not synced: one lost with the host reads as another boot's.
		if err := unix.Setxattr(workDir(dir), MountBootXattr, boot, 0); err != nil {
			return false, fmt.Errorf("record the boot of a volatile mount: %w", err)
		}
	}
	return hostStopped, nil
}

// Settle makes the upper of an unmounted volatile workspace, whose
// directory is dir, durable: it syncs the upper's file system and clears
// overlayfs's mark, so that a mount after a reboot finds a whole upper.
// The daemon settles its workspaces when it shuts down; a workspace being
// ended needs none.
func Settle(dir string) error {
	if _, err := os.Lstat(volatileMark(dir)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	fd, err := unix.Open(upperDir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("settle %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("settle %s: syncfs: %w", dir, err)
	}
	if err := os.RemoveAll(volatileMark(dir)); err != nil {
		return fmt.Errorf("settle %s: %w", dir, err)
	}
	return nil
}
