package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gyrehq/gyre/internal/schema"
)

// DefaultInputSchema is the run input a harness accepts when its
// capabilities declare no input_schema: an object with a required string
// "question" (Harness API v1, Capabilities.input_schema).
const DefaultInputSchema = `{"type":"object","required":["question"],"properties":{"question":{"type":"string"}}}`

// InputSchema checks case inputs against a harness's input schema.
type InputSchema struct {
	schema *jsonschema.Schema
	// Declared is false for the default question schema.
	Declared bool
}

// CompileInputSchema compiles raw, a harness's declared input_schema, or
// the default question schema when raw is empty or JSON null, by SPEC §2's
// rule for schemas gyre does not own (see internal/schema). Draft 2020-12
// applies unless $schema names drafts 4, 6, 7 or 2019-09; any other
// $schema, and every external reference, is an error. Formats are
// asserted; patterns run with RE2 where they compile, else with an
// ECMA-262 engine and a 100 ms match timeout.
func CompileInputSchema(raw json.RawMessage) (*InputSchema, error) {
	declared := true
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		raw, declared = json.RawMessage(DefaultInputSchema), false
	}
	sch, err := schema.Compile(raw, schema.Options{Name: "input_schema"})
	if err != nil {
		return nil, err
	}
	return &InputSchema{schema: sch, Declared: declared}, nil
}

// Check validates one case input (JSON) and returns the first violation
// as "at /pointer: reason".
func (s *InputSchema) Check(input json.RawMessage) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return fmt.Errorf("input is not valid JSON: %w", err)
	}
	if err := s.schema.Validate(v); err != nil {
		if vi, ok := schema.FirstViolation(err); ok {
			return errors.New(vi.String())
		}
		return errors.New(schema.OneLine(err.Error()))
	}
	return nil
}
