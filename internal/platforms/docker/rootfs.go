package docker

import (
	"archive/tar"
	"bufio"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"github.com/zeebo/blake3"
)

// DefaultPackages are the Debian packages of this host whose files make the
// sandbox image: what the twelve cells run (bash, coreutils, findutils, git,
// ...), python3 for the benches, and the usual tools an agent expects.
// Shared libraries they need are found from their ELF headers, so library
// packages need not be listed.
var DefaultPackages = []string{
	"bash", "dash", "coreutils", "findutils", "grep", "sed", "mawk", "diffutils",
	"git", "tar", "gzip", "ca-certificates", "procps", "util-linux", "hostname",
	"python3-minimal", "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib",
}

// defaultExtraPaths are host files outside any listed package's file list:
// alternatives links and files generated at install time.
var defaultExtraPaths = []string{
	"/usr/bin/awk",                       // -> /etc/alternatives/awk -> mawk
	"/usr/bin/sh",                        // -> dash (the merged-/usr twin of /bin/sh)
	"/etc/ssl/certs/ca-certificates.crt", // made by update-ca-certificates
	"/etc/os-release",
}

// excludedPrefixes are never copied: documentation and locales are large
// and nothing in a sandbox reads them.
var excludedPrefixes = []string{
	"/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/locale/",
	"/usr/share/lintian/", "/usr/share/bash-completion/", "/usr/share/zsh/",
	"/usr/share/fish/", "/usr/share/gitweb/", "/usr/share/perl5/",
	"/usr/share/doc-base/", "/usr/share/menu/",
	// git's servers and mailers: a sandbox is a client. (git-remote-http
	// stays, for clones when a workspace is granted the network.)
	"/usr/bin/scalar/", "/usr/bin/git-shell/", "/usr/lib/git-core/scalar/",
	"/usr/lib/git-core/git-shell/", "/usr/lib/git-core/git-daemon/",
	"/usr/lib/git-core/git-http-backend/", "/usr/lib/git-core/git-http-push/",
	"/usr/lib/git-core/git-imap-send/", "/usr/lib/git-core/git-http-fetch/",
}

// rootFS is a set of host files to be laid out as an image's root file
// system at the same paths, plus synthesized files.
type rootFS struct {
	host    string            // prefix for reading host paths; "" is "/"
	files   map[string]bool   // canonical absolute paths of host files and symlinks
	dirs    map[string]bool   // directories to create (mode copied from host when present)
	inline  map[string][]byte // synthesized regular files
	libDirs []string
}

func newRootFS(host string) *rootFS {
	r := &rootFS{host: host, files: map[string]bool{}, dirs: map[string]bool{}, inline: map[string][]byte{}}
	if triple := multiarch[runtime.GOARCH]; triple != "" {
		r.libDirs = append(r.libDirs, "/lib/"+triple, "/usr/lib/"+triple)
	}
	r.libDirs = append(r.libDirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	return r
}

// multiarch is Debian's library directory triple per GOARCH.
var multiarch = map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "riscv64": "riscv64-linux-gnu"}

// addTopLinks adds the top-level links of a merged-/usr host
// (/bin -> usr/bin, /lib64 -> usr/lib64, ...).
func (r *rootFS) addTopLinks() {
	for _, top := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if fi, err := os.Lstat(r.hostPath(top)); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			r.files[top] = true
		}
	}
}

// hostPath is where absolute path p of the image is read from on the host.
func (r *rootFS) hostPath(p string) string { return r.host + p }

// canonical resolves the directories of p through host symlinks (so that
// /bin/bash becomes /usr/bin/bash on a merged-/usr host), keeping the last
// element as it is. The result never leaves r.host.
func (r *rootFS) canonical(p string) (string, error) {
	dir, base := path.Split(path.Clean(p))
	real, err := filepath.EvalSymlinks(r.hostPath(path.Clean(dir)))
	if err != nil {
		return "", err
	}
	rel := strings.TrimPrefix(real, r.host)
	if r.host != "" && !strings.HasPrefix(real, r.host) {
		return "", fmt.Errorf("%s leaves the host root", p)
	}
	if rel == "" {
		rel = "/"
	}
	return path.Join(rel, base), nil
}

