package grade

import (
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gyrehq/gyre/internal/schema"
)

// compileSchema compiles a suite's JSON Schema by SPEC §2's rule for
// schemas gyre does not own (see internal/schema): draft 2020-12 by
// default, formats asserted, no external URLs, patterns in RE2 where they
// compile and otherwise ECMA-262 with a 100 ms match timeout (a timeout is
// a validation error). true and false are schemas too.
func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	return schema.Compile(raw, schema.Options{Name: "schema", AllowBoolean: true})
}

// shortValidation is the first leaf error of a validation failure, one line.
func shortValidation(ve *jsonschema.ValidationError) string {
	v, _ := schema.FirstViolation(ve)
	return oneLine(v.Leaf.Error())
}

// oneLine collapses whitespace runs and caps the length of a message.
func oneLine(s string) string { return schema.OneLine(s) }
