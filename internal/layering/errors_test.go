package layering

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// typedPkg is one package of the module, parsed and type-checked against
// the export data of its imports.
type typedPkg struct {
	path  string
	files []*ast.File
	info  *types.Info
}

// loadTyped type-checks the module's packages (their non-test files for
// this platform). Type errors are ignored: an expression left untyped is
// only a check skipped, never a false report.
func loadTyped(t *testing.T) (*token.FileSet, []typedPkg) {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,Standard", "./...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list -export: %s", stderr.Bytes())
	type listed struct {
		ImportPath, Dir, Export string
		GoFiles                 []string
		Standard                bool
	}
	exports := map[string]string{}
	var mine []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		require.NoError(t, dec.Decode(&p))
		exports[p.ImportPath] = p.Export
		if strings.HasPrefix(p.ImportPath, module) {
			mine = append(mine, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if e := exports[path]; e != "" {
			return os.Open(e)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	})
	var pkgs []typedPkg
	for _, p := range mine {
		tp := typedPkg{path: p.ImportPath, info: &types.Info{
			Types: map[ast.Expr]types.TypeAndValue{},
			Uses:  map[*ast.Ident]types.Object{},
		}}
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			require.NoError(t, err)
			tp.files = append(tp.files, f)
		}
		conf := types.Config{Importer: imp, Error: func(error) {}}
		_, _ = conf.Check(p.ImportPath, fset, tp.files, tp.info)
		pkgs = append(pkgs, tp)
	}
	return fset, pkgs
}

// classedSentinels is the module's package-level error variables made by
// errclass.New, as "import/path.Name".
func classedSentinels(pkgs []typedPkg) map[string]bool {
	out := map[string]bool{}
	for _, p := range pkgs {
		for _, f := range p.files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, s := range g.Specs {
					vs := s.(*ast.ValueSpec)
					for i, v := range vs.Values {
						if c, ok := v.(*ast.CallExpr); ok && isCall(p, c, errclassPath, "New") {
							out[p.path+"."+vs.Names[i].Name] = true
						}
					}
				}
			}
		}
	}
	return out
}

const errclassPath = module + "wire/errclass"

// isCall reports whether c calls the function pkg.name.
func isCall(p typedPkg, c *ast.CallExpr, pkg, name string) bool {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	if !ok {
		return false
	}
	pn, ok := p.info.Uses[id].(*types.PkgName)
	return ok && pn.Imported().Path() == pkg
}

// formatVerbs is the verb of each argument a format consumes ('*' for a
// width or precision), false for a format it does not follow (explicit
// argument indexes).
func formatVerbs(format string) ([]byte, bool) {
	var verbs []byte
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		for i++; i < len(format) && strings.IndexByte("+-# 0123456789.*[", format[i]) >= 0; i++ {
			switch format[i] {
			case '*':
				verbs = append(verbs, '*')
			case '[':
				return nil, false
			}
		}
		if i == len(format) {
			return nil, false
		}
		if format[i] != '%' {
			verbs = append(verbs, format[i])
		}
	}
	return verbs, true
}

// TestErrorIdiom holds errclass's one idiom (wire/errclass/doc.go): an
// fmt.Errorf that wraps wraps every error it formats, so no cause is lost
// to errors.Is, and wraps the class (or a sentinel of one) before any other
// error, so that the class it names is the one errclass.Of answers.
// errclass.Errorf, deprecated, is not called.
func TestErrorIdiom(t *testing.T) {
	fset, pkgs := loadTyped(t)
	sentinels := classedSentinels(pkgs)
	errType := types.Universe.Lookup("error").Type().Underlying().(*types.Interface)
	for _, p := range pkgs {
		classed := func(e ast.Expr) bool {
			if t := p.info.Types[e].Type; t != nil && t.String() == "*"+errclassPath+".Class" {
				return true
			}
			var id *ast.Ident
			switch x := e.(type) {
			case *ast.Ident:
				id = x
			case *ast.SelectorExpr:
				id = x.Sel
			}
			v, ok := p.info.Uses[id].(*types.Var)
			return ok && v.Pkg() != nil && sentinels[v.Pkg().Path()+"."+v.Name()]
		}
		for _, f := range p.files {
			ast.Inspect(f, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				at := fset.Position(c.Pos())
				if isCall(p, c, errclassPath, "Errorf") {
					t.Errorf("%s: errclass.Errorf: use fmt.Errorf(\"%%w: ...: %%w\", errclass.X, ..., err)", at)
				}
				if !isCall(p, c, "fmt", "Errorf") || len(c.Args) == 0 {
					return true
				}
				tv := p.info.Types[c.Args[0]]
				if tv.Value == nil || tv.Value.Kind() != constant.String {
					return true
				}
				verbs, ok := formatVerbs(constant.StringVal(tv.Value))
				if !ok || len(verbs) != len(c.Args)-1 || bytes.IndexByte(verbs, 'w') < 0 {
					return true
				}
				wrapped := 0 // %w arguments before this one
				for i, a := range c.Args[1:] {
					typ := p.info.Types[a].Type
					isErr := typ != nil && types.Implements(typ, errType)
					switch {
					case verbs[i] == 'w' && classed(a) && wrapped > 0:
						t.Errorf("%s: %s is wrapped after another error: wrap the class first", at, types.ExprString(a))
					case verbs[i] != 'w' && isErr:
						t.Errorf("%s: %%%c drops the cause %s: wrap it with %%w (or format its Error() to flatten it on purpose)", at, verbs[i], types.ExprString(a))
					}
					if verbs[i] == 'w' {
						wrapped++
					}
				}
				return true
			})
		}
	}
}
