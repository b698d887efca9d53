package api_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"layerfs.dev/layerfs/wire"
)

// The API is described three times: the wire types (what the daemon and
// the Go SDK encode), docs/openapi.yaml, and the Python SDK's dataclasses
// (sdk/python/layerfs/types.py). TestAPIParity holds the three together
// field by field, and TestParityCheckerFails shows that it fails when one
// of them renames a field.

// wireTypes are the wire types the OpenAPI document names as components,
// by component name. Every component the routes reach must be here, and
// every exported struct of package wire here or in notComponents.
var wireTypes = map[string]reflect.Type{}

func init() {
	for _, v := range []any{
		wire.Version{}, wire.DaemonStatus{}, wire.Isolation{}, wire.ErrorBody{}, wire.Node{},
		wire.Project{}, wire.CreateProject{}, wire.Layer{}, wire.AddLayer{}, wire.Branch{}, wire.ForkBranch{},
		wire.CommitStats{}, wire.Commit{}, wire.CommitDir{}, wire.CommitRequest{}, wire.CommitResult{},
		wire.MergeRequest{}, wire.MergeResult{}, wire.ConflictSide{}, wire.Conflict{},
		wire.UpdateRequest{}, wire.UpdateResult{}, wire.ResolveRequest{}, wire.ResolveResult{},
		wire.ForkRequest{}, wire.ForkResult{}, wire.Change{}, wire.DiffPage{}, wire.FileInfo{}, wire.FileEvent{},
		wire.DirPage{}, wire.Checkout{}, wire.CheckoutResult{}, wire.WorkspaceSpec{}, wire.Owner{}, wire.Workspace{},
		wire.WorkspaceStatus{}, wire.ExecRequest{}, wire.TerminalSize{}, wire.ExecResult{}, wire.ExecEvent{}, wire.OpStats{}, wire.ShareRequest{}, wire.PortShare{},
		wire.FUSEStats{}, wire.SQLStats{}, wire.UpperStats{}, wire.Receipt{}, wire.GCRequest{}, wire.GCResult{},
		wire.FsckRequest{}, wire.FsckProblem{}, wire.FsckReport{}, wire.StoreStats{},
		wire.Image{}, wire.ImageImport{}, wire.ImagePush{}, wire.ImageCommit{}, wire.ImageBuild{}, wire.ImageResult{},
		wire.ProjectImage{}, wire.NetworkRule{}, wire.NetworkChange{}, wire.NetEvent{}, wire.NetUsage{},
		wire.ServiceRequest{}, wire.Service{}, wire.ServiceList{}, wire.ServiceStopRequest{},
	} {
		t := reflect.TypeOf(v)
		wireTypes[t.Name()] = t
		allWire[t.Name()] = t
	}
	for _, v := range []any{wire.Error{}, wire.MergeInfo{}, wire.QuotaUsage{}, wire.IsolationLimits{},
		wire.ImageLayer{}, wire.ImageConfig{}, wire.ImageStats{}, wire.BuildStep{}} {
		t := reflect.TypeOf(v)
		allWire[t.Name()] = t
	}
}

// allWire is wireTypes and the structs described inside them.
var allWire = map[string]reflect.Type{}

// notComponents are the exported structs of package wire that have no
// component of their own, and where the document describes them.
var notComponents = map[string]string{
	"Error":           "ErrorBody's error property",
	"MergeInfo":       "CommitResult's merge property",
	"QuotaUsage":      "Receipt's quota property",
	"IsolationLimits": "Isolation's limits property",
	"ImageLayer":      "Image's layers property",
	"ImageConfig":     "Image's config property",
	"ImageStats":      "ImageResult's stats property",
	"BuildStep":       "ImageResult's steps property",
}

// pythonNames maps the Python SDK's classes to wire's types where the names
// differ.
var pythonNames = map[string]string{"WorkspaceInfo": "Workspace"}

