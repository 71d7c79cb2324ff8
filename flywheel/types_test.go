package flywheel_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/jcs"
)

// goTypes maps each $defs entry to its hand-written Go type.
var goTypes = map[string]reflect.Type{
	"ToolCallRecord":      reflect.TypeFor[flywheel.ToolCallRecord](),
	"ProductionTurn":      reflect.TypeFor[flywheel.ProductionTurn](),
	"ProductionTurnBatch": reflect.TypeFor[flywheel.ProductionTurnBatch](),
	"Exclusion":           reflect.TypeFor[flywheel.Exclusion](),
	"RolloutRequest":      reflect.TypeFor[flywheel.RolloutRequest](),
	"RolloutOutput":       reflect.TypeFor[flywheel.RolloutOutput](),
	"ClaimResponse":       reflect.TypeFor[flywheel.ClaimResponse](),
}

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	artifactType   = reflect.TypeFor[flywheel.Artifact]()
)

type goField struct {
	goName    string
	typ       reflect.Type
	omitempty bool
	omitzero  bool
}

func (f goField) omitted() bool { return f.omitempty || f.omitzero }

// jsonFields lists a struct's JSON members by their tag names.
func jsonFields(t *testing.T, typ reflect.Type) map[string]goField {
	t.Helper()
	out := map[string]goField{}
	for f := range typ.Fields() {
		if !f.IsExported() {
			continue
		}
		tag, ok := f.Tag.Lookup("json")
		if !ok {
			t.Errorf("%s.%s has no json tag", typ.Name(), f.Name)
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		gf := goField{goName: f.Name, typ: f.Type}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "omitempty":
				gf.omitempty = true
			case "omitzero":
				gf.omitzero = true
			case "":
			default:
				t.Errorf("%s.%s: unexpected json option %q", typ.Name(), f.Name, o)
			}
		}
		out[name] = gf
	}
	return out
}

// isOptional reports whether t is an instantiation of flywheel.Optional,
// and returns its element type.
func isOptional(t reflect.Type) (reflect.Type, bool) {
	if t.PkgPath() != "github.com/gyrehq/gyre/flywheel" || !strings.HasPrefix(t.Name(), "Optional[") {
		return nil, false
	}
	m, ok := t.MethodByName("Get")
	if !ok {
		return nil, false
	}
	return m.Type.Out(0), true
}

// canHoldNull reports whether a Go type can represent JSON null.
func canHoldNull(t reflect.Type) bool {
	if _, ok := isOptional(t); ok {
		return true
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		return true
	}
	return false
}

// schemaNullable reports whether a property schema admits null.
func schemaNullable(p map[string]any) bool {
	switch ty := p["type"].(type) {
	case string:
		return ty == "null"
	case []any:
		return slices.Contains(ty, any("null"))
	}
	for _, kw := range []string{"oneOf", "anyOf"} {
		if alts, ok := p[kw].([]any); ok {
			for _, a := range alts {
				if schemaNullable(a.(map[string]any)) {
					return true
				}
			}
			return false
		}
	}
	if e, ok := p["enum"].([]any); ok {
		return slices.Contains(e, nil)
	}
	_, hasRef := p["$ref"]
	_, hasConst := p["const"]
	return !hasRef && !hasConst // no constraint on the type: anything, null included
}

// schemaTypes returns the non-null JSON types a property admits, with refs
// resolved to "$ref:<Def>"; nil means any type.
func schemaTypes(p map[string]any) []string {
	var out []string
	switch ty := p["type"].(type) {
	case string:
		out = append(out, ty)
	case []any:
		for _, x := range ty {
			out = append(out, x.(string))
		}
	}
	if ref, ok := p["$ref"].(string); ok {
		out = append(out, "$ref:"+strings.TrimPrefix(ref, "#/$defs/"))
	}
	for _, kw := range []string{"oneOf", "anyOf"} {
		if alts, ok := p[kw].([]any); ok {
			for _, a := range alts {
				out = append(out, schemaTypes(a.(map[string]any))...)
			}
		}
	}
	if e, ok := p["enum"].([]any); ok && p["type"] == nil {
		for _, v := range e {
			if _, ok := v.(string); ok {
				out = append(out, "string")
			}
		}
	}
	out = slices.DeleteFunc(out, func(s string) bool { return s == "null" })
	slices.Sort(out)
	return slices.Compact(out)
}

