package kerneloverlay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/erofs"
	"layerfs.dev/layerfs/internal/fsverity"
	"layerfs.dev/layerfs/internal/overlay/overlaytest"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestMetacopyDigestKernel holds the metacopy xattr with a digest that
// images carry on a Store sealed with fs-verity (fsverity.Metacopy) to
// the running kernel's overlayfs: a read-only overlay of an EROFS image
// whose file redirects to a data-only layer. With verity=off the file
// reads as its data. With verity=on the kernel parses the xattr and
// reaches the digest check, which a data file not sealed fails with EIO,
// saying so in the kernel log ("has no fs-verity digest"), where a
// malformed xattr fails earlier ("invalid xattr size"). With
// verity=require a metacopy with no digest fails. This runs on a kernel
// without fs-verity too (the development machines'): what it checks is
// the format, not the seal.
func TestMetacopyDigestKernel(t *testing.T) {
	testenv.RequireRoot(t)
	if !loads("erofs") || !loads("overlay") {
		testenv.Skip(t, "the kernel has no erofs or no overlay")
	}
	data := []byte("the committed content\n")
	digest, err := fsverity.Digest(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	good := fsverity.Metacopy(digest)
	bad := append([]byte(nil), good...)
	bad[1]-- // len: not the xattr's size

	for _, c := range []struct {
		name     string
		metacopy []byte
		verity   string
		log      string // "": the file reads as data
	}{
		{"off", good, "off", ""},
		{"on", good, "on", "has no fs-verity digest"},
		{"malformed", bad, "on", "invalid xattr size"},
		{"require", nil, "require", "has no digest specified"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			// A name of this run's own, to find the kernel's message.
			dataName := fmt.Sprintf("layerfs-verity-%s-%d", c.name, time.Now().UnixNano())
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "data", "ab"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "data", "ab", dataName), data, 0o444))
			root := &erofs.Inode{Mode: syscall.S_IFDIR | 0o755, Entries: []erofs.Entry{{Name: "f", Inode: &erofs.Inode{
				Mode: syscall.S_IFREG | 0o644, Size: int64(len(data)),
				Xattrs: []erofs.Xattr{{Name: xattrOverlayPrefix + "metacopy", Value: c.metacopy},
					{Name: xattrOverlayPrefix + "redirect", Value: []byte("/ab/" + dataName)}},
			}}}}
			image := filepath.Join(dir, "meta.erofs")
			var buf bytes.Buffer
			require.NoError(t, erofs.Write(&buf, root, erofs.Options{}))
			require.NoError(t, os.WriteFile(image, buf.Bytes(), 0o644))
			meta, err := mountMeta(image)
			require.NoError(t, err)
			defer unix.Close(meta)
			target := filepath.Join(dir, "mnt")
			require.NoError(t, os.Mkdir(target, 0o755))
			require.NoError(t, mountReadOnlyOverlay(meta, filepath.Join(dir, "data"), target, c.verity))
			defer unix.Unmount(target, unix.MNT_DETACH)

			kmsg := openKmsg(t)
			got, err := os.ReadFile(filepath.Join(target, "f"))
			if c.log == "" {
				require.NoError(t, err)
				require.Equal(t, data, got)
				return
			}
			require.ErrorIs(t, err, unix.EIO)
			name := dataName
			if c.name != "on" {
				name = "f" // the message names the metacopy file
			}
			kmsg.waitFor(t, c.log, name)
		})
	}
}

