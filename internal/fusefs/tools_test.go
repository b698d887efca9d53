package fusefs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"layerfs.dev/layerfs/internal/overlay/overlaytest"
)

// toolChecks are the real-tools differential checks: each is a shell body
// run in a workspace and in a plain directory (both holding the same lower
// tree: a Go source tree as a tarball, and the tree unpacked), whose output
// must be the same on both (with the directory's own path written as
// $ROOT), after which the two trees must match by a content-and-metadata
// walk (types, modes, sizes, contents, symlink targets, xattrs, hard
// links). $SRC is the tarball.
var toolChecks = []struct{ name, body string }{
	{"tar-x", `mkdir untar && tar -C untar -xf "$SRC" && tar -C untar -cf - . | tar -tvf - --numeric-owner | awk '{print $1, $3, $6}' | sort | md5sum`},
	{"git", `
export GIT_AUTHOR_DATE=@1700000000 GIT_COMMITTER_DATE=@1700000000 GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
git init -q -b main repo && cd repo
git config user.name t && git config user.email t@example.com
cp -a ../tree/. . && git add -A && git commit -qm one
echo change >> README.lfs && git add README.lfs && git commit -qm two
git branch side && git checkout -q side && mkdir -p newdir && echo n > newdir/f && git add -A && git commit -qm three
git checkout -q main && git status --porcelain && git log --format='%H %s' --all | sort
git gc -q && git repack -adq && git prune && git fsck --no-progress --strict 2>&1
git count-objects -v | grep -v size
git checkout -q side && ls newdir && git checkout -q main
rm -rf .git`},
	{"cp-a", `cp -a tree copy && cp -a tree/README.lfs copy/readme2 && ls -l --time-style=+ copy | awk '{print $1, $2, $5, $NF}'`},
	{"rm-rf", `cp -a tree gone && rm -rf gone && test ! -e gone && rm -rf tree/net/http && ls tree/net | head`},
	{"find", `find tree ! -type d -printf '%P %y %m %s %n\n' | sort | md5sum && find tree -type d -printf '%P %m\n' | sort | md5sum && find tree -type f -name '*.go' | wc -l && find tree -type d | wc -l && find tree -empty | sort`},
	{"du", `find tree -type f -print0 | du -cb --files0-from=- | tail -1 && du -s --inodes tree | cut -f1`},
	{"rsync-a", `rsync -a tree/ synced/ && rsync -ai --checksum tree/ synced/ | wc -l && echo extra >> tree/README.lfs && rsync -ai tree/ synced/ | cut -c1-2 | sort | uniq -c`},
	{"python-venv", `python3 -m venv --without-pip venv && venv/bin/python -c 'import sys; print(sys.prefix != sys.base_prefix)' && rm -rf venv`},
	{"sqlite-wal", `
sqlite3 db.sqlite 'PRAGMA journal_mode=WAL; CREATE TABLE t(x INTEGER, y TEXT);' >/dev/null
for i in 1 2 3; do sqlite3 db.sqlite "INSERT INTO t SELECT value, hex(randomblob(8)) FROM generate_series(1, 2000); PRAGMA wal_checkpoint(PASSIVE);" >/dev/null 2>&1 || sqlite3 db.sqlite "WITH RECURSIVE s(v) AS (SELECT 1 UNION ALL SELECT v+1 FROM s WHERE v < 2000) INSERT INTO t SELECT v, hex(randomblob(8)) FROM s;"; done
sqlite3 db.sqlite 'PRAGMA integrity_check; SELECT count(*), sum(x) FROM t; PRAGMA journal_mode;'
rm -f db.sqlite*`},
	{"make", `
mkdir mk && cd mk
printf 'all: c\nc: a b\n\tcat a b > c\na:\n\techo a > a\nb: a\n\t(cat a; echo b) > b\n' > Makefile
make -s && cat c && make -s && echo nothing-to-do && touch -d '+1 hour' a && make && cat c`},
	{"go-build", `
mkdir gomod && cd gomod
printf 'module example.com/m\n\ngo 1.21\n' > go.mod
printf 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("built") }\n' > main.go
GOFLAGS=-mod=mod GOTOOLCHAIN=local go build -trimpath -o m . && ./m && rm m`},
	{"mkfifo-mknod", `
mkfifo fifo && ls -l fifo | cut -c1
mkdir -m 777 shared
setpriv --reuid=65534 --regid=65534 --clear-groups mknod shared/dev c 1 3 2>&1 | sed 's/.*: //'
setpriv --reuid=65534 --regid=65534 --clear-groups mkfifo shared/fifo && ls -l shared | cut -c1 | sort`},
}

// TestRealTools runs every tool check in a workspace on both data paths and
// in a plain directory, compares outputs and trees, then commits the
// workspace and compares a fresh workspace on the commit.
func TestRealTools(t *testing.T) { onBothPaths(t, testRealTools) }

func testRealTools(t *testing.T, path string) {
	for _, tool := range []string{"tar", "git", "rsync", "sqlite3", "python3", "make", "go", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/test-setup installs the packages)", tool)
		}
	}
	src := filepath.Join(t.TempDir(), "src.tar")
	goSrc := filepath.Join(os.Getenv("GOROOT"), "src")
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		goSrc = filepath.Join(strings.TrimSpace(string(out)), "src")
	}
	sh(t, "/", "tar -C "+goSrc+" -cf "+src+" net encoding archive")
	fill := func(t testing.TB, dir string) {
		sh(t, dir, "mkdir tree && tar -C tree -xf "+src+" && echo readme > tree/README.lfs && ln -s README.lfs tree/link && ln tree/README.lfs tree/hard")
		if onOverlay(path) {
			// Kernel overlayfs (index=off) breaks lower hard links on
			// copy-up (see TestOverlayLowerHardLink).
			sh(t, dir, "rm tree/hard && cp tree/README.lfs tree/hard")
		}
	}
	e, m, mnt, ref := differential(t, fill, path)
	for _, c := range toolChecks {
		t.Run(c.name, func(t *testing.T) {
			run := func(dir string) string {
				body := "export SRC=" + src + " ROOT=" + dir + "\n" + c.body
				return strings.ReplaceAll(sh(t, dir, body), dir, "$ROOT")
			}
			want, got := run(ref), run(mnt)
			if got != want {
				t.Errorf("%s: output in the workspace differs:\n--- workspace\n%s\n--- plain directory\n%s", c.name, got, want)
			}
			if d := overlaytest.Compare(ref, mnt); len(d) > 0 {
				if len(d) > 20 {
					d = d[:20]
				}
				t.Errorf("%s: the trees differ after it:\n%s", c.name, strings.Join(d, "\n"))
			}
		})
	}
	t.Logf("%d tool checks on data path %s", len(toolChecks), m.DataPath())
	root := e.Commit(m)
	_, mnt2 := e.mount(root)
	overlaytest.RequireSame(t, ref, mnt2, "fresh workspace on the commit")
}
