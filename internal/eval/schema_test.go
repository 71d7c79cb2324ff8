package eval

import (
	"encoding/json"
	"strings"
	"testing"
)

// The rules themselves are tested in internal/schema (and the behaviour in
// TestInputSchema); these tests pin eval's framing of them.

func TestCompileInputSchema_Errors(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		`true`:                                   "input_schema must be a JSON object",
		`{`:                                      "input_schema is not valid JSON",
		`{"$schema":"https://example.com/meta"}`: "input_schema does not compile: $schema https://example.com/meta is not JSON Schema draft 4, 6, 7, 2019-09 or 2020-12",
		`{"$ref":"https://example.com/x.json"}`:  `input_schema does not compile: failing loading "https://example.com/x.json": external schema reference https://example.com/x.json is not allowed`,
	} {
		if _, err := CompileInputSchema(json.RawMessage(raw)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error = %v, want prefix %q", raw, err, want)
		}
	}
}

func TestInputSchema_Check(t *testing.T) {
	t.Parallel()
	tests := []struct {
		schema, input string
		declared      bool
		want          string // "" passes
	}{
		{``, `{"q":1}`, false, "at /: missing property 'question'"},
		{` null `, `{"question":7}`, false, "at /question: got number, want string"},
		{`{"properties":{"a/b":{"type":"string"}}}`, `{"a/b":1}`, true, "at /a~1b: got number, want string"},
		{`{"type":"object"}`, `{}`, true, ""},
		{`{}`, `{`, true, "input is not valid JSON: "},
	}
	for _, tt := range tests {
		s, err := CompileInputSchema(json.RawMessage(tt.schema))
		if err != nil {
			t.Fatalf("%s: %v", tt.schema, err)
		}
		if s.Declared != tt.declared {
			t.Errorf("%q: Declared = %v, want %v", tt.schema, s.Declared, tt.declared)
		}
		err = s.Check(json.RawMessage(tt.input))
		if (err == nil) != (tt.want == "") || err != nil && !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q on %s: Check = %v, want %q", tt.schema, tt.input, err, tt.want)
		}
	}
}