// pythonOmits are the wire fields a Python class leaves out on purpose,
// by wire type, each with the reason. A field named here must still exist
// in wire. (None today: every class has every field.)
var pythonOmits = map[string]map[string]string{}

// shape is a JSON value's type as one of the three descriptions gives it.
type shape struct {
	kind   string // string, integer, number, boolean, array, map, object
	format string // date-time or byte for strings, else ""
	elem   *shape // array and map elements
	name   string // a named object: the wire type (component) it is
	fields map[string]field
	stray  []string // OpenAPI: names in required that are no property
}

// field is one member of an object.
type field struct {
	shape    shape
	required bool // always present (wire: no omitempty; OpenAPI: listed in required)
}

func (s shape) String() string {
	switch {
	case s.kind == "array" || s.kind == "map":
		return s.kind + " of " + s.elem.String()
	case s.kind == "object" && s.name != "":
		return s.name
	case s.format != "":
		return s.kind + " (" + s.format + ")"
	}
	return s.kind
}

var timeType = reflect.TypeOf(time.Time{})

// goShape is t's JSON shape as encoding/json writes it. Named structs are
// left by name unless deep; their fields are compared where they are
// components of their own.
func goShape(t reflect.Type, deep bool) shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return shape{kind: "string", format: "date-time"}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return shape{kind: "string", format: "byte"}
	}
	switch t.Kind() {
	case reflect.String:
		return shape{kind: "string"}
	case reflect.Bool:
		return shape{kind: "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return shape{kind: "integer"}
	case reflect.Float32, reflect.Float64:
		return shape{kind: "number"}
	case reflect.Slice, reflect.Array:
		e := goShape(t.Elem(), false)
		return shape{kind: "array", elem: &e}
	case reflect.Map:
		e := goShape(t.Elem(), false)
		return shape{kind: "map", elem: &e}
	case reflect.Struct:
		s := shape{kind: "object", name: t.Name()}
		if deep || s.name == "" {
			s.fields = goFields(t)
		}
		return s
	}
	return shape{kind: "unknown " + t.String()}
}

// goFields are the JSON members of struct t, embedded structs flattened.
func goFields(t reflect.Type) map[string]field {
	out := map[string]field{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			for k, v := range goFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		optional := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") || f.Type.Kind() == reflect.Pointer
		out[name] = field{shape: goShape(f.Type, false), required: !optional}
	}
	return out
}

// openAPI is the parsed document.
type openAPI struct {
	root    map[string]any
	schemas map[string]any
}

func parseOpenAPI(doc []byte) (*openAPI, error) {
	var root map[string]any
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	comps, _ := root["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	if len(schemas) == 0 {
		return nil, fmt.Errorf("no components.schemas")
	}
	return &openAPI{root: root, schemas: schemas}, nil
}

// resolve follows a local $ref ("#/components/schemas/X/properties/y").
func (o *openAPI) resolve(ref string) (any, string, error) {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, "", fmt.Errorf("$ref %q is not local", ref)
	}
	var cur any = o.root
	parts := strings.Split(p, "/")
	for _, part := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, "", fmt.Errorf("$ref %q: %s is not an object", ref, part)
		}
		if cur, ok = m[part]; !ok {
			return nil, "", fmt.Errorf("$ref %q: no %s", ref, part)
		}
	}
	name := ""
	if len(parts) == 3 && parts[0] == "components" && parts[1] == "schemas" {
		name = parts[2]
	}
	return cur, name, nil
}

