package harnesskit

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer renders validation messages.
var printer = message.NewPrinter(language.English)

// defaultInputSchema is the contract's default run input: an object with a
// required string "question".
const defaultInputSchema = `{"type":"object","required":["question"],"properties":{"question":{"type":"string"}}}`

// inputSchemaURL and contractURL name the compiled resources. Neither is
// fetchable: the loader refuses every URL.
const (
	inputSchemaURL = "https://harnesskit.invalid/input-schema.json"
	contractURL    = "https://harnesskit.invalid/harness-api-v1.json"
)

// ecmaMatchTimeout bounds one ECMA-262 pattern match in an input schema
// (SPEC §2); a timeout is a validation error.
const ecmaMatchTimeout = 100 * time.Millisecond

// refuseLoader refuses every URL: $ref and $schema resolve only inside the
// document and to the meta-schemas the library embeds (drafts 4, 6, 7,
// 2019-09 and 2020-12), which never reach a loader.
type refuseLoader struct{}

// Load refuses url.
func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema reference %s is not allowed", url)
}

// compileInputSchema compiles a harness's input schema (SPEC §2): draft
// 2020-12 unless $schema says otherwise, formats asserted, no external
// URLs, patterns in RE2 where they compile and otherwise ECMA-262 with a
// 100 ms match timeout.
func compileInputSchema(raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("input schema is not valid JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refuseLoader{})
	c.UseRegexpEngine(schemaRegexp)
	if err := c.AddResource(inputSchemaURL, doc); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	sch, err := c.Compile(inputSchemaURL)
	if err != nil {
		return nil, fmt.Errorf("input schema does not compile: %s", oneLine(err.Error()))
	}
	return sch, nil
}

type re2Regexp struct{ *regexp.Regexp }

type ecmaRegexp struct{ re *regexp2.Regexp }

// MatchString reports a match; a timeout is no match.
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
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(contractURL, doc); err != nil {
		return nil, fmt.Errorf("add contract: %w", err)
	}
	return c.Compile(contractURL + "#/components/schemas/RunRequest")
})

// schemaError turns a validation failure into a 422 naming the first leaf
// violation and its pointer, prefixed by base (the pointer of the validated
// value in the request body).
func schemaError(code, what, base string, err error) *Error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return errorf(code, "%s: %s", what, oneLine(err.Error()))
	}
	leaf := ve
	for len(leaf.Causes) > 0 {
		leaf = leaf.Causes[0]
	}
	ptr := base
	for _, tok := range leaf.InstanceLocation {
		ptr += "/" + pointerEscaper.Replace(tok)
	}
	msg := oneLine(leaf.ErrorKind.LocalizedString(printer))
	where := ptr
	if where == "" {
		where = "/"
	}
	return errorf(code, "%s: at %s: %s", what, where, msg).at(ptr)
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
