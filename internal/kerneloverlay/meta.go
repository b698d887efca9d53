package kerneloverlay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/erofs"
	"layerfs.dev/layerfs/internal/store"
)

// The metadata layer.
//
// Every lookup the overlay makes in its lower (a negative one for each name
// a process creates in a committed directory), every stat and every listing
// of a committed directory would be a FUSE round trip to the daemon's view.
// Instead, the overlay's lower is an EROFS image of the commit's metadata:
// directories, symlinks, devices, and regular files as holes of their size
// carrying overlayfs's metacopy xattr and an absolute redirect to their
// content (see content.go), which overlayfs follows into the data-only
// layers (lowerdir=META::CACHE::VIEW) only when a file's data is first
// opened.
//
// An image is a function of the root tree alone, so it is built once per
// commit (MetaImage) and kept beside
// the Store's cache; the Store's gc sweeps it with other cache files, and
// the next workspace of that commit builds it again. An image is not
// fsynced (a sync would cost more than the build): it is good as long as the
// page cache it was written to, so the directory records the boot it was
// written in, and a directory of another boot is emptied first.

// metaImageDir is where images are kept, under a Store's cache directory.
const metaImageDir = "meta"

// metaImageSuffix ends an image's name. It names the image's format too:
// images whose redirects named commit paths ended in ".erofs". An image
// whose metacopy xattrs record each content's fs-verity digest (a Store
// whose cache is sealed: see verity.go) ends in verityImageSuffix.
const (
	metaImageSuffix   = ".content.erofs"
	verityImageSuffix = ".verity.erofs"
)

// MetaImage returns the path of the EROFS image of root's metadata under
// cacheDir (a Store's cache directory), writing it first if it is not
// there. A tree the image cannot carry (an xattr outside the user,
// trusted, security and ACL namespaces) fails with erofs.ErrUnsupported.
func MetaImage(ctx context.Context, lower interface {
	Tree(ctx context.Context, id store.ID) (*store.Tree, error)
}, cacheDir string, root store.ID) (string, error) {
	dir := filepath.Join(cacheDir, metaImageDir)
	if err := thisBoot(dir); err != nil {
		return "", fmt.Errorf("metadata image: %w", err)
	}
	digests := sealedLower(lower)
	suffix := metaImageSuffix
	if digests != nil {
		suffix = verityImageSuffix
	}
	path := filepath.Join(dir, root.String()+suffix)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	// One builder at a time, in any process: the others wait for its
	// image (a commit's is built when it is published, and a workspace
	// opened meanwhile waits for it rather than build it again).
	unlock, err := lockImage(ctx, path)
	if err != nil {
		return "", fmt.Errorf("metadata image of %s: %w", root.Short(), err)
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	tree, contents, err := metaTree(ctx, lower, root, digests)
	if err != nil {
		return "", fmt.Errorf("metadata image of %s: %w", root.Short(), err)
	}
	// The contents list first: an image in place has its list beside it
	// (unless a gc swept it since: the view then walks the commit).
	if err := writeContents(contentsPath(cacheDir, root), contents); err != nil {
		return "", fmt.Errorf("contents list of %s: %w", root.Short(), err)
	}
	// Written beside its place and renamed into it: a reader sees a whole
	// image or none, and two builders of one root write the same bytes.
	f, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return "", fmt.Errorf("metadata image: %w", err)
	}
	defer os.Remove(f.Name())
	var opts erofs.Options
	copy(opts.UUID[:], root[:]) // the same image, the same file handles
	w := bufio.NewWriterSize(f, 1<<20)
	err = erofs.Write(w, tree, opts)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("metadata image of %s: %w", root.Short(), err)
	}
	return path, nil
}

// lockImage takes the lock of building the image at path, waiting while
// another builder holds it, and returns its release.
func lockImage(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 20*time.Millisecond) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(delay):
		}
	}
	// The lock file stays: removing it could let a third builder lock a
	// new file while a second holds the old one.
	return func() { f.Close() }, nil
}

// contentsPath is where MetaImage puts the contents list of root (see
// content.go) under cacheDir.
func contentsPath(cacheDir string, root store.ID) string {
	return filepath.Join(cacheDir, metaImageDir, root.String()+contentsSuffix)
}

// bootIDFile, in an image directory, names the boot its images were
// written in.
const bootIDFile = "boot_id"

// thisBoot makes dir an image directory of this boot: created if missing,
// emptied if its images were written before the last boot (or if it does
// not say when), which may have lost what they had only in the page cache.
func thisBoot(dir string) error {
	boot, err := bootID()
	if err != nil {
		return err
	}
	if had, err := os.ReadFile(filepath.Join(dir, bootIDFile)); err == nil && string(had) == string(boot) {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, bootIDFile), boot, 0o600)
}