// shapeOf is the JSON shape of a schema; components that are wire types
// are left by name unless deep.
func (o *openAPI) shapeOf(node any, deep bool) (shape, error) {
	m, ok := node.(map[string]any)
	if !ok {
		return shape{}, fmt.Errorf("schema %v is not an object", node)
	}
	if ref, ok := m["$ref"].(string); ok {
		target, name, err := o.resolve(ref)
		if err != nil {
			return shape{}, err
		}
		if _, isWire := wireTypes[name]; isWire && !deep {
			return shape{kind: "object", name: name}, nil
		}
		s, err := o.shapeOf(target, true)
		if name != "" && s.kind == "object" {
			s.name = name
		}
		return s, err
	}
	if all, ok := m["allOf"].([]any); ok {
		s := shape{kind: "object", fields: map[string]field{}}
		for _, part := range all {
			ps, err := o.shapeOf(part, true)
			if err != nil {
				return shape{}, err
			}
			for k, v := range ps.fields {
				s.fields[k] = v
			}
		}
		return s, nil
	}
	typ, _ := m["type"].(string)
	switch typ {
	case "string":
		f, _ := m["format"].(string)
		if f != "date-time" && f != "byte" {
			f = ""
		}
		return shape{kind: "string", format: f}, nil
	case "integer", "number", "boolean":
		return shape{kind: typ}, nil
	case "array":
		e, err := o.shapeOf(m["items"], false)
		return shape{kind: "array", elem: &e}, err
	case "object":
		if ap, ok := m["additionalProperties"].(map[string]any); ok {
			e, err := o.shapeOf(ap, false)
			return shape{kind: "map", elem: &e}, err
		}
		s := shape{kind: "object", fields: map[string]field{}}
		props, _ := m["properties"].(map[string]any)
		req := map[string]bool{}
		if r, ok := m["required"].([]any); ok {
			for _, n := range r {
				req[fmt.Sprint(n)] = true
			}
		}
		for name, p := range props {
			ps, err := o.shapeOf(p, false)
			if err != nil {
				return shape{}, fmt.Errorf("%s: %w", name, err)
			}
			s.fields[name] = field{shape: ps, required: req[name]}
		}
		for _, n := range sortedKeys(req) {
			if _, ok := props[n]; !ok {
				s.stray = append(s.stray, n)
			}
		}
		return s, nil
	}
	return shape{}, fmt.Errorf("schema without a type: %v", m)
}

// requestSchemas are the components the paths take as request bodies.
func (o *openAPI) requestSchemas() map[string]bool {
	out := map[string]bool{}
	var walk func(node any, inBody bool)
	walk = func(node any, inBody bool) {
		switch n := node.(type) {
		case map[string]any:
			for k, v := range n {
				if k == "$ref" && inBody {
					ref := fmt.Sprint(v)
					if name, ok := strings.CutPrefix(ref, "#/components/schemas/"); ok {
						out[name] = true
					} else if body, _, err := o.resolve(ref); err == nil {
						walk(body, true)
					}
				}
				walk(v, inBody || k == "requestBody")
			}
		case []any:
			for _, v := range n {
				walk(v, inBody)
			}
		}
	}
	walk(o.root["paths"], false)
	return out
}

// routeSchemas are the components the paths reach, directly or through
// other components.
func (o *openAPI) routeSchemas() map[string]bool {
	out := map[string]bool{}
	var walk func(node any)
	walk = func(node any) {
		switch n := node.(type) {
		case map[string]any:
			for k, v := range n {
				if k != "$ref" {
					walk(v)
					continue
				}
				ref := fmt.Sprint(v)
				name, ok := strings.CutPrefix(ref, "#/components/schemas/")
				if ok {
					name, _, _ = strings.Cut(name, "/")
					if !out[name] {
						out[name] = true
						walk(o.schemas[name])
					}
				} else if target, _, err := o.resolve(ref); err == nil {
					walk(target)
				}
			}
		case []any:
			for _, v := range n {
				walk(v)
			}
		}
	}
	walk(o.root["paths"])
	return out
}

// pyClass is one dataclass of the Python SDK's types.py.
type pyClass struct {
	name, base string
	fields     map[string]shape // by JSON name; raw, the whole object kept, left out
}

