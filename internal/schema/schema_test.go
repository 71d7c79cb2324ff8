package schema_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gyrehq/gyre/internal/schema"
)

// compile compiles a schema the way an input_schema is compiled.
func compile(t *testing.T, raw string) (*jsonschema.Schema, error) {
	t.Helper()
	return schema.Compile([]byte(raw), schema.Options{Name: "input_schema"})
}

// mustCompile compiles a schema that must compile.
func mustCompile(t *testing.T, raw string) *jsonschema.Schema {
	t.Helper()
	sch, err := compile(t, raw)
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return sch
}

// validity is one instance checked against one schema.
type validity struct {
	name, schema, instance string
	valid                  bool
}

// runValidity checks every instance against its schema.
func runValidity(t *testing.T, tests []validity) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := validate(t, mustCompile(t, tt.schema), tt.instance); got != tt.valid {
				t.Errorf("%s valid = %v, want %v", tt.instance, got, tt.valid)
			}
		})
	}
}

// validate reports whether instance is valid against sch; it fails the
// test when the error is not a validation error.
func validate(t *testing.T, sch *jsonschema.Schema, instance string) bool {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(instance))
	if err != nil {
		t.Fatalf("instance %s: %v", instance, err)
	}
	err = sch.Validate(doc)
	if err == nil {
		return true
	}
	if _, ok := schema.FirstViolation(err); !ok {
		t.Fatalf("instance %s: not a validation error: %v", instance, err)
	}
	return false
}

func TestCompile_RootSchema(t *testing.T) {
	t.Parallel()
	const (
		d4   = "http://json-schema.org/draft-04/schema#"
		d6   = "http://json-schema.org/draft-06/schema#"
		d7   = "http://json-schema.org/draft-07/schema#"
		d19  = "https://json-schema.org/draft/2019-09/schema"
		d20  = "https://json-schema.org/draft/2020-12/schema"
		with = `,"prefixItems":[{"type":"string"}]}`
	)
	tests := []struct {
		name    string
		schema  string
		wantErr string // "" compiles
		// prefixItems is a 2020-12 keyword: earlier drafts ignore it, so
		// [1] is valid exactly when the schema is not draft 2020-12.
		lenient bool
	}{
		{name: "no $schema is 2020-12", schema: `{"type":"array"` + with},
		{name: "draft 4", schema: `{"$schema":"` + d4 + `"` + with, lenient: true},
		{name: "draft 6", schema: `{"$schema":"` + d6 + `"` + with, lenient: true},
		{name: "draft 7", schema: `{"$schema":"` + d7 + `"` + with, lenient: true},
		{name: "draft 7 over https without #", schema: `{"$schema":"https://json-schema.org/draft-07/schema"` + with, lenient: true},
		{name: "2019-09", schema: `{"$schema":"` + d19 + `"` + with, lenient: true},
		{name: "2019-09 with #", schema: `{"$schema":"` + d19 + `#"` + with, lenient: true},
		{name: "2020-12", schema: `{"$schema":"` + d20 + `"` + with},
		{name: "2020-12 over http with #", schema: `{"$schema":"http://json-schema.org/draft/2020-12/schema#"` + with},
		{name: "custom meta-schema", schema: `{"$schema":"https://example.com/meta"}`, wantErr: "input_schema does not compile: $schema https://example.com/meta is not JSON Schema draft 4, 6, 7, 2019-09 or 2020-12"},
		{name: "latest alias names no draft", schema: `{"$schema":"https://json-schema.org/schema"}`, wantErr: "is not JSON Schema draft"},
		{name: "draft 3", schema: `{"$schema":"http://json-schema.org/draft-03/schema#"}`, wantErr: "is not JSON Schema draft"},
		{name: "fragment", schema: `{"$schema":"https://json-schema.org/draft/2020-12/schema#/$defs/x"}`, wantErr: "is not JSON Schema draft"},
		{name: "other scheme", schema: `{"$schema":"ftp://json-schema.org/draft-07/schema#"}`, wantErr: "is not JSON Schema draft"},
		{name: "the document itself", schema: `{"$schema":"https://gyre.invalid/schema.json"}`, wantErr: "is not JSON Schema draft"},
		{name: "not a string", schema: `{"$schema":7}`, wantErr: "$schema 7 is not JSON Schema draft"},
		{name: "null", schema: `{"$schema":null}`, wantErr: "is not JSON Schema draft"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sch, err := compile(t, tt.schema)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := validate(t, sch, `[1]`); got != tt.lenient {
				t.Errorf("[1] valid = %v, want %v (draft not applied)", got, tt.lenient)
			}
		})
	}
}

