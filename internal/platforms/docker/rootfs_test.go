package docker

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/testenv"
)

// TestSandboxRootFromHost assembles the default image root from this host's
// packages and checks what the cells need is there, with every shared
// library it needs, and that what should be left out is.
func TestSandboxRootFromHost(t *testing.T) {
	if _, err := os.Stat("/var/lib/dpkg/info"); err != nil {
		testenv.SkipNotHere(t, "not a Debian host: "+err.Error())
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	r, err := sandboxRoot(DefaultPackages, exe)
	require.NoError(t, err)
	// The cells' programs, by the names a shell finds them.
	for _, prog := range []string{"bash", "seq", "echo", "stat", "rm", "mkdir", "touch", "find", "wc",
		"dd", "cp", "cat", "date", "git", "python3", "awk", "sh", "sed", "grep", "tar", "gzip", "ps", "env", "sort"} {
		if !r.resolves(t, "/usr/bin/"+prog) && !r.resolves(t, "/usr/sbin/"+prog) {
			t.Errorf("%s is not in the image", prog)
		}
	}
	// Each ELF file's libraries resolve inside the image itself.
	for p := range r.files {
		need, interp, runpath, err := elfNeeds(r.hostPath(p))
		if err != nil {
			continue
		}
		if interp != "" && !r.resolves(t, interp) {
			t.Errorf("%s: interpreter %s missing", p, interp)
		}
		for _, lib := range need {
			found := false
			for _, d := range append(runpath, r.libDirs...) {
				if r.resolves(t, path.Join(strings.ReplaceAll(d, "$ORIGIN", path.Dir(p)), lib)) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: %s missing", p, lib)
			}
		}
	}
	for p := range r.files {
		if excluded(p) {
			t.Errorf("%s should have been left out", p)
		}
		if c, err := r.canonical(p); err != nil || c != p {
			t.Errorf("%s is not canonical (%s, %v)", p, c, err)
		}
	}
	assert.Contains(t, string(r.inline["/etc/passwd"]), "root:x:0:0:", "no root in /etc/passwd")
}

// resolves reports whether absolute path p names a file of the image,
// following the image's own symlinks (and its top-level /bin -> usr/bin).
func (r *rootFS) resolves(t *testing.T, p string) bool {
	t.Helper()
	for range 40 {
		dir, base := path.Split(p)
		dir = path.Clean(dir)
		// Resolve directory symlinks that are part of the image.
		for _, top := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
			if r.files[top] && (dir == top || strings.HasPrefix(dir, top+"/")) {
				target, err := os.Readlink(r.hostPath(top))
				require.NoError(t, err)
				dir = path.Join("/", target, strings.TrimPrefix(dir, top))
			}
		}
		p = path.Join(dir, base)
		if _, ok := r.inline[p]; ok {
			return true
		}
		if !r.files[p] {
			return false
		}
		fi, err := os.Lstat(r.hostPath(p))
		if err != nil {
			return false
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return true
		}
		target, _ := os.Readlink(r.hostPath(p))
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(p), target)
		}
		p = target
	}
	return false
}

func TestMissingPackage(t *testing.T) {
	r := newRootFS("")
	err := r.addPackages([]string{"no-such-package-anywhere"})
	require.ErrorIs(t, err, errNotInstalled, "addPackages of a missing package")
	require.ErrorContains(t, err, "no-such-package-anywhere", "addPackages of a missing package")
}

// writeTree makes a small image directory.
func writeTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{"bin/tool": "#!/bin/sh\n", "etc/conf": "a=1\n", "etc/copy": "a=1\n", "data/big": strings.Repeat("x", 5000)} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	require.NoError(t, os.Symlink("../etc/conf", filepath.Join(dir, "bin", "conf")))
	return dir
}

// treeHash is the content hash and the metadata fingerprint of a tree.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	r, err := rootDirFS(dir)
	require.NoError(t, err)
	h, _, err := contentHash(r)
	require.NoError(t, err)
	fp, err := r.fingerprint()
	require.NoError(t, err)
	return h + "/" + fp
}

func TestContentHash(t *testing.T) {
	dir := writeTree(t)
	h1 := treeHash(t, dir)
	if h2 := treeHash(t, dir); h1 != h2 {
		t.Fatalf("hash of an unchanged tree changed: %s then %s", h1, h2)
	}
	changes := []struct {
		name string
		do   func() error
	}{
		{"content", func() error {
			return os.WriteFile(filepath.Join(dir, "data/big"), []byte(strings.Repeat("y", 5000)), 0o644)
		}},
		{"mode", func() error { return os.Chmod(filepath.Join(dir, "bin/tool"), 0o755) }},
		{"new file", func() error { return os.WriteFile(filepath.Join(dir, "etc/new"), nil, 0o644) }},
		{"link target", func() error {
			link := filepath.Join(dir, "bin", "conf")
			if err := os.Remove(link); err != nil {
				return err
			}
			return os.Symlink("../etc/copy", link)
		}},
	}
	prev := h1
	for _, c := range changes {
		require.NoError(t, c.do())
		h := treeHash(t, dir)
		ph, pf, _ := strings.Cut(prev, "/")
		nh, nf, _ := strings.Cut(h, "/")
		if nh == ph || nf == pf {
			t.Errorf("changing the %s: hash/fingerprint %s, was %s", c.name, h, prev)
		}
		prev = h
	}
}

// TestTarLayout checks the archive: sorted, parents first, root-owned,
// symlinks kept, identical files stored once as hard links.
func TestTarLayout(t *testing.T) {
	dir := writeTree(t)
	r, err := rootDirFS(dir)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, r.writeTar(&buf))
	tr := tar.NewReader(&buf)
	seen := map[string]*tar.Header{}
	prev := ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		name := strings.TrimSuffix(h.Name, "/")
		if h.Name < prev {
			t.Errorf("%s after %s: not sorted", h.Name, prev)
		}
		prev = h.Name
		if d := path.Dir(name); d != "." && seen[d] == nil {
			t.Errorf("%s before its directory", h.Name)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d", h.Name, h.Uid, h.Gid)
		}
		seen[name] = h
	}
	if h := seen["bin/conf"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "../etc/conf" {
		t.Errorf("bin/conf: %+v", h)
	}
	if h := seen["etc/copy"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "etc/conf" {
		t.Errorf("etc/copy should be a hard link to etc/conf: %+v", h)
	}
	for _, d := range []string{"tmp", "workspace", ".layerfs"} {
		if h := seen[d]; h == nil || h.Typeflag != tar.TypeDir {
			t.Errorf("%s: %+v", d, h)
		}
	}
	if h := seen[strings.TrimPrefix(supervisorPath, "/")]; h == nil || h.Typeflag != tar.TypeReg || h.Size != 0 {
		t.Errorf("supervisor mount point: %+v", h)
	}
}