var (
	pyClassRE = regexp.MustCompile(`^class (\w+)(?:\((\w+)\))?:`)
	pyFieldRE = regexp.MustCompile(`^    ([a-z_][a-z0-9_]*): ([^=#]+?)(?: = (.+?))?\s*(?:#.*)?$`)
	pyJSONRE  = regexp.MustCompile(`^_j\("([^"]+)"`)
)

// parsePython reads the dataclasses of types.py; a subclass has its
// base's fields too.
func parsePython(src string) (map[string]*pyClass, error) {
	out := map[string]*pyClass{}
	var cur *pyClass
	dataclass, inDoc := false, false
	for _, line := range strings.Split(src, "\n") {
		if strings.HasPrefix(line, "@dataclass") {
			dataclass = true
			continue
		}
		if m := pyClassRE.FindStringSubmatch(line); m != nil {
			cur = nil
			if dataclass {
				cur = &pyClass{name: m[1], base: m[2], fields: map[string]shape{}}
				out[cur.name] = cur
			}
			dataclass = false
			continue
		}
		if cur == nil {
			continue
		}
		if strings.Count(line, `"""`) == 1 {
			inDoc = !inDoc
			continue
		}
		if inDoc || strings.Count(line, `"""`) == 2 {
			continue
		}
		if line != "" && !strings.HasPrefix(line, " ") {
			cur = nil
			continue
		}
		if strings.HasPrefix(line, "    def ") || strings.HasPrefix(line, "    @") {
			cur = nil
			continue
		}
		m := pyFieldRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, annot, def := m[1], strings.TrimSpace(m[2]), m[3]
		if name == "raw" {
			continue
		}
		if j := pyJSONRE.FindStringSubmatch(def); j != nil {
			name = j[1]
		}
		s, err := pyShape(annot)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", cur.name, m[1], err)
		}
		cur.fields[name] = s
	}
	for _, c := range out {
		for b := c.base; b != ""; {
			base, ok := out[b]
			if !ok {
				return nil, fmt.Errorf("%s: base %s is not a dataclass of types.py", c.name, b)
			}
			for k, v := range base.fields {
				if _, own := c.fields[k]; !own {
					c.fields[k] = v
				}
			}
			b = base.base
		}
	}
	return out, nil
}

// pyShape is the JSON shape of a Python annotation as from_json reads it.
func pyShape(a string) (shape, error) {
	a = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(a), "| None"))
	switch a {
	case "str":
		return shape{kind: "string"}, nil
	case "int":
		return shape{kind: "integer"}, nil
	case "float":
		return shape{kind: "number"}, nil
	case "bool":
		return shape{kind: "boolean"}, nil
	case "bytes":
		return shape{kind: "string", format: "byte"}, nil
	case "datetime":
		return shape{kind: "string", format: "date-time"}, nil
	}
	if in, ok := strings.CutPrefix(a, "list["); ok {
		e, err := pyShape(strings.TrimSuffix(in, "]"))
		return shape{kind: "array", elem: &e}, err
	}
	if in, ok := strings.CutPrefix(a, "dict[str, "); ok {
		e, err := pyShape(strings.TrimSuffix(in, "]"))
		return shape{kind: "map", elem: &e}, err
	}
	if regexp.MustCompile(`^[A-Z]\w*$`).MatchString(a) {
		name := a
		if w, ok := pythonNames[a]; ok {
			name = w
		}
		return shape{kind: "object", name: name}, nil
	}
	return shape{}, fmt.Errorf("annotation %q: no JSON shape known", a)
}

// descriptions are the three descriptions of the API.
type descriptions struct {
	wire    map[string]reflect.Type
	openapi *openAPI
	python  map[string]*pyClass
}