func TestCompile_DraftSemantics(t *testing.T) {
	t.Parallel()
	// Draft 4's exclusiveMinimum is a boolean beside minimum; from draft 6
	// on it is a number, so the draft-4 form does not compile as 2020-12.
	sch := mustCompile(t, `{"$schema":"http://json-schema.org/draft-04/schema#","minimum":5,"exclusiveMinimum":true}`)
	if validate(t, sch, `5`) || !validate(t, sch, `6`) {
		t.Error("draft 4 exclusiveMinimum not applied")
	}
	if _, err := compile(t, `{"minimum":5,"exclusiveMinimum":true}`); err == nil {
		t.Error("draft-4 exclusiveMinimum compiled as 2020-12")
	}
}

func TestCompile_RefusesExternalURLs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, url string
	}{
		{"absolute $ref", `{"$ref":"https://example.com/s.json"}`, "https://example.com/s.json"},
		{"plain http", `{"properties":{"a":{"$ref":"http://example.com/a.json#/x"}}}`, "http://example.com/a.json"},
		{"file $ref", `{"$ref":"file:///etc/passwd"}`, "file:///etc/passwd"},
		{"relative $ref", `{"$ref":"other.json"}`, "https://gyre.invalid/other.json"},
		{"relative to an $id", `{"$id":"https://evil.example/x/","$ref":"y.json"}`, "https://evil.example/x/y.json"},
		{"urn", `{"$ref":"urn:example:thing"}`, "urn:example:thing"},
		{"$schema of an embedded resource", `{"$defs":{"a":{"$id":"https://example.com/a.json","$schema":"https://example.com/meta"}}}`, "https://example.com/meta"},
		{"$dynamicRef", `{"$dynamicRef":"https://example.com/d.json#meta"}`, "https://example.com/d.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := compile(t, tt.schema)
			var lue *jsonschema.LoadURLError
			if !errors.As(err, &lue) {
				t.Fatalf("error = %v, want a refused load", err)
			}
			var ere *schema.ExternalRefError
			if !errors.As(lue.Err, &ere) || ere.URL != tt.url {
				t.Fatalf("load error = %v, want the refusal of %s", lue.Err, tt.url)
			}
			want := "input_schema does not compile: failing loading \"" + tt.url + "\": external schema reference " + tt.url + " is not allowed"
			if err.Error() != want {
				t.Errorf("error = %q, want %q", err, want)
			}
		})
	}
}

func TestCompile_ResolvesInsideTheDocument(t *testing.T) {
	t.Parallel()
	const (
		defs     = `{"$defs":{"n":{"type":"integer"}},"properties":{"n":{"$ref":"#/$defs/n"}}}`
		embedded = `{"$defs":{"s":{"$id":"https://example.com/s.json","type":"string"}},"$ref":"https://example.com/s.json"}`
		anchor   = `{"$defs":{"s":{"$anchor":"str","type":"string"}},"$ref":"#str"}`
		self     = `{"type":"object","properties":{"child":{"$ref":"#"}},"additionalProperties":false}`
		draft7   = `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"n":{"type":"integer"}},"$ref":"#/definitions/n"}`
	)
	runValidity(t, []validity{
		{"$defs pointer", defs, `{"n":1}`, true},
		{"$defs pointer fails", defs, `{"n":"x"}`, false},
		{"embedded $id", embedded, `"x"`, true},
		{"embedded $id fails", embedded, `1`, false},
		{"anchor", anchor, `"x"`, true},
		{"anchor fails", anchor, `1`, false},
		{"recursive", self, `{"child":{"child":{}}}`, true},
		{"recursive fails", self, `{"child":{"x":1}}`, false},
		{"draft-07 definitions", draft7, `3`, true},
		{"draft-07 definitions fails", draft7, `"3"`, false},
	})
}

