package grade

import (
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The rules themselves are tested in internal/schema; these tests pin the
// grader's framing of them.

func TestCompileSchema_Errors(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		`[]`: "schema must be an object or a boolean",
		`{`:  "schema is not valid JSON",
		`{"$schema":"https://json-schema.org/schema"}`: "schema does not compile: $schema https://json-schema.org/schema is not JSON Schema draft",
		`{"$ref":"other.json"}`:                        `schema does not compile: failing loading "https://gyre.invalid/other.json": external schema reference https://gyre.invalid/other.json is not allowed`,
	} {
		if _, err := compileSchema([]byte(raw)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error = %v, want prefix %q", raw, err, want)
		}
	}
}

// TestValidateVerdict_Reason pins reasons in the library's own form
// ("at '/a': …", ” for the root), as verdicts always had them.
func TestValidateVerdict_Reason(t *testing.T) {
	t.Parallel()
	tests := []struct{ schema, instance, reason string }{
		{`true`, `5`, "valid against the schema"},
		{`false`, `5`, "schema: at '': false schema"},
		{`{"properties":{"a":{"type":"string"}}}`, `{"a":1}`, "schema: at '/a': got number, want string"},
		{`{"required":["n"]}`, `{}`, "schema: at '': missing property 'n'"},
		{`{"pattern":"^(?=(a+)+b)"}`, `"` + strings.Repeat("a", 64) + `"`, "schema: at '': '" + strings.Repeat("a", 64) + "' does not match pattern '^(?=(a+)+b)'"},
	}
	for _, tt := range tests {
		sch, err := compileSchema([]byte(tt.schema))
		if err != nil {
			t.Fatalf("%s: %v", tt.schema, err)
		}
		doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(tt.instance))
		if got := validateVerdict(sch, doc).Reason; got != tt.reason {
			t.Errorf("%s on %s: reason %q, want %q", tt.schema, tt.instance, got, tt.reason)
		}
	}
}