func loadDescriptions(t *testing.T) descriptions {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseOpenAPI(doc)
	if err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "sdk", "python", "layerfs", "types.py"))
	if err != nil {
		t.Fatal(err)
	}
	py, err := parsePython(string(src))
	if err != nil {
		t.Fatalf("types.py: %v", err)
	}
	if len(py) < 20 {
		t.Fatalf("types.py: found only %d dataclasses", len(py))
	}
	return descriptions{wire: wireTypes, openapi: o, python: py}
}

// compareShapes reports where got (what) differs from want (wire's).
func compareShapes(where, what string, want, got shape) []string {
	if want.kind != got.kind || want.format != got.format {
		return []string{fmt.Sprintf("%s: wire has %s, %s has %s", where, want, what, got)}
	}
	switch {
	case want.elem != nil:
		return compareShapes(where+"[]", what, *want.elem, *got.elem)
	case want.kind != "object":
		return nil
	case want.name != "" && got.name != "":
		if want.name != got.name {
			return []string{fmt.Sprintf("%s: wire has %s, %s has %s", where, want.name, what, got.name)}
		}
		return nil
	}
	// One side inline: compare the members.
	if want.fields == nil {
		want = goShape(allWire[want.name], true)
		if want.fields == nil {
			return []string{fmt.Sprintf("%s: wire's type %s is not known here", where, want.name)}
		}
	}
	return compareFields(where, what, want.fields, got.fields, nil, true)
}

// compareFields compares an object's members; omits are wire's members the
// other side may lack, and required says whether to compare presence.
func compareFields(where, what string, want, got map[string]field, omits map[string]string, required bool) []string {
	var out []string
	for _, name := range sortedKeys(want) {
		g, ok := got[name]
		if _, omitted := omits[name]; omitted {
			if ok {
				out = append(out, fmt.Sprintf("%s.%s: %s has it, but is listed as leaving it out", where, name, what))
			}
			continue
		}
		if !ok {
			out = append(out, fmt.Sprintf("%s.%s: in wire, missing from %s", where, name, what))
			continue
		}
		out = append(out, compareShapes(where+"."+name, what, want[name].shape, g.shape)...)
		if required && want[name].required != g.required {
			out = append(out, fmt.Sprintf("%s.%s: wire's is %s, %s's %s", where, name, presence(want[name].required), what, presence(g.required)))
		}
	}
	for _, name := range sortedKeys(got) {
		if _, ok := want[name]; !ok {
			out = append(out, fmt.Sprintf("%s.%s: in %s, not in wire", where, name, what))
		}
	}
	for name := range omits {
		if _, ok := want[name]; !ok {
			out = append(out, fmt.Sprintf("%s.%s: listed as left out of %s, but wire has no such field", where, name, what))
		}
	}
	return out
}