func TestCompile_Shape(t *testing.T) {
	t.Parallel()
	grader := schema.Options{Name: "schema", AllowBoolean: true}
	input := schema.Options{Name: "input schema"}
	tests := []struct {
		name    string
		raw     string
		opts    schema.Options
		wantErr string
	}{
		{"object", `{"type":"object"}`, input, ""},
		{"boolean refused", `true`, input, "input schema must be a JSON object"},
		{"array refused", `[]`, input, "input schema must be a JSON object"},
		{"null refused", `null`, input, "input schema must be a JSON object"},
		{"boolean allowed", `false`, grader, ""},
		{"array with booleans allowed", `[]`, grader, "schema must be an object or a boolean"},
		{"string with booleans allowed", `"x"`, grader, "schema must be an object or a boolean"},
		{"not JSON", `{"type":`, input, "input schema is not valid JSON"},
		{"empty", ``, grader, "schema is not valid JSON"},
		{"invalid keyword value", `{"type":7}`, input, "input schema does not compile: "},
		{"pattern no engine compiles", `{"pattern":"(?<"}`, input, "input schema does not compile: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := schema.Compile([]byte(tt.raw), tt.opts)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatal(err)
			case tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)):
				t.Fatalf("error = %v, want prefix %q", err, tt.wantErr)
			case err != nil && strings.ContainsAny(err.Error(), "\n\t"):
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestCompile_CompileErrorUnwraps(t *testing.T) {
	t.Parallel()
	_, err := compile(t, `{"type":7}`)
	var sve *jsonschema.SchemaValidationError
	if !errors.As(err, &sve) {
		t.Fatalf("error %v does not unwrap to the library's", err)
	}
}

func TestCompile_Patterns(t *testing.T) {
	t.Parallel()
	runValidity(t, []validity{
		{"RE2 pattern matches", `{"pattern":"^[0-9]+$"}`, `"1042"`, true},
		{"RE2 pattern fails", `{"pattern":"^[0-9]+$"}`, `"10a"`, false},
		{"ECMA lookahead matches", `{"pattern":"^(?=.*[0-9]).+$"}`, `"a1"`, true},
		{"ECMA lookahead fails", `{"pattern":"^(?=.*[0-9]).+$"}`, `"abc"`, false},
		{"ECMA negative lookahead", `{"pattern":"^(?!draft)"}`, `"draft 2"`, false},
		{"ECMA backreference", `{"pattern":"^(a|b)\\1$"}`, `"aa"`, true},
		{"ECMA backreference fails", `{"pattern":"^(a|b)\\1$"}`, `"ab"`, false},
		{"ECMA patternProperties", `{"patternProperties":{"^(?=x)":{"type":"string"}}}`, `{"xa":1}`, false},
		{"ECMA patternProperties other key", `{"patternProperties":{"^(?=x)":{"type":"string"}}}`, `{"ya":1}`, true},
		// Linear in RE2: a backtracking engine would time out here.
		{"RE2 nested quantifier", `{"pattern":"^(a+)+$"}`, `"` + strings.Repeat("a", 64) + `!"`, false},
		// The lookahead forces the ECMA engine, whose backtracking on the
		// nested quantifier outlasts MatchTimeout: a timeout is a
		// validation error, neither a hang nor a pass.
		{"ECMA timeout is invalid", `{"pattern":"^(?=(a+)+b)"}`, `"` + strings.Repeat("a", 64) + `"`, false},
	})
}

func TestCompile_Formats(t *testing.T) {
	t.Parallel()
	runValidity(t, []validity{
		{"date asserted", `{"format":"date"}`, `"not a date"`, false},
		{"date ok", `{"format":"date"}`, `"2024-02-29"`, true},
		{"email asserted", `{"format":"email"}`, `"not an email"`, false},
		{"date-time asserted", `{"format":"date-time"}`, `"yesterday"`, false},
		{"uri asserted", `{"format":"uri"}`, `"no scheme"`, false},
		{"asserted in draft 7", `{"$schema":"http://json-schema.org/draft-07/schema#","format":"date"}`, `"x"`, false},
		{"asserted in draft 4", `{"$schema":"http://json-schema.org/draft-04/schema#","format":"email"}`, `"x"`, false},
		{"asserted in 2019-09", `{"$schema":"https://json-schema.org/draft/2019-09/schema","format":"date"}`, `"x"`, false},
		{"non-strings pass", `{"format":"date"}`, `5`, true},
		{"unknown format ignored", `{"format":"order-id"}`, `"anything"`, true},
		{"regex format takes ECMA syntax", `{"format":"regex"}`, `"(?=a)b"`, true},
		{"regex format refuses what no engine compiles", `{"format":"regex"}`, `"(?<"`, false},
	})
}

func TestCompile_ConcurrentValidation(t *testing.T) {
	t.Parallel()
	sch := mustCompile(t, `{"properties":{"p":{"pattern":"^(?=.*[0-9])"},"q":{"pattern":"^[a-z]+$"}}}`)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			doc := map[string]any{"p": "a1", "q": "abc"}
			if i%2 == 1 {
				doc = map[string]any{"p": "ab", "q": "abc"}
			}
			if err := sch.Validate(doc); (err == nil) != (i%2 == 0) {
				t.Errorf("goroutine %d: %v", i, err)
			}
		})
	}
	wg.Wait()
}