// checkGoType asserts that Go type t (already unwrapped from Optional or a
// pointer) can carry exactly what property schema p admits.
func checkGoType(t *testing.T, where string, typ reflect.Type, p map[string]any) {
	t.Helper()
	types := schemaTypes(p)
	if typ == rawMessageType {
		// Opaque members: any value, or an object whose shape the contract
		// leaves open.
		_, hasProps := p["properties"]
		if hasProps || !(len(types) == 0 || slices.Equal(types, []string{"object"})) {
			t.Errorf("%s: json.RawMessage used for a member the contract shapes (%v)", where, types)
		}
		return
	}
	if len(types) != 1 {
		t.Errorf("%s: cannot map schema types %v to Go %v", where, types, typ)
		return
	}
	switch ty := types[0]; {
	case ty == "string":
		if typ.Kind() != reflect.String {
			t.Errorf("%s: schema string, Go %v", where, typ)
		}
		if _, isEnum := p["enum"]; isEnum == (typ.Name() == "string") {
			t.Errorf("%s: an enum needs a named string type and a plain string needs none, got Go %v", where, typ)
		}
	case ty == "integer":
		if k := typ.Kind(); k != reflect.Int && k != reflect.Int64 {
			t.Errorf("%s: schema integer, Go %v", where, typ)
		}
	case ty == "number":
		if typ.Kind() != reflect.Float64 {
			t.Errorf("%s: schema number, Go %v", where, typ)
		}
	case ty == "boolean":
		if typ.Kind() != reflect.Bool {
			t.Errorf("%s: schema boolean, Go %v", where, typ)
		}
	case strings.HasPrefix(ty, "$ref:"):
		if want := goTypes[strings.TrimPrefix(ty, "$ref:")]; typ != want {
			t.Errorf("%s: schema %s, Go %v", where, ty, typ)
		}
	case ty == "array":
		if typ.Kind() != reflect.Slice || typ == rawMessageType {
			t.Errorf("%s: schema array, Go %v", where, typ)
			return
		}
		items, _ := p["items"].(map[string]any)
		checkGoType(t, where+"[]", typ.Elem(), items)
	case ty == "object":
		switch typ.Kind() {
		case reflect.Map:
			if typ.Key().Kind() != reflect.String {
				t.Errorf("%s: map key %v is not a string kind", where, typ.Key())
			}
			if pn, ok := p["propertyNames"].(map[string]any); ok {
				if _, isEnum := pn["enum"]; isEnum && typ.Key().Name() == "string" {
					t.Errorf("%s: propertyNames enum needs a named key type, got %v", where, typ.Key())
				}
			}
			ap, ok := p["additionalProperties"].(map[string]any)
			if !ok {
				t.Errorf("%s: Go map for an object without an additionalProperties schema", where)
				return
			}
			if typ.Elem() == artifactType {
				checkArtifactSchema(t, where, ap)
				return
			}
			checkGoType(t, where+"{}", typ.Elem(), ap)
		default:
			t.Errorf("%s: schema object, Go %v", where, typ)
		}
	default:
		t.Errorf("%s: unhandled schema type %s", where, ty)
	}
}

// checkArtifactSchema asserts the artifact value schema is "string or the
// inline object" and that InlineArtifact matches the inline object.
func checkArtifactSchema(t *testing.T, where string, ap map[string]any) {
	t.Helper()
	alts, _ := ap["anyOf"].([]any)
	if len(alts) != 2 {
		t.Fatalf("%s: artifact schema is not a two-way anyOf: %v", where, ap)
	}
	if alts[0].(map[string]any)["type"] != "string" {
		t.Errorf("%s: first artifact alternative is not a string", where)
	}
	inline := alts[1].(map[string]any)
	checkStruct(t, where+"(inline)", reflect.TypeFor[flywheel.InlineArtifact](), inline)
}

