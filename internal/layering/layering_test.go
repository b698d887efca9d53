package layering

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "layerfs.dev/layerfs/"

// The mechanism, lowest layer first: store <- commit <- image <- checkpoint
// <- overlay <- fusefs <- kerneloverlay <- engine. A layer may import those
// before it, never those after it.
var layers = []string{"internal/store", "internal/commit", "internal/image", "internal/checkpoint", "internal/overlay", "internal/fusefs", "internal/kerneloverlay", "internal/engine"}

// pkg is what go list says of one package of the module.
type pkg struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

// listPackages runs go list once for all the tests of the package.
var listPackages = sync.OnceValues(func() (map[string]pkg, error) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard", "./...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.Bytes())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs, nil
})

// load lists every package of the module with its dependencies.
func load(t *testing.T) map[string]pkg {
	t.Helper()
	pkgs, err := listPackages()
	require.NoError(t, err)
	if _, ok := pkgs[module+"client"]; !ok {
		t.Fatalf("go list did not list %sclient: the test runs from the wrong directory", module)
	}
	return pkgs
}

// deps is the module's packages that p imports, directly or not, relative
// to the module ("internal/store", "wire").
func deps(pkgs map[string]pkg, p string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(ip string) {
		for _, d := range pkgs[ip].Imports {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(module + p)
	var out []string
	for d := range seen {
		if rel, ok := strings.CutPrefix(d, module); ok {
			out = append(out, rel)
		}
	}
	slices.Sort(out)
	return out
}

// under reports whether rel is dir or a package below it.
func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

func TestLayers(t *testing.T) {
	pkgs := load(t)
	for i, l := range layers {
		for _, d := range deps(pkgs, l) {
			for _, higher := range layers[i+1:] {
				if under(d, higher) {
					t.Errorf("%s imports %s: a layer may import only those below it (%s)", l, d, strings.Join(layers, " <- "))
				}
			}
			if under(d, "internal/api") {
				t.Errorf("%s imports %s: the API serves the mechanism, never the other way round", l, d)
			}
			if under(d, "internal/platforms/") {
				t.Errorf("%s imports %s: the mechanism knows platforms only by their interface, internal/platforms", l, d)
			}
		}
	}
}

// storeParts are the Store's parts, the packages under internal/store,
// each with the packages of the module it may import, directly or not.
// Only internal/store and the parts listed here import them: the rest of
// LayerFS sees the Store through its facade (and its vocabulary, the
// object model re-exported as store.ID, store.Tree, ...).
var storeParts = map[string][]string{
	"internal/store/object":     {"wire/errclass"},
	"internal/store/schema":     nil,
	"internal/store/pack":       {"internal/store/object", "internal/account", "wire/errclass"},
	"internal/store/bucketpack": {"internal/store/object", "internal/store/pack", "internal/account", "internal/s3bucket", "wire/errclass"},
	"internal/store/cache":      {"internal/store/object", "internal/flock", "internal/fsverity", "wire/errclass"},
	"internal/store/sqltx":      {"internal/store/schema", "internal/account"},
	"internal/store/fill": {"internal/store/object", "internal/store/cache", "internal/account", "internal/serial",
		"internal/flock", "internal/fsverity", "internal/writeruns", "wire/errclass"},
	"internal/store/maintenance": {"internal/store/object", "internal/store/pack", "internal/store/bucketpack",
		"internal/store/cache", "internal/store/schema", "internal/store/sqltx", "internal/account", "internal/diskusage",
		"internal/s3bucket", "internal/flock", "internal/fsverity", "wire/errclass"},
}

// leaves are packages that import nothing of the module.
var leaves = []string{"internal/flock", "internal/account", "internal/fsverity"}

// TestStoreParts: each part of the Store imports only what its rule
// lists, no package but the store and its parts imports a part, and every
// package under internal/store has a rule.
func TestStoreParts(t *testing.T) {
	pkgs := load(t)
	for part, allowed := range storeParts {
		if _, ok := pkgs[module+part]; !ok {
			t.Errorf("%s has a rule but is not a package of the module", part)
		}
		for _, d := range deps(pkgs, part) {
			if !slices.Contains(allowed, d) {
				t.Errorf("%s imports %s: a part of the Store imports only %v", part, d, allowed)
			}
		}
	}
	for path, p := range pkgs {
		rel, ok := strings.CutPrefix(path, module)
		if !ok {
			continue
		}
		if _, ok := storeParts[rel]; !ok && strings.HasPrefix(rel, "internal/store/") {
			t.Errorf("%s has no rule in storeParts", rel)
		}
		for _, d := range p.Imports {
			drel, _ := strings.CutPrefix(d, module)
			if _, isPart := storeParts[drel]; !isPart || rel == "internal/store" {
				continue
			}
			if !slices.Contains(storeParts[rel], drel) {
				t.Errorf("%s imports %s: only internal/store imports the Store's parts", rel, drel)
			}
		}
	}
	for _, l := range leaves {
		if ds := deps(pkgs, l); len(ds) > 0 {
			t.Errorf("%s imports %v: a leaf imports nothing of the module", l, ds)
		}
	}
}

// TestSDK: the public SDK is the client and the wire types, over the
// standard library alone, so a program that embeds it links no FUSE, no
// SQLite and no platform.
func TestSDK(t *testing.T) {
	pkgs := load(t)
	for _, p := range []string{"client", "wire", "wire/errclass"} {
		for _, d := range deps(pkgs, p) {
			if !under(d, "wire") {
				t.Errorf("%s imports %s: the SDK imports only wire and the standard library", p, d)
			}
		}
		for _, d := range pkgs[module+p].Imports {
			if q, ok := pkgs[d]; ok && !q.Standard && !strings.HasPrefix(d, module) {
				t.Errorf("%s imports %s: the SDK imports only wire and the standard library", p, d)
			}
		}
	}
}

// TestFrontEnds: the API serves an engine it knows only by interface, and
// the MCP server reaches LayerFS only through the SDK, as a remote agent
// would.
func TestFrontEnds(t *testing.T) {
	pkgs := load(t)
	for _, p := range []string{"internal/api", "internal/mcpserver"} {
		for _, d := range deps(pkgs, p) {
			for _, l := range append(slices.Clone(layers), "internal/platforms") {
				if under(d, l) {
					t.Errorf("%s imports %s: a front end does not link the mechanism", p, d)
				}
			}
		}
	}
}

// TestBenchThroughSDK: the cells and session benches measure what a user
// meets, through the SDK; only the file that starts their in-process daemon
// may touch the engine, the API or the Store.
func TestBenchThroughSDK(t *testing.T) {
	dir := filepath.Join("..", "bench")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || filepath.Base(f) == "daemon.go" {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range af.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			rel, _ := strings.CutPrefix(ip, module)
			for _, l := range append(slices.Clone(layers), "internal/api") {
				if under(rel, l) {
					t.Errorf("%s imports %s: the bench measures through the SDK (only daemon.go starts the daemon)", f, ip)
				}
			}
		}
	}
}

// TestKubernetesOnlyInTests: the Kubernetes API types check the manifests
// of deploy/kubernetes in a test; no command or SDK package links them.
func TestKubernetesOnlyInTests(t *testing.T) {
	pkgs := load(t)
	for path, p := range pkgs {
		if !strings.HasPrefix(path, module) {
			continue
		}
		for _, d := range p.Imports {
			if strings.HasPrefix(d, "k8s.io/") || strings.HasPrefix(d, "sigs.k8s.io/") {
				t.Errorf("%s imports %s: Kubernetes' packages are for tests of deploy/kubernetes only", path, d)
			}
		}
	}
	for path := range pkgs {
		if strings.HasPrefix(path, "k8s.io/") || strings.HasPrefix(path, "sigs.k8s.io/") {
			t.Errorf("a package of the module links %s", path)
		}
	}
}
