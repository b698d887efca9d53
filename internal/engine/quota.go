package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/loopfs"
	"layerfs.dev/layerfs/wire"
)

// A workspace with a quota (WorkspaceSpec.QuotaBytes) keeps its whole
// directory under the Store (upper layer, work directory, mount point) on
// an ext4 file system of that size, in an image beside it
// (workspaces/<id>.img), so the kernel bounds every write to it: the
// daemon's, the sandbox's through FUSE passthrough (which never enters the
// daemon) and the kernel overlay's. A write past it fails with ENOSPC in
// the sandbox, the exec's receipt says the quota is full, and the host's
// file system and other workspaces are not touched. The kernels this was
// built on have no project quotas (CONFIG_QUOTA is off), which would
// have bounded a directory of the Store's own file system instead.

// quotaImage is where a workspace's quota file system lives.
func (e *Engine) quotaImage(id string) string { return e.workspaceDir(id) + ".img" }

// ensureQuota makes (first time) and mounts (first time, and after a
// reboot) the quota file system of w at its directory. Nothing is done
// for a workspace without a quota, or one whose file system is mounted.
func (e *Engine) ensureQuota(ctx context.Context, w *workspace) error {
	if w.opts.QuotaBytes <= 0 {
		return nil
	}
	dir, img := e.workspaceDir(w.rec.ID), e.quotaImage(w.rec.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if mounted, err := loopfs.IsMountPoint(dir); err != nil || mounted {
		return err
	}
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		// No blocks reserved for root: a sandbox's uid 0 gets the same
		// quota as any other.
		extra := []string{"-m", "0"}
		if w.opts.QuotaInodes > 0 {
			extra = append(extra, "-N", strconv.FormatInt(w.opts.QuotaInodes, 10))
		}
		if err := loopfs.Make(ctx, img, "ext4", w.opts.QuotaBytes, extra...); err != nil {
			os.Remove(img)
			return fmt.Errorf("workspace %s: quota file system: %w", w.rec.ID, err)
		}
	}
	if err := loopfs.Mount(ctx, img, dir, "ext4"); err != nil {
		return fmt.Errorf("workspace %s: mount its quota file system: %w", w.rec.ID, err)
	}
	return os.Chmod(dir, 0o700)
}

// dropQuota unmounts a removed workspace's quota file system, if it has
// one; removeQuotaImage then deletes its image.
func (e *Engine) dropQuota(id string) error {
	dir := e.workspaceDir(id)
	if _, err := os.Stat(e.quotaImage(id)); err != nil {
		return nil // no quota
	}
	if mounted, err := loopfs.IsMountPoint(dir); err != nil || !mounted {
		return nil
	}
	if err := loopfs.Unmount(dir); err != nil {
		return fmt.Errorf("unmount the quota file system of workspace %s: %w", id, err)
	}
	return nil
}

func (e *Engine) removeQuotaImage(id string) error {
	if err := os.Remove(e.quotaImage(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// quotaUsage is what w's quota file system holds now, for a receipt; nil
// without a quota.
func (e *Engine) quotaUsage(w *workspace) *wire.QuotaUsage {
	if w.opts.QuotaBytes <= 0 {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(e.workspaceDir(w.rec.ID), &st); err != nil {
		return nil
	}
	bs := int64(st.Bsize)
	u := &wire.QuotaUsage{
		Bytes:      int64(st.Blocks) * bs,
		BytesUsed:  int64(st.Blocks-st.Bfree) * bs,
		Inodes:     int64(st.Files),
		InodesUsed: int64(st.Files - st.Ffree),
	}
	// ext4 keeps a few clusters back for delayed allocation, so a file
	// system that refused a write still shows some room.
	u.Full = int64(st.Bavail)*bs < max(1<<20, u.Bytes/100) || st.Ffree == 0
	return u
}