// checkStruct asserts that a Go struct and an object schema agree in both
// directions: properties, required, nullability and types.
func checkStruct(t *testing.T, name string, typ reflect.Type, s map[string]any) {
	t.Helper()
	if s["additionalProperties"] != false {
		t.Errorf("%s: additionalProperties is not false; the Go type would drop members", name)
	}
	props, _ := s["properties"].(map[string]any)
	var required []string
	for _, r := range s["required"].([]any) {
		required = append(required, r.(string))
	}
	fields := jsonFields(t, typ)
	for _, n := range slices.Sorted(maps.Keys(props)) {
		if _, ok := fields[n]; !ok {
			t.Errorf("%s: schema property %q has no Go field", name, n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(fields)) {
		if _, ok := props[n]; !ok {
			t.Errorf("%s: Go field %s (%q) is not a schema property", name, fields[n].goName, n)
		}
	}
	for _, r := range required {
		if _, ok := props[r]; !ok {
			t.Errorf("%s: required %q is not a property", name, r)
		}
	}
	for n, f := range fields {
		p, ok := props[n].(map[string]any)
		if !ok {
			continue
		}
		where := name + "." + n
		req := slices.Contains(required, n)
		nullable := schemaNullable(p)
		elem, optional := isOptional(f.typ)
		switch {
		case req && f.omitted():
			t.Errorf("%s: required member is tagged omitempty/omitzero", where)
		case !req && !f.omitted():
			t.Errorf("%s: optional member is never omitted (needs omitempty or omitzero)", where)
		case nullable && !canHoldNull(f.typ):
			t.Errorf("%s: nullable in the schema but Go %v cannot hold null", where, f.typ)
		case !nullable && optional:
			t.Errorf("%s: not nullable in the schema but Go %v can encode null", where, f.typ)
		case req && optional:
			t.Errorf("%s: required member typed Optional, which can be absent", where)
		case !req && nullable && !optional && f.typ != rawMessageType:
			t.Errorf("%s: optional and nullable needs Optional (or json.RawMessage) to tell absent from null, got %v", where, f.typ)
		case optional && !f.omitzero:
			t.Errorf("%s: Optional needs omitzero", where)
		case !req && (f.typ.Kind() == reflect.Slice || f.typ.Kind() == reflect.Map) && f.typ != rawMessageType && !f.omitzero:
			t.Errorf("%s: optional slice or map needs omitzero so that empty is not dropped", where)
		}
		base := f.typ
		switch {
		case optional:
			base = elem
		case base.Kind() == reflect.Pointer:
			base = base.Elem()
		}
		checkGoType(t, where, base, p)
	}
}

// TestTypesAgreeWithSchema walks every $defs entry and its Go type in both
// directions.
func TestTypesAgreeWithSchema(t *testing.T) {
	t.Parallel()
	defs := contract(t)["$defs"].(map[string]any)
	if got, want := slices.Sorted(maps.Keys(goTypes)), slices.Sorted(maps.Keys(defs)); !slices.Equal(got, want) {
		t.Fatalf("Go types for %v, $defs are %v", got, want)
	}
	for name, typ := range goTypes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkStruct(t, name, typ, defs[name].(map[string]any))
		})
	}
}

// Marshalling a zero value emits every required member (null where the
// schema allows it), omits every optional one, and never writes null for a
// non-nullable member.
func TestTypes_ZeroValueMembers(t *testing.T) {
	t.Parallel()
	for name, typ := range goTypes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := defSchema(t, name)
			props := s["properties"].(map[string]any)
			b, err := json.Marshal(reflect.Zero(typ).Interface())
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			for _, r := range s["required"].([]any) {
				if _, ok := got[r.(string)]; !ok {
					t.Errorf("zero %s omits required %q: %s", name, r, b)
				}
			}
			for k, v := range got {
				p := props[k].(map[string]any)
				if !slices.Contains(s["required"].([]any), any(k)) {
					t.Errorf("zero %s emits optional %q: %s", name, k, b)
				}
				if v == nil && !schemaNullable(p) {
					t.Errorf("zero %s writes null for non-nullable %q: %s", name, k, b)
				}
			}
			// Whatever the zero value gets wrong, it is never a missing
			// member or a misplaced null.
			err = flywheel.Validate(flywheel.Def(name), b)
			var ve *flywheel.ValidationError
			if err != nil && !asValidationError(err, &ve) {
				t.Fatal(err)
			}
			if ve != nil {
				for _, v := range ve.Violations {
					if strings.Contains(v.Message, "is required") || strings.Contains(v.Message, "(got null)") {
						t.Errorf("zero %s: %s", name, v)
					}
				}
			}
		})
	}
}

// Every nullable member can be decoded as null and is written back as null;
// every optional member stays absent when absent.
func TestTypes_NullAndAbsentRoundTrip(t *testing.T) {
	t.Parallel()
	for name, typ := range goTypes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := defSchema(t, name)
			base := readExample(t, name, "maximal.json")
			for prop, ps := range s["properties"].(map[string]any) {
				doc := decodeObject(t, base)
				if schemaNullable(ps.(map[string]any)) {
					doc[prop] = nil
					out := roundTrip(t, typ, doc)
					if v, ok := out[prop]; !ok || v != nil {
						t.Errorf("%s.%s: null came back as %v (present %v)", name, prop, v, ok)
					}
				}
				if !slices.Contains(s["required"].([]any), any(prop)) {
					delete(doc, prop)
					if out := roundTrip(t, typ, doc); out[prop] != nil || hasKey(out, prop) {
						t.Errorf("%s.%s: absent came back as %v", name, prop, out[prop])
					}
				}
			}
		})
	}
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

