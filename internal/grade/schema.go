package grade

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaURL is the resource name a grader's schema is compiled under. It is
// not fetchable: every non-meta-schema URL is refused.
const schemaURL = "https://gyre.invalid/grader-schema.json"

// errExternalRef is returned for every external schema reference.
var errExternalRef = errors.New("external schema references are not allowed")

type refuseLoader struct{}

// Load refuses every URL: $ref and $schema resolve only inside the document
// and to the meta-schemas the library embeds (drafts 4, 6, 7, 2019-09,
// 2020-12), which never reach a loader.
func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%w: %s", errExternalRef, url)
}

// compileSchema compiles a suite's JSON Schema (SPEC §2): draft 2020-12 by
// default, formats asserted, no external URLs, patterns in RE2 where they
// compile and otherwise ECMA-262 with a 100 ms match timeout (a timeout is a
// validation error).
func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schema is not valid JSON: %w", err)
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, errors.New("schema must be an object or a boolean")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refuseLoader{})
	c.UseRegexpEngine(schemaRegexp)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("schema does not compile: %s", oneLine(err.Error()))
	}
	return sch, nil
}

type re2Regexp struct{ *regexp.Regexp }

type ecmaRegexp struct{ re *regexp2.Regexp }

// MatchString reports a match; a timeout is no match.
func (r ecmaRegexp) MatchString(s string) bool {
	ok, err := r.re.MatchString(s)
	return err == nil && ok // a timeout does not match: a validation error
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

// shortValidation is the first leaf error of a validation failure, one line.
func shortValidation(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return oneLine(ve.Error())
}

// oneLine collapses whitespace runs and caps the length of a message.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const max = 300
	if len(s) > max {
		cut := max
		for cut > 0 && (s[cut]&0xC0) == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
