package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Errors of LoopFS, for errors.Is.
var (
	// ErrToolMissing: a program LoopFS needs is not on PATH; the message
	// names the Debian package that provides it.
	ErrToolMissing = errors.New("required tool not installed")
	// ErrLoopSpec: the TYPE:SIZE argument is malformed or names a file
	// system LoopFS does not make.
	ErrLoopSpec = errors.New("bad file system spec")
)

// loopKinds are the file systems LoopFS makes: the mkfs program, its
// arguments before the image, and the Debian package that provides it.
var loopKinds = map[string]struct {
	mkfs string
	args []string
	pkg  string
}{
	// A journal (-j), and the inode tables and journal initialised now
	// rather than by ext4lazyinit in the background during the run.
	"ext4": {"mkfs.ext4", []string{"-q", "-F", "-j", "-E", "lazy_itable_init=0,lazy_journal_init=0"}, "e2fsprogs"},
	// Reflinks, so copy-ups and copy_file_range can clone.
	"xfs": {"mkfs.xfs", []string{"-q", "-f", "-m", "reflink=1"}, "xfsprogs"},
}

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
	kind := loopKinds[fstype]
	for _, tool := range []struct{ name, pkg string }{{kind.mkfs, kind.pkg}, {"mount", "mount"}} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return "", nil, fmt.Errorf("loop file system %s: %w: %s is not on PATH (install the Debian package %s)", spec, ErrToolMissing, tool.name, tool.pkg)
		}
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
	if err := makeSparse(img, size); err != nil {
		return fail(err)
	}
	if err := runTool(ctx, kind.mkfs, append(kind.args, img)...); err != nil {
		return fail(err)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return fail(err)
	}
	// mount -o loop sets the loop device to clear itself on unmount.
	if err := runTool(ctx, "mount", "-t", fstype, "-o", "loop", img, mnt); err != nil {
		return fail(err)
	}
	var mu sync.Mutex
	unmounted := false
	cleanup = func() error {
		mu.Lock()
		defer mu.Unlock()
		if !unmounted {
			if err := unmountRetry(mnt); err != nil && err != unix.EINVAL {
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
	if _, ok := loopKinds[fstype]; !ok {
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

func makeSparse(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func runTool(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i] // mkfs follows its complaint with the whole usage text
		}
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return nil
}

// unmountRetry unmounts dir, waiting a little for processes that are
// still leaving it (a shell that just exited, a closing file).
func unmountRetry(dir string) error {
	var err error
	for i := 0; i < 20; i++ {
		if err = unix.Unmount(dir, 0); err != unix.EBUSY {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}