func roundTrip(t *testing.T, typ reflect.Type, doc map[string]any) map[string]any {
	t.Helper()
	in, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.New(typ)
	if err := json.Unmarshal(in, v.Interface()); err != nil {
		t.Fatalf("decode %s: %v", in, err)
	}
	out, err := json.Marshal(v.Elem().Interface())
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return decodeObject(t, out)
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Every example document is valid, decodes into its Go type and encodes
// back to the same canonical JSON.
func TestExamples_RoundTrip(t *testing.T) {
	t.Parallel()
	for name, typ := range goTypes {
		files, err := filepath.Glob(filepath.Join("testdata", "valid", name, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) < 2 {
			t.Errorf("%s: want at least a minimal and a maximal example, have %d", name, len(files))
		}
		for _, f := range files {
			t.Run(name+"/"+filepath.Base(f), func(t *testing.T) {
				t.Parallel()
				raw, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := flywheel.Validate(flywheel.Def(name), raw); err != nil {
					t.Fatalf("example is invalid: %v", err)
				}
				v := reflect.New(typ)
				if err := flywheel.Unmarshal(flywheel.Def(name), raw, v.Interface()); err != nil {
					t.Fatal(err)
				}
				out, err := flywheel.Marshal(flywheel.Def(name), v.Elem().Interface())
				if err != nil {
					t.Fatalf("re-encoded value is invalid: %v", err)
				}
				want, err := jcs.Canonicalize(raw)
				if err != nil {
					t.Fatal(err)
				}
				got, err := jcs.Canonicalize(out)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("round trip changed the document\n got %s\nwant %s", got, want)
				}
			})
		}
	}
}

// Every enum in the contract has exactly one Go constant per value, no
// extra constants, and a list variable in the contract's order.
func TestEnumsAgreeWithSchema(t *testing.T) {
	t.Parallel()
	consts := packageConsts(t)
	enumOf := func(v any) []string {
		var out []string
		for _, x := range v.([]any) {
			out = append(out, x.(string))
		}
		return out
	}
	tcr := defSchema(t, "ToolCallRecord")["properties"].(map[string]any)
	tests := []struct {
		goType string
		enum   []string
		list   []string
	}{
		{"Outcome", enumOf(tcr["outcome"].(map[string]any)["enum"]), strs(flywheel.Outcomes)},
		{"EntityKey", enumOf(tcr["entity_ids"].(map[string]any)["propertyNames"].(map[string]any)["enum"]), strs(flywheel.EntityKeys)},
		{"ExclusionReason", enumOf(defSchema(t, "Exclusion")["properties"].(map[string]any)["reason"].(map[string]any)["enum"]), strs(flywheel.ExclusionReasons)},
		{"Def", slices.Sorted(maps.Keys(contract(t)["$defs"].(map[string]any))), strs(flywheel.Defs)},
	}
	for _, tt := range tests {
		got := slices.Sorted(slices.Values(consts[tt.goType]))
		want := slices.Sorted(slices.Values(tt.enum))
		if !slices.Equal(got, want) {
			t.Errorf("%s constants = %q, want the contract's %q", tt.goType, got, want)
		}
		if tt.goType == "Def" {
			slices.Sort(tt.list)
		}
		if !slices.Equal(tt.list, tt.enum) && !(tt.goType == "Def" && slices.Equal(tt.list, want)) {
			t.Errorf("%s list = %q, want %q in the contract's order", tt.goType, tt.list, tt.enum)
		}
	}
}

func strs[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// enumTypes are the named string types whose constants mirror a contract enum.
var enumTypes = map[string]bool{"Outcome": true, "EntityKey": true, "ExclusionReason": true, "Def": true}

// packageConsts parses the package's non-test sources and returns, per
// enum type, the string values of the constants declared with that type.
func packageConsts(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok || !enumTypes[id.Name] {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Errorf("%s: constant of type %s is not a string literal", f, id.Name)
						continue
					}
					out[id.Name] = append(out[id.Name], strings.Trim(lit.Value, "\"`"))
				}
			}
		}
	}
	return out
}

func readExample(t *testing.T, def, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "valid", def, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
