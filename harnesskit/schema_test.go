package harnesskit

import (
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The rules themselves are tested in internal/schema; these tests pin
// harnesskit's framing of them.

func TestCompileInputSchema_Errors(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		`{`:                                      "input schema is not valid JSON",
		`{"type":7}`:                             "input schema does not compile: ",
		`{"$schema":"https://example.com/meta"}`: "input schema does not compile: $schema https://example.com/meta is not JSON Schema draft",
		`{"$ref":"https://example.com/s.json"}`:  `input schema does not compile: failing loading "https://example.com/s.json": external schema reference https://example.com/s.json is not allowed`,
	} {
		if _, err := compileInputSchema([]byte(raw)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error = %v, want prefix %q", raw, err, want)
		}
	}
}

// TestSchemaError checks the 422's message and pointer, below the base
// pointer of the validated value.
func TestSchemaError(t *testing.T) {
	t.Parallel()
	tests := []struct{ schema, input, base, msg, ptr string }{
		{defaultInputSchema, `{}`, "", "input: at /: missing property 'question'", ""},
		{defaultInputSchema, `{}`, "/input", "input: at /input: missing property 'question'", "/input"},
		{`{"properties":{"a/b~":{"type":"string"}}}`, `{"a/b~":1}`, "/input", "input: at /input/a~1b~0: got number, want string", "/input/a~1b~0"},
		{`{"properties":{"p":{"pattern":"^(?=.*[0-9])"}}}`, `{"p":"abc"}`, "/input", "input: at /input/p: 'abc' does not match pattern '^(?=.*[0-9])'", "/input/p"},
	}
	for _, tt := range tests {
		sch, err := compileInputSchema([]byte(tt.schema))
		if err != nil {
			t.Fatalf("%s: %v", tt.schema, err)
		}
		doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(tt.input))
		e := schemaError(CodeInvalidInput, "input", tt.base, sch.Validate(doc))
		if e.Code != CodeInvalidInput || e.Message != tt.msg || e.Pointer != tt.ptr {
			t.Errorf("%s on %s: got %s %q at %q, want %q at %q", tt.schema, tt.input, e.Code, e.Message, e.Pointer, tt.msg, tt.ptr)
		}
	}
}