// addPackages adds the files of installed Debian packages, as dpkg lists
// them in /var/lib/dpkg/info.
func (r *rootFS) addPackages(pkgs []string) error {
	var errs []error
	for _, pkg := range pkgs {
		list, err := r.packageList(pkg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range list {
			if err := r.add(p, false); err != nil {
				errs = append(errs, fmt.Errorf("package %s: %w", pkg, err))
			}
		}
	}
	return errors.Join(errs...)
}

var errNotInstalled = errors.New("package not installed on this host")

func (r *rootFS) packageList(pkg string) ([]string, error) {
	info := r.hostPath("/var/lib/dpkg/info/")
	var f *os.File
	var err error
	for _, name := range []string{pkg + ".list", pkg + ":" + debArch() + ".list"} {
		if f, err = os.Open(info + name); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, errNotInstalled)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p := sc.Text(); strings.HasPrefix(p, "/") && p != "/." {
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

func debArch() string {
	if runtime.GOARCH == "386" {
		return "i386"
	}
	return runtime.GOARCH
}

func excluded(p string) bool {
	for _, x := range excludedPrefixes {
		if strings.HasPrefix(p+"/", x) {
			return true
		}
	}
	return false
}

// add adds host path p: a regular file or a symlink (and, for a symlink,
// what it points to). Directories are only created as parents. A missing
// path is skipped unless required: package lists name conffiles that an
// admin may have removed.
func (r *rootFS) add(p string, required bool) error {
	for range 40 { // a symlink chain longer than the kernel's limit is a loop
		if excluded(p) {
			return nil
		}
		c, err := r.canonical(p)
		if err != nil {
			if !required && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if r.files[c] {
			return nil
		}
		fi, err := os.Lstat(r.hostPath(c))
		if err != nil {
			if !required && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		switch {
		case fi.IsDir():
			r.dirs[c] = true
			return nil
		case fi.Mode()&fs.ModeSymlink != 0:
			r.files[c] = true
			target, err := os.Readlink(r.hostPath(c))
			if err != nil {
				return err
			}
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(c), target)
			}
			p, required = path.Clean(target), false
		case fi.Mode().IsRegular():
			r.files[c] = true
			return nil
		default:
			return nil // devices, sockets, fifos: never in a runtime image
		}
	}
	return fmt.Errorf("%s: too many levels of symbolic links", p)
}

// addELFDeps adds the program interpreter and the shared libraries that
// every ELF file in the set needs, transitively.
func (r *rootFS) addELFDeps() error {
	done := map[string]bool{}
	for {
		var todo []string
		for p := range r.files {
			if !done[p] {
				todo = append(todo, p)
			}
		}
		if len(todo) == 0 {
			return nil
		}
		sort.Strings(todo)
		var errs []error
		for _, p := range todo {
			done[p] = true
			if err := r.addELF(p); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
}

// addELF adds what the ELF file at image path p needs; other files are
// ignored.
func (r *rootFS) addELF(p string) error {
	fi, err := os.Lstat(r.hostPath(p))
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	need, interp, runpath, err := elfNeeds(r.hostPath(p))
	if err != nil || (len(need) == 0 && interp == "") {
		return nil // not ELF, or static
	}
	if interp != "" {
		if err := r.add(interp, true); err != nil {
			return fmt.Errorf("%s: interpreter: %w", p, err)
		}
	}
	dirs := make([]string, 0, len(runpath)+len(r.libDirs))
	for _, d := range runpath {
		dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", path.Dir(p)))
	}
	dirs = append(dirs, r.libDirs...)
	var errs []error
	for _, lib := range need {
		found := false
		for _, d := range dirs {
			cand := path.Join(d, lib)
			if _, err := os.Stat(r.hostPath(cand)); err == nil {
				if err := r.add(cand, true); err != nil {
					errs = append(errs, err)
				}
				found = true
				break
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("%s needs %s: not found in %v", p, lib, dirs))
		}
	}
	return errors.Join(errs...)
}

// elfNeeds reads an ELF file's DT_NEEDED entries, its interpreter and its
// RUNPATH/RPATH directories.
func elfNeeds(file string) (need []string, interp string, runpath []string, err error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, "", nil, err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b, err := io.ReadAll(prog.Open())
			if err != nil {
				return nil, "", nil, err
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	need, _ = f.ImportedLibraries()
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			runpath = append(runpath, filepath.SplitList(v)...)
		}
	}
	return need, interp, runpath, nil
}

// writeTar writes the root file system as a tar stream in a fixed order
// with fixed ownership, so equal host files give equal bytes (and an equal
// content hash). Hard links between listed files stay hard links.
func (r *rootFS) writeTar(w io.Writer) error {
	entries := map[string]bool{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			entries[d+"/"] = true
		}
	}
	for p := range r.files {
		entries[p] = true
		addParents(p)
	}
	for p := range r.inline {
		entries[p] = true
		addParents(p)
	}
	for d := range r.dirs {
		entries[d+"/"] = true
		addParents(d + "/")
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)

	same, err := r.duplicates()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	links := map[inode]string{}
	for _, n := range names {
		name := strings.TrimPrefix(n, "/")
		if strings.HasSuffix(n, "/") {
			mode := int64(0o755)
			if fi, err := os.Stat(r.hostPath(n)); err == nil && fi.IsDir() {
				mode = int64(fi.Mode().Perm())
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Format: tar.FormatPAX}); err != nil {
				return err
			}
			continue
		}
		if b, ok := r.inline[n]; ok {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), Format: tar.FormatPAX}); err != nil {
				return err
			}
			if _, err := tw.Write(b); err != nil {
				return err
			}
			continue
		}
		hp := r.hostPath(n)
		fi, err := os.Lstat(hp)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime().Truncate(1e9), Format: tar.FormatPAX}
		if fi.Mode()&fs.ModeSetuid != 0 {
			h.Mode |= 0o4000
		}
		if fi.Mode()&fs.ModeSetgid != 0 {
			h.Mode |= 0o2000
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(hp)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, target, 0o777
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		if first, ok := same[n]; ok {
			h.Typeflag, h.Linkname = tar.TypeLink, strings.TrimPrefix(first, "/")
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			key := inode{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
				continue
			}
			links[key] = name
		}
		h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if err := copyFile(tw, hp, fi.Size()); err != nil {
			return err
		}
	}
	return tw.Close()
}