func presence(required bool) string {
	if required {
		return "always present"
	}
	return "optional"
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

// check is the parity checker: every disagreement between the three.
func check(d descriptions) []string {
	var out []string
	routes, requests := d.openapi.routeSchemas(), d.openapi.requestSchemas()
	for _, name := range sortedKeys(routes) {
		s, err := d.openapi.shapeOf(d.openapi.schemas[name], true)
		if err != nil {
			out = append(out, fmt.Sprintf("openapi %s: %v", name, err))
			continue
		}
		if s.kind != "object" {
			continue // a named string (Name, Ref, HostPath)
		}
		if _, ok := d.wire[name]; !ok {
			out = append(out, fmt.Sprintf("openapi %s: a route uses it, but it is no wire type the test knows (add it to wireTypes)", name))
		}
	}
	for _, name := range sortedKeys(d.wire) {
		t := d.wire[name]
		schema, ok := d.openapi.schemas[name]
		if !ok {
			out = append(out, fmt.Sprintf("wire.%s: no component in openapi", name))
			continue
		}
		if !routes[name] {
			out = append(out, fmt.Sprintf("wire.%s: no route of openapi uses it", name))
		}
		s, err := d.openapi.shapeOf(schema, true)
		if err != nil {
			out = append(out, fmt.Sprintf("openapi %s: %v", name, err))
			continue
		}
		for _, n := range s.stray {
			out = append(out, fmt.Sprintf("openapi %s: required %q is not a property", name, n))
		}
		w := goShape(t, true)
		// Presence: a request's required members must be always present
		// in wire; an answer's always-present members are required.
		wf := w.fields
		if requests[name] {
			wf = map[string]field{}
			for k, f := range w.fields {
				f.required = f.required && s.fields[k].required
				wf[k] = f
			}
		}
		out = append(out, compareFields("wire."+name, "openapi", wf, s.fields, nil, true)...)
	}
	for _, cname := range sortedKeys(d.python) {
		c := d.python[cname]
		name := cname
		if w, ok := pythonNames[cname]; ok {
			name = w
		}
		t, ok := d.wire[name]
		if !ok {
			t, ok = allWire[name]
		}
		if !ok {
			out = append(out, fmt.Sprintf("python %s: no wire type %s", cname, name))
			continue
		}
		got := map[string]field{}
		for k, s := range c.fields {
			got[k] = field{shape: s}
		}
		omits := pythonOmits[name]
		out = append(out, compareFields("wire."+name, "python "+cname, goShape(t, true).fields, got, omits, false)...)
	}
	return out
}

// TestAPIParity: the wire types, docs/openapi.yaml and the Python SDK's
// types agree field by field: names, types and presence.
func TestAPIParity(t *testing.T) {
	d := loadDescriptions(t)
	for _, p := range check(d) {
		t.Error(p)
	}
	checkWireCovered(t)
}

// checkWireCovered: every exported struct of package wire is a component
// of the document or described inside one (notComponents).
func checkWireCovered(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "wire", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var structs []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range g.Specs {
				if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.IsExported() {
					if _, isStruct := ts.Type.(*ast.StructType); isStruct {
						structs = append(structs, ts.Name.Name)
					}
				}
			}
		}
	}
	if len(structs) < 40 {
		t.Fatalf("found only %d structs in wire", len(structs))
	}
	for _, s := range structs {
		_, comp := wireTypes[s]
		_, inside := notComponents[s]
		if !comp && !inside {
			t.Errorf("wire.%s: neither in wireTypes nor in notComponents: describe it in docs/openapi.yaml", s)
		}
	}
	for s := range notComponents {
		if !slices.Contains(structs, s) {
			t.Errorf("notComponents names %s, which wire does not have", s)
		}
	}
}

