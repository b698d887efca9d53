package loopfs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/wire/errclass"
)

// ErrToolMissing: a program loopfs needs is not on PATH; the message names
// the Debian package that provides it.
var ErrToolMissing = errclass.New(errclass.Unavailable, "required tool not installed")

// Kinds are the file systems Make makes: the mkfs program, its arguments
// before the image, and the Debian package that provides it.
var Kinds = map[string]struct {
	Mkfs string
	Args []string
	Pkg  string
}{
	// A journal (-j), and the inode tables and journal initialised now
	// rather than by ext4lazyinit in the background during the run.
	"ext4": {"mkfs.ext4", []string{"-q", "-F", "-j", "-E", "lazy_itable_init=0,lazy_journal_init=0"}, "e2fsprogs"},
	// Reflinks, so copy-ups and copy_file_range can clone.
	"xfs": {"mkfs.xfs", []string{"-q", "-f", "-m", "reflink=1"}, "xfsprogs"},
}

// Make creates img, a sparse file of size bytes, and makes a file system of
// the given kind in it. extra are more mkfs arguments (before the image).
func Make(ctx context.Context, img, kind string, size int64, extra ...string) error {
	k, ok := Kinds[kind]
	if !ok {
		return fmt.Errorf("loopfs: no file system kind %q", kind)
	}
	if err := needTools(k.Mkfs, k.Pkg); err != nil {
		return err
	}
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	args := append(append(append([]string{}, k.Args...), extra...), img)
	return run(ctx, k.Mkfs, args...)
}

// Mount loop-mounts img (a file system of kind) at dir; the loop device
// clears itself on unmount.
func Mount(ctx context.Context, img, dir, kind string) error {
	if err := needTools("mount", "mount"); err != nil {
		return err
	}
	return run(ctx, "mount", "-t", kind, "-o", "loop", img, dir)
}

// Unmount unmounts dir, waiting a little for processes that are still
// leaving it (a shell that just exited, a closing file). A busy file
// system is not forced: the error wraps EBUSY.
func Unmount(dir string) error {
	var err error
	for range 20 {
		if err = unix.Unmount(dir, 0); err != unix.EBUSY {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// IsMountPoint reports whether dir is the root of a mount (its device
// differs from its parent's, or it is its parent).
func IsMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Lstat(dir+"/..", &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev || st.Ino == parent.Ino, nil
}

func needTools(name, pkg string) error {
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Errorf("%w: %s is not on PATH (install the Debian package %s)", ErrToolMissing, name, pkg)
	}
	return nil
}

func run(ctx context.Context, name string, args ...string) error {
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
