package eval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// DefaultInputSchema is the run input a harness accepts when its
// capabilities declare no input_schema: an object with a required string
// "question" (Harness API v1, Capabilities.input_schema).
const DefaultInputSchema = `{"type":"object","required":["question"],"properties":{"question":{"type":"string"}}}`

// inputSchemaURL names the compiled schema resource. It is not fetchable:
// the loader refuses every URL.
const inputSchemaURL = "https://gyre.invalid/harness-input-schema.json"

// ecmaMatchTimeout bounds one ECMA-262 pattern match (SPEC §2); a timeout
// is a validation error.
const ecmaMatchTimeout = 100 * time.Millisecond

// knownDrafts are the $schema values an input schema may declare (SPEC
// §7.2: drafts 4 to 2020-12; any other $schema is an error).
var knownDrafts = map[string]bool{}

func init() {
	for _, p := range []string{
		"json-schema.org/draft-04/schema",
		"json-schema.org/draft-06/schema",
		"json-schema.org/draft-07/schema",
		"json-schema.org/draft/2019-09/schema",
		"json-schema.org/draft/2020-12/schema",
	} {
		for _, scheme := range []string{"http://", "https://"} {
			knownDrafts[scheme+p] = true
			knownDrafts[scheme+p+"#"] = true
		}
	}
}

// printer renders validation messages.
var printer = message.NewPrinter(language.English)

// refuseLoader refuses every URL: $ref and $schema resolve only inside the
// document and to the meta-schemas the library embeds (drafts 4, 6, 7,
// 2019-09 and 2020-12), which never reach a loader.
type refuseLoader struct{}

// Load refuses url.
func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema reference %s is not allowed", url)
}

// InputSchema checks case inputs against a harness's input schema.
type InputSchema struct {
	schema *jsonschema.Schema
	// Declared is false for the default question schema.
	Declared bool
}

// CompileInputSchema compiles raw, a harness's declared input_schema, or
// the default question schema when raw is empty or JSON null. Draft
// 2020-12 applies unless $schema names drafts 4, 6, 7 or 2019-09; any other
// $schema, and every external reference, is an error. Formats are
// asserted; patterns run with RE2 where they compile, else with an
// ECMA-262 engine and a 100 ms match timeout.
func CompileInputSchema(raw json.RawMessage) (*InputSchema, error) {
	declared := true
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		raw, declared = json.RawMessage(DefaultInputSchema), false
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("input_schema is not valid JSON: %w", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("input_schema must be a JSON object")
	}
	if v, has := obj["$schema"]; has {
		s, ok := v.(string)
		if !ok || !knownDrafts[s] {
			return nil, fmt.Errorf("input_schema $schema %v is not JSON Schema draft 4, 6, 7, 2019-09 or 2020-12", v)
		}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refuseLoader{})
	c.UseRegexpEngine(schemaRegexp)
	if err := c.AddResource(inputSchemaURL, doc); err != nil {
		return nil, fmt.Errorf("input_schema: %s", oneLine(err.Error()))
	}
	sch, err := c.Compile(inputSchemaURL)
	if err != nil {
		return nil, fmt.Errorf("input_schema does not compile: %s", oneLine(err.Error()))
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
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return errors.New(oneLine(err.Error()))
		}
		leaf := ve
		for len(leaf.Causes) > 0 {
			leaf = leaf.Causes[0]
		}
		ptr := ""
		for _, tok := range leaf.InstanceLocation {
			ptr += "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
		}
		if ptr == "" {
			ptr = "/"
		}
		return fmt.Errorf("at %s: %s", ptr, oneLine(leaf.ErrorKind.LocalizedString(printer)))
	}
	return nil
}

type re2Regexp struct{ *regexp.Regexp }

type ecmaRegexp struct{ re *regexp2.Regexp }

// MatchString reports a match; a timeout is no match, so a validation
// error.
func (r ecmaRegexp) MatchString(s string) bool {
	ok, err := r.re.MatchString(s)
	return err == nil && ok
}

// String returns the pattern.
func (r ecmaRegexp) String() string { return r.re.String() }

func schemaRegexp(p string) (jsonschema.Regexp, error) {
	if re, err := regexp.Compile(p); err == nil {
		return re2Regexp{re}, nil
	}
	re, err := regexp2.Compile(p, regexp2.ECMAScript)
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = ecmaMatchTimeout
	return ecmaRegexp{re}, nil
}

// oneLine collapses whitespace runs and caps the length of a message.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const limit = 300
	if len(s) > limit {
		cut := limit
		for cut > 0 && (s[cut]&0xC0) == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