// metaTree converts the committed tree root into the image's inodes, and
// lists the contents the image's files redirect to, each once. With
// digests, each file's metacopy records its content's fs-verity digest.
func metaTree(ctx context.Context, lower interface {
	Tree(ctx context.Context, id store.ID) (*store.Tree, error)
}, root store.ID, digests verityLower) (*erofs.Inode, []store.Content, error) {
	links := map[uint64]*erofs.Inode{}
	var contents contentList
	var dir func(id store.ID, path string, in *erofs.Inode) error
	dir = func(id store.ID, path string, in *erofs.Inode) error {
		if id.IsZero() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		t, err := lower.Tree(ctx, id)
		if err != nil {
			return err
		}
		in.Entries = make([]erofs.Entry, 0, len(t.Entries))
		for i := range t.Entries {
			e := &t.Entries[i]
			p := path + "/" + e.Name
			if e.Link != 0 {
				if first, ok := links[e.Link]; ok {
					in.Entries = append(in.Entries, erofs.Entry{Name: e.Name, Inode: first})
					continue
				}
			}
			child, err := metaInode(e, p)
			if err != nil {
				return err
			}
			if digests != nil && hasContent(e) {
				if err := recordDigest(ctx, digests, e, child); err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
			}
			if e.Link != 0 {
				links[e.Link] = child
			}
			if e.Type == store.TypeDir {
				if err := dir(e.Object, p, child); err != nil {
					return err
				}
			} else {
				contents.add(e)
			}
			in.Entries = append(in.Entries, erofs.Entry{Name: e.Name, Inode: child})
		}
		return nil
	}
	if l, ok := lower.(treeLoader); ok {
		if err := loadLevels(ctx, l, lower, root); err != nil {
			return nil, nil, err
		}
	}
	// The view's root shows the mode and owner of a new directory; the
	// overlay's root takes its attributes from the upper anyway.
	top := &erofs.Inode{Mode: syscall.S_IFDIR | 0o755}
	if err := dir(root, "", top); err != nil {
		return nil, nil, err
	}
	return top, contents.contents, nil
}

// treeLoader loads many trees at once (store.DB.LoadTrees).
type treeLoader interface {
	LoadTrees(ctx context.Context, ids []store.ID) error
}

// loadLevels loads the trees under root a level at a time, so that the
// walk after finds them cached: a statement per level (and per few
// hundred directories) rather than one per directory.
func loadLevels(ctx context.Context, l treeLoader, lower interface {
	Tree(ctx context.Context, id store.ID) (*store.Tree, error)
}, root store.ID) error {
	seen := map[store.ID]bool{}
	for level := []store.ID{root}; len(level) > 0; {
		if err := l.LoadTrees(ctx, level); err != nil {
			return err
		}
		var next []store.ID
		for _, id := range level {
			if id.IsZero() {
				continue
			}
			t, err := lower.Tree(ctx, id)
			if err != nil {
				return err
			}
			for i := range t.Entries {
				if e := &t.Entries[i]; e.Type == store.TypeDir && !e.Object.IsZero() && !seen[e.Object] {
					seen[e.Object] = true
					next = append(next, e.Object)
				}
			}
		}
		level = next
	}
	return nil
}

// metaInode is the image's inode for the entry e at path p (absolute, in
// the commit).
func metaInode(e *store.Entry, p string) (*erofs.Inode, error) {
	if e.Type.FileType() == 0 {
		return nil, fmt.Errorf("%s: %w: entry type %s", p, erofs.ErrUnsupported, e.Type)
	}
	in := &erofs.Inode{Mode: e.Type.FileType() | e.Mode&0o7777, UID: e.UID, GID: e.GID, MtimeNs: e.MtimeNs,
		Size: e.Size, Target: e.Target, Rdev: e.Rdev}
	if e.Type != store.TypeFile {
		in.Size = 0 // a symlink's is its target's length, which the image takes from Target
	}
	for _, x := range e.Xattrs {
		if strings.HasPrefix(x.Name, xattrOverlayPrefix) {
			// overlayfs's own, which a commit of an overlay upper may
			// keep (a new directory's opaque): an overlay mount never
			// shows them, and in the image they would speak to it.
			continue
		}
		in.Xattrs = append(in.Xattrs, erofs.Xattr{Name: x.Name, Value: x.Value})
	}
	if hasContent(e) {
		// Its data is the data-only layers' file of its content.
		in.Xattrs = append(in.Xattrs,
			erofs.Xattr{Name: xattrOverlayPrefix + "metacopy"},
			erofs.Xattr{Name: xattrOverlayPrefix + "redirect", Value: []byte(contentPath(e.Object))})
	}
	return in, nil
}

const xattrOverlayPrefix = "trusted.overlay."

// mountMeta mounts the image at path read-only as a detached mount (no
// mountpoint: it lives as long as the returned descriptor and the overlay
// stacked on it) and returns the mount's descriptor. EROFS mounts an image
// from a regular file since Linux 6.12, with no loop device.
func mountMeta(path string) (int, error) {
	fsfd, err := unix.Fsopen("erofs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("mount metadata image: fsopen erofs: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "source", path); err != nil {
		return -1, fmt.Errorf("mount metadata image %s: %w", path, err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("mount metadata image %s: %w", path, err)
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID)
	if err != nil {
		return -1, fmt.Errorf("mount metadata image %s: %w", path, err)
	}
	return mnt, nil
}

// openMeta mounts the metadata image of cfg.Root (built first if it is
// not cached) and returns the mount's descriptor.
func openMeta(ctx context.Context, cfg Config) (int, error) {
	path, err := MetaImage(ctx, cfg.Lower, imageCache(cfg), cfg.Root)
	if err != nil {
		return -1, err
	}
	return mountMeta(path)
}

// imageCache is the directory cfg's images are kept under.
func imageCache(cfg Config) string {
	if cfg.MetaCache == "" {
		return cfg.Dir
	}
	return cfg.MetaCache
}
