//go:build ignore

// Codesize lists what breaks the house's size rules in the module's
// non-test code: functions longer than 120 lines and packages (the
// non-test .go files of a directory) longer than 4,500 lines, longest
// first. It exits 1 when it lists anything.
//
//	go run scripts/codesize.go [-func 120] [-pkg 4500] [dir]
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type finding struct {
	lines int
	what  string
}

func main() {
	maxFunc := flag.Int("func", 120, "longest allowed function, in lines")
	maxPkg := flag.Int("pkg", 4500, "longest allowed package, in non-test lines")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	funcs, pkgs, err := scan(root, *maxFunc, *maxPkg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codesize:", err)
		os.Exit(2)
	}
	report("functions over", *maxFunc, funcs)
	report("packages over", *maxPkg, pkgs)
	if len(funcs)+len(pkgs) > 0 {
		os.Exit(1)
	}
}

// scan parses every non-test .go file under root (skipping testdata,
// vendor and hidden directories) and returns the functions and packages
// over their bounds.
func scan(root string, maxFunc, maxPkg int) (funcs, pkgs []finding, err error) {
	fset := token.NewFileSet()
	perDir := map[string]int{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		perDir[filepath.Dir(path)] += strings.Count(string(src), "\n")
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := end.Line - start.Line + 1; n > maxFunc {
				funcs = append(funcs, finding{n, fmt.Sprintf("%s:%d %s", path, start.Line, funcName(fn))})
			}
		}
		return nil
	})
	for dir, n := range perDir {
		if n > maxPkg {
			pkgs = append(pkgs, finding{n, dir})
		}
	}
	return funcs, pkgs, err
}

// funcName is fn's name, with its receiver's type if it is a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

func report(title string, bound int, fs []finding) {
	if len(fs) == 0 {
		return
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].lines > fs[j].lines })
	fmt.Printf("%s %d lines: %d\n", title, bound, len(fs))
	for _, f := range fs {
		fmt.Printf("%6d  %s\n", f.lines, f.what)
	}
}
