package kerneloverlay

import (
	"context"
	"fmt"

	"layerfs.dev/layerfs/internal/erofs"
	"layerfs.dev/layerfs/internal/fsverity"
	"layerfs.dev/layerfs/internal/store"
)

// Overlay verity.
//
// Where the Store's cache seals its files with fs-verity (store.DB.Sealed:
// its file system has the feature), a commit's image records in each
// file's metacopy xattr the fs-verity digest of its content
// (fsverity.Metacopy), as composefs does, and the overlay is mounted with
// verity=on: at each open the kernel checks that the data file it
// reaches has that digest, and fs-verity checks every page read from it,
// so a damaged or replaced content reads as EIO, never as wrong bytes.
//
// The daemon's view, the second data layer, is FUSE, which fs-verity does
// not cover: a file with a digest whose content the kernel finds there
// fails. So before such an overlay is mounted, every content of the
// commit is made trusted (store.DB.Ready), and the cache keeps what this
// process trusts (package cache); an image records a content's digest
// only once the content is in the cache, sealed (ContentDigest).

// verityLower is a Lower whose cache seals its files: the images of its
// commits record their contents' digests.
type verityLower interface {
	Sealed() bool
	// ContentDigest is the fs-verity digest of the content, which it
	// places in the cache (sealed and trusted) first.
	ContentDigest(ctx context.Context, c store.Content) ([fsverity.DigestSize]byte, error)
}

// readier readies a commit's contents before a mount (store.DB.Ready).
type readier interface {
	Ready(ctx context.Context, contents []store.Content) (store.ReadyStats, error)
}

// sealedLower is lower as a verityLower when its cache seals its files,
// else nil.
func sealedLower(lower any) verityLower {
	if v, ok := lower.(verityLower); ok && v.Sealed() {
		return v
	}
	return nil
}

// recordDigest sets the metacopy xattr of in, the image's inode of the
// file entry e, to one that records its content's digest.
func recordDigest(ctx context.Context, v verityLower, e *store.Entry, in *erofs.Inode) error {
	d, err := v.ContentDigest(ctx, store.Content{ID: e.Object, Kind: e.ObjectKind, Size: e.Size})
	if err != nil {
		return fmt.Errorf("fs-verity digest of %s: %w", e.Object.Short(), err)
	}
	for i := range in.Xattrs {
		if in.Xattrs[i].Name == xattrOverlayPrefix+"metacopy" {
			in.Xattrs[i].Value = fsverity.Metacopy(d)
			return nil
		}
	}
	return fmt.Errorf("no metacopy xattr for %s", e.Object.Short())
}

// readyVerity makes every content of cfg.Root trusted before an overlay
// that checks their digests is mounted over them (see above); it reports
// whether the overlay is to check them (verity=on).
func readyVerity(ctx context.Context, cfg Config) (bool, error) {
	if sealedLower(cfg.Lower) == nil || dataLayer(cfg) == "" {
		return false, nil
	}
	r, ok := cfg.Lower.(readier)
	if !ok {
		return false, nil
	}
	contents, err := Contents(ctx, cfg.Lower, imageCache(cfg), cfg.Root)
	if err != nil {
		return false, err
	}
	if _, err := r.Ready(ctx, contents); err != nil {
		return false, fmt.Errorf("ready the contents of %s for fs-verity: %w", cfg.Root.Short(), err)
	}
	return true, nil
}
