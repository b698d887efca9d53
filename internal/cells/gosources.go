package cells

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// The real-work cell, X09: what an agent does with a source tree it has
// just fetched. The base is gosrc.tar.gz, the Go standard library's
// non-test sources of the host's Go installation (GOROOT/src without cmd/,
// testdata/ and _test.go files, and only files under 16 KiB so that the
// cell runs in about a second natively: ~2,600 files, 9 MB with Go 1.26),
// packed with fixed header times and owners. The body extracts it, finds, greps, makes a git
// repository of it and commits, checks git status, copies the tree with
// cp -a and removes the copy, and runs du. Expected: go/ exactly the
// archive's files (by hash), the find count and the grep list predicted
// from the same files, and a clean one-commit repository.

// goSourcesRoot is where the sources are read on the host.
var goSourcesRoot = func() string {
	if r := os.Getenv("GOROOT"); r != "" {
		return filepath.Join(r, "src")
	}
	return "/usr/local/go/src"
}()

// goSourcesMaxSize bounds the files taken.
const goSourcesMaxSize = 16 << 10

const goSourcesBody = `git init -q && echo gosrc.tar.gz > .git/info/exclude && mkdir go && tar -xzf gosrc.tar.gz -C go
find go -type f | wc -l > .git/cell-find
grep -rl 'func init()' go | LC_ALL=C sort > .git/cell-grep
git add -A && git -c user.name=cell -c user.email=cell@example.com commit -qm 'go sources' && git status --porcelain > .git/cell-status
cp -a go go-copy && rm -rf go-copy
du -sk go > /dev/null`

// goSourcesProbe makes the cell ineligible where the sandbox lacks a tool;
// the base itself is read on the host (see goSourcesFiles).
var goSourcesProbe = needs("git", "tar", "gzip", "grep", "find", "du", "cp")

func goSourcesCell() Cell {
	return Cell{
		ID: "X09", Title: "Go sources: extract, find, grep, git add/commit/status, cp -a, rm -rf, du", Group: "extended",
		Base: Base{Name: "gosources", Write: writeGoSources}, Probe: goSourcesProbe,
		Body: goSourcesBody, Expect: goSourcesExpect,
	}
}

type goSourceFile struct {
	name string // relative to the archive root
	size int64
	hash Hash
	init bool // contains "func init()"
}

var goSources struct {
	once  sync.Once
	files []goSourceFile
	tgz   []byte
	err   error
}

// goSourcesFiles reads the sources once and packs them.
func goSourcesFiles() ([]goSourceFile, []byte, error) {
	goSources.once.Do(func() {
		goSources.files, goSources.tgz, goSources.err = packGoSources(goSourcesRoot)
	})
	return goSources.files, goSources.tgz, goSources.err
}

func packGoSources(root string) ([]goSourceFile, []byte, error) {
	var names []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel == "cmd" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			if fi, err := d.Info(); err == nil && fi.Size() < goSourcesMaxSize {
				names = append(names, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("go sources at %s: %w", root, err)
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("go sources at %s: no files", root)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	mtime := time.Unix(repoEpoch, 0).UTC()
	dirs := map[string]bool{}
	files := make([]goSourceFile, 0, len(names))
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return nil, nil, err
		}
		for d := filepath.ToSlash(filepath.Dir(name)); d != "." && !dirs[d]; d = filepath.ToSlash(filepath.Dir(d)) {
			dirs[d] = true
		}
		h, _, err := HashOf(bytes.NewReader(data))
		if err != nil {
			return nil, nil, err
		}
		files = append(files, goSourceFile{name: name, size: int64(len(data)), hash: h, init: bytes.Contains(data, []byte("func init()"))})
	}
	// Directories first (sorted, so parents before children), then files.
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX}); err != nil {
			return nil, nil, err
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f.name))
		if err != nil {
			return nil, nil, err
		}
		if h, _, _ := HashOf(bytes.NewReader(data)); h != f.hash {
			return nil, nil, fmt.Errorf("go sources: %s changed while packing", f.name)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Size: f.size, Mode: 0o644, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX}); err != nil {
			return nil, nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, nil, err
	}
	return files, buf.Bytes(), nil
}

func writeGoSources(_ context.Context, dir string) error {
	_, tgz, err := goSourcesFiles()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "gosrc.tar.gz"), tgz, 0o644)
}

func goSourcesExpect() Expectation {
	var b Builder
	files, tgz, err := goSourcesFiles()
	if err != nil {
		// No file can match; the verifier says why.
		b.File("gosrc.tar.gz", Text("go sources unavailable: "+err.Error()))
		return b.Build()
	}
	b.File("gosrc.tar.gz", Bytes(tgz))
	var grep strings.Builder
	for _, f := range files {
		b.File("go/"+f.name, Hashed(f.size, f.hash, "go/"+f.name))
		if f.init {
			grep.WriteString("go/" + f.name + "\n")
		}
	}
	b.Opaque(".git")
	b.File(".git/cell-find", Text(fmt.Sprintf("%d\n", len(files))))
	b.File(".git/cell-grep", Text(grep.String()))
	b.File(".git/cell-status", Text(""))
	b.Command(Command{Path: ".git", Name: "git fsck", Body: gitCheck + ` fsck --no-progress --no-dangling && echo ok`, Stdout: "ok"})
	b.Command(Command{Path: ".git", Name: "git rev-list --count HEAD", Body: gitCheck + ` rev-list --count HEAD`, Stdout: "1"})
	b.Command(Command{Path: ".", Name: "git status --porcelain | wc -l", Body: gitCheck + ` status --porcelain | wc -l`, Stdout: "0"})
	return b.Build()
}
