package fsverity

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// pattern is the bytes of testdata/digests.txt's files.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(7*i + i/4096)
	}
	return b
}

// TestDigestRecorded: Digest agrees with fsverity-utils' `fsverity
// digest` on files of every shape of Merkle tree (empty, one block, a
// partial block, exactly one hash block, two levels), as recorded in
// testdata, and with the tool itself where it is installed.
func TestDigestRecorded(t *testing.T) {
	f, err := os.Open("testdata/digests.txt")
	require.NoError(t, err)
	defer f.Close()
	tool, _ := exec.LookPath("fsverity")
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		size, err := strconv.Atoi(fields[0])
		require.NoError(t, err)
		data := pattern(size)
		got, err := Digest(bytes.NewReader(data), int64(size))
		require.NoError(t, err)
		require.Equal(t, fields[1], hex.EncodeToString(got[:]), "size %d", size)
		if tool != "" {
			p := filepath.Join(t.TempDir(), "f")
			require.NoError(t, os.WriteFile(p, data, 0o644))
			out, err := exec.Command(tool, "digest", p).Output()
			require.NoError(t, err)
			require.Equal(t, "sha256:"+fields[1], strings.Fields(string(out))[0], "fsverity digest of %d bytes", size)
		}
		n++
	}
	require.NoError(t, sc.Err())
	require.Equal(t, 8, n)
	if tool == "" {
		t.Log("fsverity (fsverity-utils) not installed: checked against the recorded digests only")
	}
}

// ioc is the kernel's _IOC: how ioctl numbers are made
// (include/uapi/asm-generic/ioctl.h).
func ioc(dir, typ, nr, size uintptr) uintptr { return dir<<30 | size<<16 | typ<<8 | nr }

// TestIoctlLayout: the ioctls and their arguments are the kernel's
// (include/uapi/linux/fsverity.h): struct fsverity_enable_arg is 128
// bytes with its fields where the kernel reads them, struct
// fsverity_digest a 4-byte header; FS_IOC_ENABLE_VERITY is _IOW('f', 133,
// struct fsverity_enable_arg), FS_IOC_MEASURE_VERITY _IOWR('f', 134,
// struct fsverity_digest).
func TestIoctlLayout(t *testing.T) {
	const write, readWrite = 1, 3
	var a unix.FsverityEnableArg
	require.EqualValues(t, 128, unsafe.Sizeof(a))
	for name, c := range map[string][2]uintptr{
		"version":        {unsafe.Offsetof(a.Version), 0},
		"hash_algorithm": {unsafe.Offsetof(a.Hash_algorithm), 4},
		"block_size":     {unsafe.Offsetof(a.Block_size), 8},
		"salt_size":      {unsafe.Offsetof(a.Salt_size), 12},
		"salt_ptr":       {unsafe.Offsetof(a.Salt_ptr), 16},
		"sig_size":       {unsafe.Offsetof(a.Sig_size), 24},
		"sig_ptr":        {unsafe.Offsetof(a.Sig_ptr), 32},
	} {
		require.Equal(t, c[1], c[0], "offset of %s", name)
	}
	var d unix.FsverityDigest
	require.EqualValues(t, 4, unsafe.Sizeof(d))
	require.EqualValues(t, 2, unsafe.Offsetof(d.Size))
	require.EqualValues(t, 4, unsafe.Offsetof(measureArg{}.Digest), "the digest follows the header")
	require.Equal(t, ioc(write, 'f', 133, unsafe.Sizeof(a)), uintptr(unix.FS_IOC_ENABLE_VERITY))
	require.Equal(t, ioc(readWrite, 'f', 134, unsafe.Sizeof(d)), uintptr(unix.FS_IOC_MEASURE_VERITY))
	require.EqualValues(t, 1, HashAlgorithm, "FS_VERITY_HASH_ALG_SHA256")
}

// TestMetacopy: the xattr is struct ovl_metacopy as the kernel reads it
// (fs/overlayfs/overlayfs.h: u8 version = 0, u8 len = header and digest,
// u8 flags = 0, u8 digest_algo = FS_VERITY_HASH_ALG_SHA256, the digest),
// the bytes composefs's writer (libcomposefs/lcfs-writer-erofs.c) puts in
// its images: 36 bytes, 00 24 00 01, then the digest.
func TestMetacopy(t *testing.T) {
	var d [DigestSize]byte
	for i := range d {
		d[i] = byte(0xa0 + i)
	}
	got := Metacopy(d)
	want, err := hex.DecodeString("00240001" + "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf")
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestSupported: where the file system seals files, a sealed file's
// measured digest is Digest of its bytes and it can no longer be
// written; where it cannot, the probe says so with ErrUnsupported. (The
// development machines' kernel has no CONFIG_FS_VERITY: the second.)
func TestSupported(t *testing.T) {
	dir := t.TempDir()
	err := Supported(dir)
	if err != nil {
		require.True(t, errors.Is(err, ErrUnsupported), "an unsupported file system's probe: %v", err)
		t.Logf("fs-verity not supported in %s: %v", dir, err)
		return
	}
	data := pattern(3 << 20)
	p := filepath.Join(dir, "sealed")
	require.NoError(t, os.WriteFile(p, data, 0o444))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, Enable(int(f.Fd())))
	require.NoError(t, Enable(int(f.Fd())), "sealing a sealed file")
	got, err := Measure(int(f.Fd()))
	require.NoError(t, err)
	want, err := Digest(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	require.Equal(t, want, got)
	_, err = os.OpenFile(p, os.O_WRONLY, 0)
	require.Error(t, err, "a sealed file opened for writing")
}
