package grade

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gyrehq/gyre/internal/jsonpointer"
	"github.com/gyrehq/gyre/internal/schema"
)

// target is where a text grader reads: the answer text, or a JSON Pointer
// into output.
type target struct {
	pointer    string
	tokens     []string
	hasPointer bool
}

func parseTarget(c *config) (target, error) {
	p, ok, err := c.pointer("pointer")
	if err != nil || !ok {
		return target{}, err
	}
	toks, _ := jsonpointer.Split(p)
	return target{pointer: p, tokens: toks, hasPointer: true}, nil
}

func (t target) describe() string {
	if t.hasPointer {
		return "output" + t.pointer
	}
	return "the answer"
}

// text resolves the target; abstain is a Reason… code when it cannot.
func (t target) text(v *view) (s string, abstainCode string) {
	if !t.hasPointer {
		s := v.it.Text()
		if s == nil {
			return "", ReasonTargetNull
		}
		return *s, ""
	}
	out, err := v.output()
	if err != nil || out == nil {
		return "", ReasonTargetNull
	}
	val, ok := jsonpointer.Resolve(out, t.tokens)
	if !ok {
		return "", ReasonPointerNotFound
	}
	if val == nil {
		return "", ReasonTargetNull
	}
	return text(val), ""
}

// textGrader is exact, contains, icontains, not_contains and regex.
type textGrader struct {
	kind  string
	value string
	lower string
	re    *schema.Pattern // RE2, else ECMA-262 with a match timeout (SPEC §2)
	at    target
}

func parseText(kind string) func(c *config) (grader, error) {
	return func(c *config) (grader, error) {
		val, _, err := c.str("value", true)
		if err != nil {
			return nil, err
		}
		g := &textGrader{kind: kind, value: val}
		switch kind {
		case "exact":
			g.value = strings.TrimSpace(val)
		case "icontains":
			g.lower = strings.ToLower(val)
		case "regex":
			m, err := schema.CompilePattern(val)
			if err != nil {
				return nil, c.errf("value", "pattern does not compile: %v", err)
			}
			g.re = m
		}
		if g.at, err = parseTarget(c); err != nil {
			return nil, err
		}
		return g, nil
	}
}

func (g *textGrader) grade(_ context.Context, v *view, _ *Env) Verdict {
	s, code := g.at.text(v)
	if code != "" {
		return abstain(code)
	}
	where := g.at.describe()
	switch g.kind {
	case "exact":
		ok := strings.TrimSpace(s) == g.value
		return judged(ok, fmt.Sprintf("%s %s %q", where, cond(ok, "equals", "does not equal"), g.value))
	case "contains":
		ok := strings.Contains(s, g.value)
		return judged(ok, fmt.Sprintf("%s %s %q", where, cond(ok, "contains", "does not contain"), g.value))
	case "icontains":
		ok := strings.Contains(strings.ToLower(s), g.lower)
		return judged(ok, fmt.Sprintf("%s %s %q (ignoring case)", where, cond(ok, "contains", "does not contain"), g.value))
	case "not_contains":
		found := strings.Contains(s, g.value)
		return judged(!found, fmt.Sprintf("%s %s %q", where, cond(found, "contains", "does not contain"), g.value))
	case "regex":
		ok, err := g.re.Match(s)
		if err != nil {
			return abstain(ReasonRegexTimeout)
		}
		return judged(ok, fmt.Sprintf("%s %s /%s/", where, cond(ok, "matches", "does not match"), g.value))
	}
	return abstain(ReasonNotImplemented)
}

func cond(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

// jsonTarget resolves the JSON document a json_schema or equals_json grader
// reads: output when it is not null, else the answer parsed as JSON; then
// the optional pointer inside it. A verdict is returned when the target
// cannot be read (abstention, or not_json failure).
func jsonTarget(v *view, at target) (any, *Verdict) {
	doc, err := v.output()
	if err != nil {
		vd := fail(ReasonNotJSON)
		return nil, &vd
	}
	if doc == nil {
		if v.it.Text() == nil {
			vd := abstain(ReasonTargetNull)
			return nil, &vd
		}
		doc, err = v.textJSON()
		if err != nil {
			vd := fail(ReasonNotJSON)
			return nil, &vd
		}
	}
	if at.hasPointer {
		val, ok := jsonpointer.Resolve(doc, at.tokens)
		if !ok {
			vd := abstain(ReasonPointerNotFound)
			return nil, &vd
		}
		doc = val
	}
	return doc, nil
}

// equalsJSON compares the JSON target with a value, as JCS would.
type equalsJSON struct {
	want any
	at   target
}

func parseEqualsJSON(c *config) (grader, error) {
	raw, _, err := c.raw("value", true)
	if err != nil {
		return nil, err
	}
	want, err := decodeValue(raw)
	if err != nil {
		return nil, c.errf("value", "value: %v", err)
	}
	g := &equalsJSON{want: want}
	if g.at, err = parseTarget(c); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *equalsJSON) grade(_ context.Context, v *view, _ *Env) Verdict {
	doc, vd := jsonTarget(v, g.at)
	if vd != nil {
		return *vd
	}
	ok := jsonEqual(g.want, doc)
	return judged(ok, cond(ok, "JSON equals the expected value", "JSON differs from the expected value"))
}

// jsonSchemaGrader validates the JSON target against a schema.
type jsonSchemaGrader struct {
	schema *jsonschema.Schema
	at     target
}

func parseJSONSchema(c *config) (grader, error) {
	raw, _, err := c.raw("schema", true)
	if err != nil {
		return nil, err
	}
	sch, err := compileSchema(raw)
	if err != nil {
		return nil, c.errf("schema", "%v", err)
	}
	g := &jsonSchemaGrader{schema: sch}
	if g.at, err = parseTarget(c); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *jsonSchemaGrader) grade(_ context.Context, v *view, _ *Env) Verdict {
	doc, vd := jsonTarget(v, g.at)
	if vd != nil {
		return *vd
	}
	return validateVerdict(g.schema, doc)
}

func validateVerdict(sch *jsonschema.Schema, doc any) Verdict {
	err := sch.Validate(doc)
	if err == nil {
		return pass("valid against the schema")
	}
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return fail("schema: " + shortValidation(ve))
	}
	return fail("schema: " + oneLine(err.Error()))
}