// copyFile copies exactly size bytes of file to w, so a file that changes
// size under us is an error rather than a corrupt archive.
func copyFile(w io.Writer, file string, size int64) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, size))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if n != size {
		return fmt.Errorf("%s: changed size while being archived", file)
	}
	return nil
}

// duplicates maps each regular host file whose content and mode equal an
// earlier one's (in path order) to that earlier file, so the archive stores
// it once, as a hard link. Debian ships git and scalar twice, for example.
// Only files of equal size are read.
func (r *rootFS) duplicates() (map[string]string, error) {
	type key struct {
		size int64
		mode fs.FileMode
	}
	bySize := map[key][]string{}
	for p := range r.files {
		fi, err := os.Lstat(r.hostPath(p))
		if err != nil {
			return nil, err
		}
		if fi.Mode().IsRegular() && fi.Size() > 0 {
			k := key{fi.Size(), fi.Mode()}
			bySize[k] = append(bySize[k], p)
		}
	}
	same := map[string]string{}
	for _, ps := range bySize {
		if len(ps) < 2 {
			continue
		}
		sort.Strings(ps)
		first := map[[32]byte]string{}
		for _, p := range ps {
			sum, err := fileHash(r.hostPath(p))
			if err != nil {
				return nil, err
			}
			if f, ok := first[sum]; ok {
				same[p] = f
			} else {
				first[sum] = p
			}
		}
	}
	return same, nil
}

func fileHash(file string) ([32]byte, error) {
	var sum [32]byte
	f, err := os.Open(file)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := blake3.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// fingerprint hashes the metadata of every entry (see ensureImage): names,
// modes; for files also sizes, modification times, device and inode
// numbers and link targets; and the synthesized files' contents.
func (r *rootFS) fingerprint() (string, error) {
	names := make([]string, 0, len(r.files)+len(r.dirs)+len(r.inline))
	for p := range r.files {
		names = append(names, "f"+p)
	}
	for p := range r.dirs {
		names = append(names, "d"+p)
	}
	for p := range r.inline {
		names = append(names, "i"+p)
	}
	sort.Strings(names)
	h := blake3.New()
	for _, n := range names {
		kind, p := n[0], n[1:]
		fmt.Fprintf(h, "%c %q", kind, p)
		switch kind {
		case 'i':
			fmt.Fprintf(h, " %x", blake3.Sum256(r.inline[p]))
		case 'd':
			// Only a directory's mode goes into the archive; its time
			// changes whenever an entry does (/tmp: all the time).
			if fi, err := os.Stat(r.hostPath(p)); err == nil {
				fmt.Fprintf(h, " %o", fi.Mode())
			}
		case 'f':
			fi, err := os.Lstat(r.hostPath(p))
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, " %o %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				fmt.Fprintf(h, " %d %d", st.Dev, st.Ino)
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				target, err := os.Readlink(r.hostPath(p))
				if err != nil {
					return "", err
				}
				fmt.Fprintf(h, " -> %q", target)
			}
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}
