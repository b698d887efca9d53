package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/loopfs"
	"layerfs.dev/layerfs/wire/errclass"
)

// Errors of LoopFS, for errors.Is.
var (
	// ErrToolMissing: a program LoopFS needs is not on PATH; the message
	// names the Debian package that provides it.
	ErrToolMissing = loopfs.ErrToolMissing
	// ErrLoopSpec: the TYPE:SIZE argument is malformed or names a file
	// system LoopFS does not make.
	ErrLoopSpec = errclass.New(errclass.Invalid, "bad file system spec")
)

// LoopFS makes a fresh file system in a sparse image file under dir and
// loop-mounts it, so that a bench can run on a known file system rather
// than whatever the root is (on this machine kind, ext4 without a journal,
// where creating and deleting files natively is several times slower).
//
// spec is TYPE:SIZE: "ext4:8G" is ext4 with a journal, "xfs:8G" is XFS
// with reflinks; SIZE is bytes with an optional K, M, G or T suffix
// (powers of 1024), and XFS needs at least 300M. The image and the
// mountpoint live in a new directory under dir, so concurrent runs do not
// collide; the image takes only the blocks written to it.
//
// cleanup unmounts the file system (which releases the loop device) and
// removes the image. A file system still in use is not forced: cleanup
// returns an error wrapping EBUSY, and may be called again once it is
// free. Calls after a successful one do nothing. LoopFS needs root, the
// mount program and mkfs.ext4 (Debian package e2fsprogs) or mkfs.xfs
// (xfsprogs); a missing program is an error wrapping ErrToolMissing, a
// malformed spec one wrapping ErrLoopSpec.
func LoopFS(ctx context.Context, dir, spec string) (mountpoint string, cleanup func() error, err error) {
	fstype, size, err := parseLoopSpec(spec)
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	top, err := os.MkdirTemp(dir, "loopfs-"+fstype+"-")
	if err != nil {
		return "", nil, err
	}
	img, mnt := filepath.Join(top, fstype+".img"), filepath.Join(top, fstype)
	fail := func(err error) (string, func() error, error) {
		os.RemoveAll(top)
		return "", nil, fmt.Errorf("loop file system %s: %w", spec, err)
	}
	if err := loopfs.Make(ctx, img, fstype, size); err != nil {
		return fail(err)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return fail(err)
	}
	if err := loopfs.Mount(ctx, img, mnt, fstype); err != nil {
		return fail(err)
	}
	var mu sync.Mutex
	unmounted := false
	cleanup = func() error {
		mu.Lock()
		defer mu.Unlock()
		if !unmounted {
			if err := loopfs.Unmount(mnt); err != nil && err != unix.EINVAL {
				return fmt.Errorf("loop file system %s: unmount %s: %w (the image %s is left; call cleanup again once it is free)", spec, mnt, err, img)
			}
			unmounted = true
		}
		return os.RemoveAll(top)
	}
	return mnt, cleanup, nil
}

// parseLoopSpec reads TYPE:SIZE.
func parseLoopSpec(spec string) (fstype string, size int64, err error) {
	fstype, sz, ok := strings.Cut(spec, ":")
	if !ok {
		return "", 0, fmt.Errorf("%w %q: want TYPE:SIZE (ext4:8G or xfs:8G)", ErrLoopSpec, spec)
	}
	if _, ok := loopfs.Kinds[fstype]; !ok {
		return "", 0, fmt.Errorf("%w %q: type %q not supported (want ext4 or xfs)", ErrLoopSpec, spec, fstype)
	}
	mult := int64(1)
	if n := len(sz); n > 0 {
		if i := strings.IndexByte("KMGT", sz[n-1]&^0x20); i >= 0 {
			mult = 1 << (10 * (i + 1))
			sz = sz[:n-1]
		}
	}
	n, err := strconv.ParseInt(sz, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return "", 0, fmt.Errorf("%w %q: size %q: want a positive number of bytes with an optional K, M, G or T suffix", ErrLoopSpec, spec, sz)
	}
	return fstype, n * mult, nil
}
