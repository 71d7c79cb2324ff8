package harnesskit

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gyrehq/gyre/internal/schema"
)

// defaultInputSchema is the contract's default run input: an object with a
// required string "question".
const defaultInputSchema = `{"type":"object","required":["question"],"properties":{"question":{"type":"string"}}}`

// contractURL names the compiled contract. It is not fetchable: the loader
// refuses every URL.
const contractURL = "https://harnesskit.invalid/harness-api-v1.json"

// compileInputSchema compiles a harness's input schema by SPEC §2's rule
// for schemas gyre does not own (see internal/schema): draft 2020-12 unless
// $schema names drafts 4 to 2019-09, formats asserted, no external URLs,
// patterns in RE2 where they compile and otherwise ECMA-262 with a 100 ms
// match timeout.
func compileInputSchema(raw []byte) (*jsonschema.Schema, error) {
	return schema.Compile(raw, schema.Options{Name: "input schema"})
}

// runRequestSchema is the contract's RunRequest schema, compiled once from
// the embedded document.
var runRequestSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(ContractJSON))
	if err != nil {
		return nil, fmt.Errorf("parse contract: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(schema.RefusingLoader{})
	if err := c.AddResource(contractURL, doc); err != nil {
		return nil, fmt.Errorf("add contract: %w", err)
	}
	return c.Compile(contractURL + "#/components/schemas/RunRequest")
})

// schemaError turns a validation failure into a 422 naming the first leaf
// violation and its pointer, prefixed by base (the pointer of the validated
// value in the request body).
func schemaError(code, what, base string, err error) *Error {
	v, ok := schema.FirstViolation(err)
	if !ok {
		return errorf(code, "%s: %s", what, oneLine(err.Error()))
	}
	v.Pointer = base + v.Pointer
	return errorf(code, "%s: %s", what, v).at(v.Pointer)
}

// oneLine collapses whitespace runs and caps the length of a message.
func oneLine(s string) string { return schema.OneLine(s) }
