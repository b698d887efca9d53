package cells

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The bodies of CELLS.md, verbatim; a cell that extends another joins the
// two with "; ".
const (
	bodyCreate  = `for i in $(seq 1 1000); do echo $i > f$i; done`
	bodyStat    = `for i in $(seq 1 1000); do stat f$i; done`
	bodyTree    = `for a in $(seq 1 10); do for b in $(seq 1 10); do mkdir -p d$a/d$b; for f in $(seq 1 10); do touch d$a/d$b/f$f; done; done; done`
	bodyWrite   = `dd if=/dev/zero of=big bs=1M count=64 status=none`
	bodyGit     = `git init -q; for i in $(seq 1 100); do echo $i > f$i; done; git add -A; git -c user.name=cell -c user.email=cell@example.invalid commit -qm init`
	bodyReadBig = `cat big > /dev/null`
	bodyCopyBig = `cp big big2`
)

// Twelve returns C01..C12 as CELLS.md specifies them, in order.
//
// What "exactly" means for each (the workspace root, after the run):
//
//   - C01, C02: the regular files f1..f1000, fN holding "N\n"; nothing else.
//   - C03: nothing at all (the base is empty and rm f* removes all it made);
//     a leftover fN is reported as still present.
//   - C04, C05: the directories d1..d10 and d1..d10/d1..d10, each of the
//     latter holding the empty regular files f1..f10; nothing else.
//   - C06, C08: the regular file big, 64 MiB of zeros; nothing else.
//   - C07: big and big2, both 64 MiB of zeros; nothing else.
//   - C09: big with the base's BLAKE3 (BigHash); nothing else.
//   - C10: big and big2, both with BigHash; nothing else.
//   - C11: big, 64 MiB of zeros and not BigHash; nothing else.
//   - C12: f1..f100 as in C01 plus the directory .git, whose contents are
//     not enumerated; in the sandbox, git fsck succeeds, git ls-files
//     counts 100, HEAD tracks exactly f1..f100, and the work tree has no
//     difference from HEAD (so HEAD holds the contents checked above).
func Twelve() []Cell {
	return []Cell{
		{ID: "C01", Title: "create 1,000 files", Body: bodyCreate, Expect: numbered(1000)},
		{ID: "C02", Title: "create 1,000, stat 1,000", Body: bodyCreate + "; " + bodyStat, Expect: numbered(1000)},
		{ID: "C03", Title: "create 1,000, remove them", Body: bodyCreate + "; rm f*", Expect: removed},
		{ID: "C04", Title: "100 directories, 1,000 files", Body: bodyTree, Expect: tree},
		{ID: "C05", Title: "that tree, then find", Body: bodyTree + "; find . -type f | wc -l", Expect: tree},
		{ID: "C06", Title: "write 64 MiB", Body: bodyWrite, Expect: zeros("big")},
		{ID: "C07", Title: "write 64 MiB, copy it", Body: bodyWrite + "; " + bodyCopyBig, Expect: zeros("big", "big2")},
		{ID: "C08", Title: "write 64 MiB, read it", Body: bodyWrite + "; " + bodyReadBig, Expect: zeros("big")},
		{ID: "C09", Title: "read a 64 MiB base file", Body: bodyReadBig, Base: bigBase(), Expect: based("big")},
		{ID: "C10", Title: "copy a 64 MiB base file", Body: bodyCopyBig, Base: bigBase(), Expect: based("big", "big2")},
		{ID: "C11", Title: "overwrite a 64 MiB base file", Body: `dd if=/dev/zero of=big bs=1M count=64 conv=notrunc status=none`, Base: bigBase(), Expect: overwritten},
		{ID: "C12", Title: "git init, 100 files, add, commit", Body: bodyGit, Probe: needs("git"), Expect: gitCommitted},
	}
}

func numbered(n int) func() Expectation {
	return func() Expectation {
		var b Builder
		for i := 1; i <= n; i++ {
			b.File("f"+strconv.Itoa(i), Text(strconv.Itoa(i)+"\n"))
		}
		return b.Build()
	}
}

func removed() Expectation {
	var b Builder
	for i := 1; i <= 1000; i++ {
		b.Absent("f" + strconv.Itoa(i))
	}
	return b.Build()
}

func tree() Expectation {
	var b Builder
	for a := 1; a <= 10; a++ {
		for d := 1; d <= 10; d++ {
			for f := 1; f <= 10; f++ {
				b.File(fmt.Sprintf("d%d/d%d/f%d", a, d, f), Text(""))
			}
		}
	}
	return b.Build()
}

func zeros(names ...string) func() Expectation {
	return func() Expectation {
		var b Builder
		for _, n := range names {
			b.File(n, Zeros(BigSize))
		}
		return b.Build()
	}
}

func based(names ...string) func() Expectation {
	return func() Expectation {
		var b Builder
		for _, n := range names {
			b.File(n, bigContent())
		}
		return b.Build()
	}
}

func overwritten() Expectation {
	c := Zeros(BigSize)
	c.Not = BigHash
	c.Label = "64 MiB of zeros, not the base"
	var b Builder
	return b.File(BigName, c).Build()
}

// git runs with safe.directory=* so that a workspace owned by another uid
// (a FUSE mount, a bind mount in a container) is still inspected, and
// --no-optional-locks so that checking never rewrites the index.
const gitCheck = `git -c safe.directory='*' --no-optional-locks`

func gitCommitted() Expectation {
	var b Builder
	names := make([]string, 0, 100)
	for i := 1; i <= 100; i++ {
		n := "f" + strconv.Itoa(i)
		names = append(names, n)
		b.File(n, Text(strconv.Itoa(i)+"\n"))
	}
	sort.Strings(names) // git orders tree entries bytewise
	b.Opaque(".git")
	b.Command(Command{Path: ".git", Name: "git fsck", Body: gitCheck + ` fsck --no-progress --no-dangling && echo ok`, Stdout: "ok"})
	b.Command(Command{Path: ".git", Name: "git ls-files | wc -l", Body: gitCheck + ` ls-files | wc -l`, Stdout: "100"})
	b.Command(Command{Path: ".git", Name: "git ls-tree -r HEAD", Body: gitCheck + ` ls-tree -r --name-only HEAD | tr '\n' ' '`, Stdout: strings.Join(names, " ")})
	b.Command(Command{Path: ".git", Name: "git diff HEAD", Body: gitCheck + ` diff --quiet HEAD -- && echo clean`, Stdout: "clean"})
	return b.Build()
}

// needs is a probe that the sandbox has each of the commands.
func needs(cmds ...string) string {
	s := ""
	for i, c := range cmds {
		if i > 0 {
			s += " && "
		}
		s += fmt.Sprintf(`{ command -v %s >/dev/null || { echo "%s is not on the sandbox's PATH"; exit 1; }; }`, c, c)
	}
	return s
}
