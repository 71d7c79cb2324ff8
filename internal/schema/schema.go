package schema

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// resourceURL names the compiled document. It is not fetchable, and a
// relative $ref resolves against it to a URL the loader refuses.
const resourceURL = "https://gyre.invalid/schema.json"

// Options says how Compile reads one schema.
type Options struct {
	// Name names the schema in every error ("input_schema", "schema").
	Name string
	// AllowBoolean accepts true and false as the whole schema (a grader may
	// say "anything" or "nothing"). Without it the schema must be a JSON
	// object, as an input_schema is.
	AllowBoolean bool
}

// Compile compiles raw, a JSON Schema gyre does not own, under SPEC §2's
// rule: draft 2020-12 unless the root $schema names draft 4, 6, 7, 2019-09
// or 2020-12 (any other root $schema is an error), formats asserted, every
// URL outside the document and the library's built-in meta-schemas refused
// (ExternalRefError), patterns compiled by CompilePattern. A $schema in an
// embedded resource (a subschema with its own $id) resolves like a $ref,
// inside the document or to a built-in meta-schema, and nowhere else.
//
// The errors are one line, start with opts.Name and unwrap to the library's
// error; the schema is safe for concurrent use.
func Compile(raw []byte, opts Options) (*jsonschema.Schema, error) {
	name := opts.Name
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %w", name, err)
	}
	switch d := doc.(type) {
	case map[string]any:
		if v, ok := d["$schema"]; ok {
			if s, ok := v.(string); !ok || !knownDraft(s) {
				return nil, fmt.Errorf("%s does not compile: $schema %v is not JSON Schema draft 4, 6, 7, 2019-09 or 2020-12", name, v)
			}
		}
	case bool:
		if !opts.AllowBoolean {
			return nil, fmt.Errorf("%s must be a JSON object", name)
		}
	default:
		if opts.AllowBoolean {
			return nil, fmt.Errorf("%s must be an object or a boolean", name)
		}
		return nil, fmt.Errorf("%s must be a JSON object", name)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(RefusingLoader{})
	c.UseRegexpEngine(compileRegexp)
	if err := c.AddResource(resourceURL, doc); err != nil {
		return nil, &compileError{fmt.Sprintf("%s: %s", name, OneLine(err.Error())), err}
	}
	sch, err := c.Compile(resourceURL)
	if err != nil {
		return nil, &compileError{fmt.Sprintf("%s does not compile: %s", name, OneLine(err.Error())), err}
	}
	return sch, nil
}

// knownDraft reports whether s names the meta-schema of draft 4, 6, 7,
// 2019-09 or 2020-12, over http or https, with or without an empty
// fragment.
func knownDraft(s string) bool {
	rest, ok := strings.CutPrefix(s, "https://")
	if !ok {
		if rest, ok = strings.CutPrefix(s, "http://"); !ok {
			return false
		}
	}
	switch strings.TrimSuffix(rest, "#") {
	case "json-schema.org/draft-04/schema",
		"json-schema.org/draft-06/schema",
		"json-schema.org/draft-07/schema",
		"json-schema.org/draft/2019-09/schema",
		"json-schema.org/draft/2020-12/schema":
		return true
	}
	return false
}

// compileError is a compile failure on one line that still unwraps to the
// library's error.
type compileError struct {
	msg string
	err error
}

func (e *compileError) Error() string { return e.msg }
func (e *compileError) Unwrap() error { return e.err }

// RefusingLoader is a jsonschema.URLLoader that refuses every URL. The
// meta-schemas of drafts 4 to 2020-12 are built into the library and never
// reach a loader, so with it $ref and $schema resolve only inside the
// document and to those meta-schemas.
type RefusingLoader struct{}

// Load refuses url with an *ExternalRefError.
func (RefusingLoader) Load(url string) (any, error) {
	return nil, &ExternalRefError{URL: url}
}

// ExternalRefError is the refusal of a URL outside the document. The
// library reports it inside a *jsonschema.LoadURLError.
type ExternalRefError struct {
	// URL is the refused URL, resolved against the document's base.
	URL string
}

// Error says which URL was refused.
func (e *ExternalRefError) Error() string {
	return fmt.Sprintf("external schema reference %s is not allowed", e.URL)
}
