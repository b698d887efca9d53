package cache

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/fsverity"
	"layerfs.dev/layerfs/internal/store/object"
)

// Cache files are sealed with fs-verity where the cache's file system
// has it (package fsverity): a sealed file can no longer be written by
// anyone, and the kernel checks every page read from it against the
// Merkle tree built when it was sealed, so a page damaged on disk reads
// as EIO in the sandbox, never as wrong bytes, even after the file was
// trusted (package fill's trust.go). A file is sealed once in place
// (Place) or, placed by a process that could not seal it, once trusted
// (Trust). Where the file system has no fs-verity, nothing is sealed
// and trust alone guards what the kernel reads.
//
// An overlay that checks its contents' digests (package kerneloverlay,
// verity=on) cannot read one through the daemon's FUSE view, which
// fs-verity does not cover; so a sealed cache does not evict what this
// process trusts, which its workspaces may still open: its bound holds
// for the rest.

// probeVerity finds whether the cache's files can be sealed.
func (d *Dir) probeVerity() {
	d.verityErr = fsverity.Supported(d.root)
}

// Verity reports why the cache's files are not sealed with fs-verity, or
// nil when they are.
func (d *Dir) Verity() error { return d.verityErr }

// seal seals the file at path when the cache seals its files, and
// returns the file's state after (the seal changes it). A file that
// cannot be sealed is left as it is: trust still guards it.
func (d *Dir) seal(path string, st *unix.Stat_t) {
	if d.verityErr != nil {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if err := fsverity.Enable(int(f.Fd())); err != nil {
		if d.log != nil {
			d.log.Warn("seal a cache file with fs-verity", "path", path, "err", err)
		}
		return
	}
	unix.Fstat(int(f.Fd()), st)
}

// trustedPath reports whether the content file at path is one this
// process trusts.
func (d *Dir) trustedPath(path string) bool {
	id, err := object.ParseID(filepath.Base(path))
	return err == nil && d.Trusted(id)
}
