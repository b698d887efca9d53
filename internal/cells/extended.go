package cells

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Extended returns realistic agent workloads beyond the twelve: git on a
// real repository, archive extraction, an incremental go build, log appends,
// create/delete churn, and real work on a fetched source tree (X09). Each runs in well under two seconds natively
// (see BenchmarkNative). Results a body prints are written to files (under
// .git for the git cells, so that git itself does not see them) and checked.
//
// What "exactly" means for each:
//
//   - X01-X04 (base: the repository): the work tree outside .git is exactly
//     the branch's tree (main; feature for X04), bytes and execute bits,
//     with X01's edits (one file appended to, one removed, NOTES.md added);
//     .git is opaque and checked in the sandbox: git fsck, the branch name,
//     the commit count, and git status (clean, or X01's three changes).
//     The output file under .git must hold what the generator predicts.
//   - X05: src.tar.gz unchanged, and out/ exactly the archive's tree:
//     directories, file bytes, execute bits and the symlink's text.
//   - X06: the module's sources (with the edit), bin/app executable and
//     out.txt "hello 6!!!"; .cache is opaque; ./bin/app run in the sandbox
//     prints the same.
//   - X07: logs/app.log is the base's 20,000 lines and the 2,000 appended.
//   - X09 (gosources.go): go/ exactly the archive's files, the find count
//     and grep list predicted from them, a clean one-commit repository.
//   - X08: keep.txt, cache/c1..c100 with their new contents (c101..c200
//     gone), work/f0..f29 with the last value renamed over each, and no
//     scratch files.
func Extended() []Cell {
	return []Cell{
		{
			ID: "X01", Title: "edit, then git status", Group: "extended", Base: repoBase(), Probe: needs("git"),
			Body:   `printf '// edited\n' >> src/pkg03/file07.go; rm docs/guide02.md; printf 'notes\n' > NOTES.md; git status --porcelain > .git/cell-status`,
			Expect: statusExpect,
		},
		{
			ID: "X02", Title: "git log of 36 commits", Group: "extended", Base: repoBase(), Probe: needs("git"),
			Body:   `git log -p --stat > /dev/null; git log --format='%at %s' > .git/cell-log`,
			Expect: repoExpect("main", ".git/cell-log", logOutput),
		},
		{
			ID: "X03", Title: "git grep the work tree", Group: "extended", Base: repoBase(), Probe: needs("git"),
			Body:   `git grep -n -F 'TODO(cell)' > .git/cell-grep`,
			Expect: repoExpect("main", ".git/cell-grep", func() string { return grepOutput(repoTree("main")) }),
		},
		{
			ID: "X04", Title: "git checkout another branch", Group: "extended", Base: repoBase(), Probe: needs("git"),
			Body:   `git checkout -q feature`,
			Expect: checkoutExpect,
		},
		{
			ID: "X05", Title: "extract a 430-file tar.gz", Group: "extended", Base: Base{Name: "tarball", Write: writeTarball}, Probe: needs("tar", "gzip"),
			Body:   `mkdir out && tar -xzf src.tar.gz -C out`,
			Expect: tarExpect,
		},
		{
			ID: "X06", Title: "edit, then go build", Group: "extended", Base: Base{Name: "gomodule", Write: writeGoModule}, Probe: goProbe,
			Body:   goEnv + `; sed -i 's/Bangs = 2/Bangs = 3/' greet/greet.go && "$GO" build -o bin/app . && ./bin/app > out.txt`,
			Expect: goExpect,
		},
		{
			ID: "X07", Title: "append 2,000 lines to a log", Group: "extended", Base: Base{Name: "log", Write: writeLog}, Probe: "",
			Body:   `for i in $(seq 1 2000); do echo "append $i" >> logs/app.log; done`,
			Expect: logExpect,
		},
		{
			ID: "X08", Title: "create/delete churn over a base", Group: "extended", Base: Base{Name: "churn", Write: writeChurn},
			Body:   `rm -rf cache && mkdir cache; for i in $(seq 1 100); do echo new$i > cache/c$i; done; mkdir -p work; for i in $(seq 1 300); do echo $i > work/t.tmp && mv work/t.tmp work/f$((i % 30)); done; for i in $(seq 1 300); do echo $i > work/x$i; done; rm work/x*`,
			Expect: churnExpect,
		},
		goSourcesCell(),
	}
}

// repoChecks are the in-sandbox checks every git cell ends with.
func repoChecks(b *Builder, branch string) {
	b.Opaque(".git")
	b.Command(Command{Path: ".git", Name: "git fsck", Body: gitCheck + ` fsck --no-progress --no-dangling && echo ok`, Stdout: "ok"})
	b.Command(Command{Path: ".git", Name: "git rev-parse --abbrev-ref HEAD", Body: gitCheck + ` rev-parse --abbrev-ref HEAD`, Stdout: branch})
	b.Command(Command{Path: ".git", Name: "git rev-list --count HEAD", Body: gitCheck + ` rev-list --count HEAD`, Stdout: strconv.Itoa(commitCount(branch))})
}