// mountReadOnlyOverlay mounts an overlay with no upper at target: the
// mounted EROFS image meta over the data-only layer data, with the
// options of the workspaces' overlay and verity=mode.
func mountReadOnlyOverlay(meta int, data, target, mode string) error {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fsfd)
	d, err := unix.Open(data, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	if err := unix.FsconfigSetFd(fsfd, "lowerdir+", meta); err != nil {
		return fmt.Errorf("lowerdir+: %w", err)
	}
	if err := unix.FsconfigSetFd(fsfd, "datadir+", d); err != nil {
		return fmt.Errorf("datadir+: %w", err)
	}
	for opt := range strings.SplitSeq(Options+",verity="+mode, ",") {
		k, v, _ := strings.Cut(opt, "=")
		if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
			return fmt.Errorf("%s: %w", opt, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY)
	if err != nil {
		return fmt.Errorf("fsmount: %w", err)
	}
	defer unix.Close(mnt)
	return unix.MoveMount(mnt, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// kmsg reads the kernel's log from where it was opened.
type kmsg struct{ f *os.File }

func openKmsg(t *testing.T) kmsg {
	t.Helper()
	f, err := os.OpenFile("/dev/kmsg", os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		testenv.Skip(t, "the kernel log: "+err.Error())
	}
	t.Cleanup(func() { f.Close() })
	_, err = f.Seek(0, io.SeekEnd)
	require.NoError(t, err)
	return kmsg{f}
}

// waitFor waits for a record holding both what and name.
func (k kmsg) waitFor(t *testing.T, what, name string) {
	t.Helper()
	var seen []string
	deadline := time.Now().Add(5 * time.Second)
	r := bufio.NewReaderSize(k.f, 8192)
	for time.Now().Before(deadline) {
		line, err := r.ReadString('\n')
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, io.EOF) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		require.NoError(t, err)
		if strings.Contains(line, "overlayfs") {
			seen = append(seen, line)
		}
		if strings.Contains(line, what) && strings.Contains(line, name) {
			return
		}
	}
	t.Fatalf("no kernel log record with %q and %q; overlayfs said: %q", what, name, seen)
}

// sealedStore is the test Store as a Lower whose cache seals its files:
// the digest the kernel would measure of a sealed cache file is
// fsverity.Digest of the content's bytes (TestSupported holds the two
// equal where files can be sealed).
type sealedStore struct {
	*store.DB
	asked int
}

func (s *sealedStore) Sealed() bool { return true }

func (s *sealedStore) ContentDigest(ctx context.Context, c store.Content) ([fsverity.DigestSize]byte, error) {
	s.asked++
	p, err := s.Materialize(ctx, &store.Entry{Name: "c", Type: store.TypeFile, Size: c.Size, Object: c.ID, ObjectKind: c.Kind})
	if err != nil {
		return [fsverity.DigestSize]byte{}, err
	}
	f, err := os.Open(p)
	if err != nil {
		return [fsverity.DigestSize]byte{}, err
	}
	defer f.Close()
	return fsverity.Digest(f, c.Size)
}

// TestVerityImage: the image of a commit of a Store whose cache is sealed
// records in each file's metacopy xattr its content's digest
// (fsverity.Metacopy), under a name of its own; an empty file has no
// content and no digest.
func TestVerityImage(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := t.Context()
	files := map[string]string{"small": "small\n", "a/big": strings.Repeat("0123456789", 100_000), "empty": ""}
	s := overlaytest.NewStore(t, ctx, func(t testing.TB, dir string) {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "a"), 0o755))
		for name, data := range files {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644))
		}
	})
	sealed := &sealedStore{DB: s.DB}
	cache := t.TempDir()
	plain, err := MetaImage(ctx, s.DB, cache, s.Root)
	require.NoError(t, err)
	image, err := MetaImage(ctx, sealed, cache, s.Root)
	require.NoError(t, err)
	require.NotEqual(t, plain, image, "an image with digests has a name of its own")
	require.True(t, strings.HasSuffix(image, verityImageSuffix), image)
	require.Equal(t, 2, sealed.asked, "digests asked for")

	meta, err := mountMeta(image)
	require.NoError(t, err)
	defer unix.Close(meta)
	target := t.TempDir()
	require.NoError(t, unix.MoveMount(meta, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH))
	defer unix.Unmount(target, unix.MNT_DETACH)
	for name, data := range files {
		buf := make([]byte, 64)
		n, err := unix.Lgetxattr(filepath.Join(target, name), xattrOverlayPrefix+"metacopy", buf)
		if data == "" {
			require.ErrorIs(t, err, unix.ENODATA, "%s: an empty file's metacopy", name)
			continue
		}
		require.NoError(t, err, name)
		d, err := fsverity.Digest(strings.NewReader(data), int64(len(data)))
		require.NoError(t, err)
		require.Equal(t, fsverity.Metacopy(d), buf[:n], name)
	}
}