// TestParityCheckerFails: the checker finds a renamed field, a changed
// type and a changed presence in each description, on altered copies.
func TestParityCheckerFails(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	py, err := os.ReadFile(filepath.Join("..", "..", "sdk", "python", "layerfs", "types.py"))
	if err != nil {
		t.Fatal(err)
	}
	// within replaces the first old after the line start in src, once.
	within := func(t *testing.T, src, start, old, new string) string {
		i := strings.Index(src, start)
		j := strings.Index(src[i+1:], old)
		if i < 0 || j < 0 {
			t.Fatalf("%q then %q not found", start, old)
		}
		j += i + 1
		return src[:j] + new + src[j+len(old):]
	}
	for _, tc := range []struct {
		name    string
		wire    func() reflect.Type // nil: the real wire.Project
		openapi func(t *testing.T, s string) string
		python  func(t *testing.T, s string) string
		want    []string
	}{
		{name: "field renamed in wire",
			wire: func() reflect.Type { return retag(reflect.TypeOf(wire.Project{}), "Layers", `json:"layer_count"`) },
			want: []string{"wire.Project.layer_count: in wire, missing from openapi", "wire.Project.layers: in openapi, not in wire",
				"wire.Project.layer_count: in wire, missing from python Project", "wire.Project.layers: in python Project, not in wire"}},
		{name: "field renamed in openapi",
			openapi: func(t *testing.T, s string) string {
				return within(t, s, "\n    Project:\n      type: object", "        layers: { type: integer }", "        layer_count: { type: integer }")
			},
			want: []string{"wire.Project.layers: in wire, missing from openapi", "wire.Project.layer_count: in openapi, not in wire",
				`openapi Project: required "layers" is not a property`}},
		{name: "field renamed in python",
			python: func(t *testing.T, s string) string {
				return within(t, s, "class Project:", "    layers: int = 0", "    layer_count: int = 0")
			},
			want: []string{"wire.Project.layers: in wire, missing from python Project", "wire.Project.layer_count: in python Project, not in wire"}},
		{name: "JSON name renamed in python",
			python: func(t *testing.T, s string) string {
				return within(t, s, "class ExecResult:", `_j("stdout",`, `_j("out",`)
			},
			want: []string{"wire.ExecResult.stdout: in wire, missing from python ExecResult", "wire.ExecResult.out: in python ExecResult, not in wire"}},
		{name: "type changed in wire",
			wire: func() reflect.Type { return retype(reflect.TypeOf(wire.Project{}), "Layers", reflect.TypeOf("")) },
			want: []string{"wire.Project.layers: wire has string, openapi has integer", "wire.Project.layers: wire has string, python Project has integer"}},
		{name: "type changed in openapi",
			openapi: func(t *testing.T, s string) string {
				return within(t, s, "\n    Project:\n      type: object", "        layers: { type: integer }", "        layers: { type: string }")
			},
			want: []string{"wire.Project.layers: wire has integer, openapi has string"}},
		{name: "type changed in python",
			python: func(t *testing.T, s string) string {
				return within(t, s, "class Project:", "    created: datetime | None", "    created: str | None")
			},
			want: []string{"wire.Project.created: wire has string (date-time), python Project has string"}},
		{name: "presence changed in wire",
			wire: func() reflect.Type { return retag(reflect.TypeOf(wire.Project{}), "Layers", `json:"layers,omitempty"`) },
			want: []string{"wire.Project.layers: wire's is optional, openapi's always present"}},
		{name: "presence changed in openapi",
			openapi: func(t *testing.T, s string) string {
				return within(t, s, "\n    Project:\n      type: object", "      required: [branches, created, layers, name]", "      required: [branches, created, name]")
			},
			want: []string{"wire.Project.layers: wire's is always present, openapi's optional"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := descriptions{wire: map[string]reflect.Type{}}
			for k, v := range wireTypes {
				d.wire[k] = v
			}
			if tc.wire != nil {
				d.wire["Project"] = tc.wire()
			}
			o, p := string(doc), string(py)
			if tc.openapi != nil {
				o = tc.openapi(t, o)
			}
			if tc.python != nil {
				p = tc.python(t, p)
			}
			var err error
			if d.openapi, err = parseOpenAPI([]byte(o)); err != nil {
				t.Fatal(err)
			}
			if d.python, err = parsePython(p); err != nil {
				t.Fatal(err)
			}
			got := check(d)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("the checker did not report %q; it reported %q", w, got)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("the checker reported %d disagreements, want %d: %q", len(got), len(tc.want), got)
			}
		})
	}
}

// retag is struct t with field's tag replaced.
func retag(t reflect.Type, name, tag string) reflect.Type {
	return alter(t, name, func(f *reflect.StructField) { f.Tag = reflect.StructTag(tag) })
}

// retype is struct t with field's type replaced.
func retype(t reflect.Type, name string, typ reflect.Type) reflect.Type {
	return alter(t, name, func(f *reflect.StructField) { f.Type = typ })
}

func alter(t reflect.Type, name string, change func(*reflect.StructField)) reflect.Type {
	fields := make([]reflect.StructField, t.NumField())
	for i := range fields {
		fields[i] = t.Field(i)
		if fields[i].Name == name {
			change(&fields[i])
		}
	}
	return reflect.StructOf(fields)
}