func commitCount(branch string) int {
	if branch == "main" {
		return repoMainCommits
	}
	return repoFeatureFrom + repoFeatureCommits
}

// repoExpect: the work tree is branch's, unchanged, and out holds want.
func repoExpect(branch, out string, want func() string) func() Expectation {
	return func() Expectation {
		var b Builder
		expectTree(&b, repoTree(branch))
		b.File(out, Text(want()))
		repoChecks(&b, branch)
		b.Command(Command{Path: ".", Name: "git status --porcelain | wc -l", Body: gitCheck + ` status --porcelain | wc -l`, Stdout: "0"})
		return b.Build()
	}
}

func statusExpect() Expectation {
	tree := repoTree("main")
	edited := "src/pkg03/file07.go"
	f := tree[edited]
	f.data = append(append([]byte(nil), f.data...), "// edited\n"...)
	tree[edited] = f
	delete(tree, "docs/guide02.md")
	var b Builder
	expectTree(&b, tree)
	b.File("NOTES.md", Text("notes\n"))
	status := " D docs/guide02.md\n M src/pkg03/file07.go\n?? NOTES.md\n"
	b.File(".git/cell-status", Text(status))
	b.Absent("docs/guide02.md")
	repoChecks(&b, "main")
	// The verifier sees the same status the body did.
	b.Command(Command{Path: ".", Name: "git status --porcelain", Body: gitCheck + ` status --porcelain | tr '\n' '|'`, Stdout: strings.ReplaceAll(status, "\n", "|")})
	return b.Build()
}

func checkoutExpect() Expectation {
	var b Builder
	expectTree(&b, repoTree("feature"))
	for p := range repoTree("main") {
		if _, ok := repoTree("feature")[p]; !ok {
			b.Absent(p)
		}
	}
	repoChecks(&b, "feature")
	b.Command(Command{Path: ".", Name: "git status --porcelain | wc -l", Body: gitCheck + ` status --porcelain | wc -l`, Stdout: "0"})
	return b.Build()
}

// The tarball: a release-like source tree of 430 files, one symlink and an
// executable, as src.tar.gz. Header times, owners and modes are fixed so the
// archive's bytes depend only on this code and compress/gzip.
const tarRoot = "project-1.0"

type tarEntry struct {
	name   string
	data   []byte
	exec   bool
	link   string
	isDir  bool
	isLink bool
}

func tarEntries() []tarEntry {
	es := []tarEntry{{name: tarRoot, isDir: true}}
	es = append(es, tarEntry{name: tarRoot + "/README.md", data: []byte("# project 1.0\n\nGenerated for the LayerFS tar cell.\n")})
	es = append(es, tarEntry{name: tarRoot + "/bin", isDir: true})
	es = append(es, tarEntry{name: tarRoot + "/bin/tool", data: scriptFile(42), exec: true})
	es = append(es, tarEntry{name: tarRoot + "/docs", isDir: true})
	es = append(es, tarEntry{name: tarRoot + "/docs/README", isLink: true, link: "../README.md"})
	for m := 1; m <= 20; m++ {
		dir := fmt.Sprintf("%s/lib/mod%02d", tarRoot, m)
		if m == 1 {
			es = append(es, tarEntry{name: tarRoot + "/lib", isDir: true})
		}
		es = append(es, tarEntry{name: dir, isDir: true})
		for f := 1; f <= 21; f++ {
			var b bytes.Buffer
			for l := 1; l <= 30; l++ {
				fmt.Fprintf(&b, "export function m%02d_f%02d_%02d(x) { return x * %d + %d; }\n", m, f, l, m*f, l)
			}
			es = append(es, tarEntry{name: fmt.Sprintf("%s/file%02d.js", dir, f), data: b.Bytes()})
		}
	}
	es = append(es, tarEntry{name: tarRoot + "/package.json", data: []byte("{\"name\": \"project\", \"version\": \"1.0.0\"}\n")})
	return es
}

