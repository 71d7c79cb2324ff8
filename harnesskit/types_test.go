package harnesskit_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/harnesskit"
)

var goTypes = map[string]reflect.Type{
	"Capabilities": reflect.TypeFor[harnesskit.Capabilities](),
	"Accepts":      reflect.TypeFor[harnesskit.Accepts](),
	"Provides":     reflect.TypeFor[harnesskit.Provides](),
	"Limits":       reflect.TypeFor[harnesskit.Limits](),
	"RunRequest":   reflect.TypeFor[harnesskit.RunRequest](),
	"RunMetadata":  reflect.TypeFor[harnesskit.RunMetadata](),
	"FileRef":      reflect.TypeFor[harnesskit.FileRef](),
	"RunCreated":   reflect.TypeFor[harnesskit.RunCreated](),
	"RunStatus":    reflect.TypeFor[harnesskit.RunStatus](),
	"ArtifactRef":  reflect.TypeFor[harnesskit.ArtifactRef](),
	"RunList":      reflect.TypeFor[harnesskit.RunList](),
	"RunListItem":  reflect.TypeFor[harnesskit.RunListItem](),
	"FileList":     reflect.TypeFor[harnesskit.FileList](),
	"FileEntry":    reflect.TypeFor[harnesskit.FileEntry](),
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// alternatives returns a property's non-null alternatives and whether null
// is one of them (OpenAPI 3.1 spells nullable as anyOf [X, {type: null}]).
func alternatives(p map[string]any) ([]map[string]any, bool) {
	alts, ok := p["anyOf"].([]any)
	if !ok {
		return []map[string]any{p}, p["type"] == "null"
	}
	var out []map[string]any
	nullable := false
	for _, a := range alts {
		m := a.(map[string]any)
		if m["type"] == "null" {
			nullable = true
			continue
		}
		out = append(out, m)
	}
	return out, nullable
}

func checkType(t *testing.T, where string, typ reflect.Type, s map[string]any) {
	t.Helper()
	if ref, ok := s["$ref"].(string); ok {
		want := goTypes[strings.TrimPrefix(ref, "#/components/schemas/")]
		if typ != want {
			t.Errorf("%s: schema %s, Go %v", where, ref, typ)
		}
		return
	}
	switch ty := s["type"]; ty {
	case "string":
		if typ.Kind() != reflect.String {
			t.Errorf("%s: schema string, Go %v", where, typ)
		}
		if _, isEnum := s["enum"]; isEnum == (typ.Name() == "string") {
			t.Errorf("%s: an enum needs a named string type and a plain string needs none, got %v", where, typ)
		}
	case "integer":
		if k := typ.Kind(); k != reflect.Int && k != reflect.Int64 {
			t.Errorf("%s: schema integer, Go %v", where, typ)
		}
	case "boolean":
		if typ.Kind() != reflect.Bool {
			t.Errorf("%s: schema boolean, Go %v", where, typ)
		}
	case "object":
		if typ != rawMessageType {
			t.Errorf("%s: free-form object should stay json.RawMessage, got %v", where, typ)
		}
	case "array":
		if typ.Kind() != reflect.Slice || typ == rawMessageType {
			t.Errorf("%s: schema array, Go %v", where, typ)
			return
		}
		checkType(t, where+"[]", typ.Elem(), s["items"].(map[string]any))
	default:
		t.Errorf("%s: unhandled schema type %v", where, ty)
	}
}

// TestTypesAgreeWithSchema checks every component schema against its Go
// type in both directions: properties, required, nullability, types,
// defaults and the additionalProperties:true promise.
func TestTypesAgreeWithSchema(t *testing.T) {
	t.Parallel()
	schemas := componentSchemas(t)
	if got, want := slices.Sorted(maps.Keys(goTypes)), slices.Sorted(maps.Keys(schemas)); !slices.Equal(got, want) {
		t.Fatalf("Go types for %v, component schemas are %v", got, want)
	}
	for name, typ := range goTypes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := schemas[name].(map[string]any)
			props := s["properties"].(map[string]any)
			var required []string
			if r, ok := s["required"].([]any); ok {
				for _, x := range r {
					required = append(required, x.(string))
				}
			}
			if s["additionalProperties"] != true {
				t.Errorf("%s: additionalProperties is not true", name)
			}
			if f, ok := typ.FieldByName("Extra"); !ok || f.Type != reflect.TypeFor[map[string]json.RawMessage]() || f.Tag.Get("json") != "-" {
				t.Errorf("%s: no Extra map for additional properties", name)
			}
			fields := map[string]reflect.StructField{}
			for f := range typ.Fields() {
				tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if tag == "" {
					t.Errorf("%s.%s has no json name", name, f.Name)
				}
				if tag != "-" {
					fields[tag] = f
				}
			}
			for p := range props {
				if _, ok := fields[p]; !ok {
					t.Errorf("%s: schema property %q has no Go field", name, p)
				}
			}
			for n, f := range fields {
				p, ok := props[n].(map[string]any)
				if !ok {
					t.Errorf("%s: Go field %s (%q) is not a schema property", name, f.Name, n)
					continue
				}
				where := name + "." + n
				omits := strings.Contains(f.Tag.Get("json"), ",omitempty")
				req := slices.Contains(required, n)
				if req && omits {
					t.Errorf("%s: required member is omitempty", where)
				}
				alts, nullable := alternatives(p)
				if len(alts) != 1 {
					t.Errorf("%s: %d non-null alternatives", where, len(alts))
					continue
				}
				ft := f.Type
				switch {
				case nullable && ft.Kind() != reflect.Pointer && ft.Kind() != reflect.Slice && ft != rawMessageType:
					t.Errorf("%s: nullable but Go %v cannot hold null", where, ft)
				case !nullable && ft.Kind() == reflect.Pointer && (req || !omits):
					t.Errorf("%s: not nullable but Go %v would write null", where, ft)
				case nullable && !omits:
					t.Errorf("%s: nullable members default to null and are omitted when nil", where)
				}
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				checkType(t, where, ft, alts[0])
				if d, ok := p["default"]; ok && d != nil {
					zero := reflect.Zero(ft).Interface()
					if dv := reflect.ValueOf(d); dv.Kind() == reflect.Bool && d != zero {
						t.Errorf("%s: default %v differs from the Go zero value", where, d)
					}
				}
			}
			for _, r := range required {
				if _, ok := props[r]; !ok {
					t.Errorf("%s: required %q is not a property", name, r)
				}
			}
			// The zero value emits every required member and never a null.
			b, err := json.Marshal(reflect.Zero(typ).Interface())
			if name == "RunRequest" {
				if err == nil {
					t.Errorf("RunRequest without input marshalled: %s", b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			for _, r := range required {
				if v, ok := got[r]; !ok || v == nil {
					t.Errorf("zero %s: required %q is %v (present %v): %s", name, r, v, ok, b)
				}
			}
		})
	}
}

func TestStatusesAgreeWithSchema(t *testing.T) {
	t.Parallel()
	var enum []string
	status := componentSchemas(t)["RunStatus"].(map[string]any)["properties"].(map[string]any)["status"].(map[string]any)
	for _, v := range status["enum"].([]any) {
		enum = append(enum, v.(string))
	}
	var list []string
	for _, s := range harnesskit.Statuses {
		list = append(list, string(s))
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
	}
	if !slices.Equal(list, enum) {
		t.Errorf("Statuses = %q, want %q", list, enum)
	}
	// No constant of type Status beyond the enum.
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	var consts []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Status" {
				for _, v := range vs.Values {
					consts = append(consts, strings.Trim(v.(*ast.BasicLit).Value, `"`))
				}
			}
			return true
		})
	}
	slices.Sort(consts)
	sorted := slices.Sorted(slices.Values(enum))
	if !slices.Equal(consts, sorted) {
		t.Errorf("Status constants = %q, want %q", consts, sorted)
	}
	if harnesskit.Status("done").Valid() {
		t.Error(`Status("done").Valid() = true`)
	}
}

func TestStatus_IsTerminal(t *testing.T) {
	t.Parallel()
	want := map[harnesskit.Status]bool{
		harnesskit.StatusQueued: false, harnesskit.StatusRunning: false,
		harnesskit.StatusCompleted: true, harnesskit.StatusFailed: true, harnesskit.StatusCancelled: true,
		"": false, "weird": false,
	}
	for s, w := range want {
		if s.IsTerminal() != w || (harnesskit.RunStatus{Status: s}).IsTerminal() != w {
			t.Errorf("%q.IsTerminal() = %v, want %v", s, s.IsTerminal(), w)
		}
	}
}