func tarball() ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	mtime := time.Unix(repoEpoch, 0).UTC()
	for _, e := range tarEntries() {
		h := &tar.Header{Name: e.name, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		switch {
		case e.isDir:
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, e.name+"/", 0o755
		case e.isLink:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.link, 0o777
		default:
			h.Typeflag, h.Size, h.Mode = tar.TypeReg, int64(len(e.data)), 0o644
			if e.exec {
				h.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeTarball(_ context.Context, dir string) error {
	b, err := tarball()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "src.tar.gz"), b, 0o644)
}

func tarExpect() Expectation {
	var b Builder
	if tgz, err := tarball(); err == nil {
		b.File("src.tar.gz", Bytes(tgz))
	} else {
		// Cannot happen with an in-memory writer; if it does, no file can
		// match, and the verifier says so.
		b.File("src.tar.gz", Text("unbuildable archive: "+err.Error()))
	}
	for _, e := range tarEntries() {
		p := "out/" + e.name
		switch {
		case e.isDir:
			b.Dir(p)
		case e.isLink:
			b.Symlink(p, e.link)
		default:
			b.Executable(p, Bytes(e.data), e.exec)
		}
	}
	return b.Build()
}

// The Go module: a warm build cache in .cache/go-build (built with the host's
// go when the base is written, which takes tens of seconds once) so that the
// body's build compiles only the edited package and main and links. The
// sandbox sees /usr/local/go when its root is the host's /usr; where go is
// not visible the probe makes the cell ineligible.
const goEnv = `export GOCACHE="$PWD/.cache/go-build" GOPATH=/tmp/gopath GOTOOLCHAIN=local CGO_ENABLED=0 GOENV=off GOPROXY=off GOFLAGS=-buildvcs=false; GO=$(command -v go || echo /usr/local/go/bin/go)`

const goProbe = `command -v go >/dev/null || test -x /usr/local/go/bin/go || { echo "go is not visible in the sandbox"; exit 1; }`

func goModule() map[string]string {
	return map[string]string{
		"go.mod":  "module cell.example/app\n\ngo 1.22\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"cell.example/app/greet\"\n\t\"cell.example/app/tally\"\n)\n\nfunc main() {\n\tfmt.Println(greet.Hello(tally.Sum(1, 2, 3)))\n}\n",
		"greet/greet.go": "// Package greet says hello.\npackage greet\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\n// Bangs is how excited the greeting is.\nconst Bangs = 2\n\n" +
			"// Hello greets n.\nfunc Hello(n int) string { return fmt.Sprintf(\"hello %d%s\", n, strings.Repeat(\"!\", Bangs)) }\n",
		"tally/tally.go": "// Package tally adds numbers.\npackage tally\n\n// Sum adds xs.\nfunc Sum(xs ...int) int {\n\tt := 0\n\tfor _, x := range xs {\n\t\tt += x\n\t}\n\treturn t\n}\n",
	}
}

func writeGoModule(ctx context.Context, dir string) error {
	for name, data := range goModule() {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			return err
		}
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return fmt.Errorf("%w: bash: %w", ErrUnavailable, err)
	}
	// Warm the cache with the same environment the body uses, then remove
	// what the build left besides the cache.
	warm := goEnv + `; test -x "$GO" || { echo "no go toolchain on this host"; exit 3; }; "$GO" build -o bin/app . && rm -rf bin`
	cmd := exec.CommandContext(ctx, "bash", "-c", warm)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/nonexistent"}
	if out, err := cmd.CombinedOutput(); err != nil {
		if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 3 {
			return fmt.Errorf("%w: %s", ErrUnavailable, bytes.TrimSpace(out))
		}
		return fmt.Errorf("warm go build cache: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

func goExpect() Expectation {
	var b Builder
	for name, data := range goModule() {
		if name == "greet/greet.go" {
			data = strings.Replace(data, "Bangs = 2", "Bangs = 3", 1)
		}
		b.File(name, Text(data))
	}
	b.Executable("bin/app", AnyContent(), true)
	b.File("out.txt", Text("hello 6!!!\n"))
	b.Opaque(".cache")
	b.Command(Command{Path: "bin/app", Body: "./bin/app", Stdout: "hello 6!!!"})
	return b.Build()
}

// The log: 20,000 lines (about 1 MiB) that the body appends to, one open
// per line, as a chatty service or agent does; the first open copies the
// committed file up.
func logBase() []byte {
	var b bytes.Buffer
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&b, "2026-01-01T00:%02d:%02dZ INFO request %d served in %d us\n", i/60%60, i%60, i, 100+i%900)
	}
	return b.Bytes()
}

func writeLog(_ context.Context, dir string) error {
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "logs", "app.log"), logBase(), 0o644)
}

func logExpect() Expectation {
	b := bytes.NewBuffer(logBase())
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(b, "append %d\n", i)
	}
	var e Builder
	return e.File("logs/app.log", Bytes(b.Bytes())).Build()
}

// Churn: a committed cache/ of 200 files is removed and partly recreated
// (whiteouts, then new files under the same names), a file is replaced 300
// times by rename, and 300 scratch files are created and removed.
func writeChurn(_ context.Context, dir string) error {
	if err := os.Mkdir(filepath.Join(dir, "cache"), 0o755); err != nil {
		return err
	}
	for i := 1; i <= 200; i++ {
		if err := os.WriteFile(filepath.Join(dir, "cache", "c"+strconv.Itoa(i)), fmt.Appendf(nil, "base %d\n", i), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("kept\n"), 0o644)
}

func churnExpect() Expectation {
	var b Builder
	b.File("keep.txt", Text("kept\n"))
	for i := 1; i <= 100; i++ {
		b.File("cache/c"+strconv.Itoa(i), Text(fmt.Sprintf("new%d\n", i)))
	}
	for i := 101; i <= 200; i++ {
		b.Absent("cache/c" + strconv.Itoa(i))
	}
	for k := 0; k < 30; k++ {
		last := 270 + k
		if k == 0 {
			last = 300
		}
		b.File("work/f"+strconv.Itoa(k), Text(strconv.Itoa(last)+"\n"))
	}
	b.Absent("work/t.tmp")
	return b.Build()
}
