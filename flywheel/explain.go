package flywheel

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/gyrehq/gyre/internal/jcs"
)

// explainer turns jsonschema's error tree into a flat list of violations,
// each with a pointer and a sentence, ordered by where it sits in the text.
type explainer struct {
	// conditions maps the schema URL of each "then" in the contract to the
	// condition its "if" states, e.g. `when outcome is "unknown"`.
	conditions map[string]string
	printer    *message.Printer
}

// patternRules explains each pattern the contract uses in words. A test
// checks that every pattern in the contract has an entry.
var patternRules = map[string]string{
	`^(?!\.{1,2}$)(?!\s)(?!.*\s$)(?!.*[\\/])[^\u0000-\u001F\u007F-\u009F]+$`: "must be an identifier that is one path segment: " +
		`no leading or trailing whitespace, no control characters, no slash or backslash, and not "." or ".."`,
	`^(?!\s)(?!.*\s$)[^\u0000-\u001F\u007F-\u009F]+$`: "must be an identifier with no leading or trailing whitespace and no control characters",
}

// formatRules explains each format the contract asserts.
var formatRules = map[string]string{
	"date-time": "must be an RFC 3339 date-time such as 2025-01-31T12:00:00Z",
	"uri":       "must be an absolute URI",
}

// newExplainer reads the conditions of the contract's if/then rules.
func newExplainer(contract any) explainer {
	e := explainer{conditions: map[string]string{}, printer: message.NewPrinter(language.English)}
	var walk func(v any, ptr string)
	walk = func(v any, ptr string) {
		switch v := v.(type) {
		case map[string]any:
			if cond, ok := v["if"].(map[string]any); ok {
				if _, ok := v["then"]; ok {
					e.conditions[SchemaID+"#"+ptr+"/then"] = describeCondition(cond)
				}
			}
			for k, c := range v {
				walk(c, ptr+"/"+jcs.EscapePointerToken(k))
			}
		case []any:
			for i, c := range v {
				walk(c, ptr+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(contract, "")
	return e
}

// describeCondition renders an "if" made of const properties as words.
func describeCondition(cond map[string]any) string {
	props, _ := cond["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	var parts []string
	for _, name := range names {
		p, _ := props[name].(map[string]any)
		if c, ok := p["const"]; ok {
			b, _ := json.Marshal(c)
			parts = append(parts, fmt.Sprintf("%s is %s", name, b))
		}
	}
	if len(parts) == 0 {
		return "under the contract's if/then rule"
	}
	return "when " + strings.Join(parts, " and ")
}

// leaf is one violation before ordering.
type leaf struct {
	loc     []string
	missing bool // loc names a member that is absent: place it at the parent's end
	kind    jsonschema.ErrorKind
	msg     string
}

// explain flattens verr into violations in document order.
func (e explainer) explain(verr *jsonschema.ValidationError, raw []byte, inst any, subject string) []Violation {
	var leaves []leaf
	e.collect(verr, nil, inst, subject, &leaves)
	if len(leaves) == 0 { // cannot happen for a failed validation; be safe
		leaves = append(leaves, leaf{msg: subject + " does not match the contract"})
	}

	// Order by offset in the text; stable, so ties keep the validator's order.
	locs := make([][]string, len(leaves))
	for i, l := range leaves {
		if l.missing {
			locs[i] = l.loc[:len(l.loc)-1]
		} else {
			locs[i] = l.loc
		}
	}
	offsets := make([]int, len(leaves))
	if raw != nil {
		spans := locate(raw, locs)
		for i, s := range spans {
			switch {
			case !s.found:
				offsets[i] = len(raw)
			case leaves[i].missing:
				offsets[i] = s.end
			default:
				offsets[i] = s.start
			}
		}
	}
	order := make([]int, len(leaves))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return offsets[a] - offsets[b] })

	out := make([]Violation, 0, len(leaves))
	seen := make(map[Violation]bool, len(leaves))
	for _, i := range order {
		v := Violation{Pointer: formatPointer(leaves[i].loc), Message: leaves[i].msg}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// collect appends the leaves under err. trusted is the instance location of
// the nearest ancestor error, used to repair PropertyNames locations.
func (e explainer) collect(err *jsonschema.ValidationError, trusted []string, inst any, subject string, out *[]leaf) {
	loc := err.InstanceLocation
	switch k := err.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
		for _, c := range err.Causes {
			e.collect(c, loc, inst, subject, out)
		}
	case *kind.AnyOf:
		e.pickBranch(err, inst, subject, out)
	case *kind.OneOf:
		if k.Subschemas != nil {
			*out = append(*out, leaf{loc: loc, kind: k, msg: name(loc, subject) + " matches more than one of the alternatives the contract allows, and must match exactly one"})
			return
		}
		e.pickBranch(err, inst, subject, out)
	case *kind.Required:
		for _, m := range k.Missing {
			l := append(slices.Clip(loc), m)
			*out = append(*out, leaf{loc: l, missing: true, kind: k, msg: fmt.Sprintf("%q is required", m)})
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			l := append(slices.Clip(loc), p)
			*out = append(*out, leaf{loc: l, kind: k, msg: fmt.Sprintf("property %q is not allowed here: the contract lists every property this object may have", p)})
		}
	case *kind.PropertyNames:
		parent := repairLocation(loc, trusted, err.SchemaURL, k.Property, inst)
		why := "is not an allowed key"
		var causes []leaf
		for _, c := range err.Causes {
			e.collect(c, nil, k.Property, "key", &causes)
		}
		if len(causes) > 0 {
			why = strings.TrimPrefix(causes[0].msg, "key ")
		}
		l := append(slices.Clip(parent), k.Property)
		*out = append(*out, leaf{loc: l, kind: k, msg: fmt.Sprintf("key %q is not allowed in %s: it %s", k.Property, name(parent, subject), why)})
	default:
		*out = append(*out, leaf{loc: loc, kind: err.ErrorKind, msg: e.message(err, inst, subject)})
	}
}

// pickBranch explains a failed anyOf or oneOf. Branches whose only fault is
// the value's type at this very location are the wrong alternative; of the
// rest, the branch with the fewest violations (then the deepest) is what
// the sender most likely meant. When every branch is the wrong type, one
// violation names the types that would have matched.
func (e explainer) pickBranch(err *jsonschema.ValidationError, inst any, subject string, out *[]leaf) {
	loc := err.InstanceLocation
	var best []leaf
	var want []string
	got := ""
	for _, c := range err.Causes {
		var branch []leaf
		e.collect(c, loc, inst, subject, &branch)
		if len(branch) == 1 && slices.Equal(branch[0].loc, loc) {
			if t, ok := branch[0].kind.(*kind.Type); ok {
				want = append(want, t.Want...)
				got = typeName(resolve(inst, loc), t.Got)
				continue
			}
		}
		if best == nil || len(branch) < len(best) ||
			(len(branch) == len(best) && len(branch) > 0 && len(branch[0].loc) > len(best[0].loc)) {
			best = branch
		}
	}
	if best != nil {
		*out = append(*out, best...)
		return
	}
	msg := name(loc, subject) + " must match one of the contract's alternatives"
	if len(want) > 0 {
		msg = fmt.Sprintf("%s must be %s (got %s)", name(loc, subject), orList(want), got)
	}
	*out = append(*out, leaf{loc: loc, kind: err.ErrorKind, msg: msg})
}

// repairLocation works around jsonschema v6.0.3 storing a PropertyNames
// error's instance location without copying it: later siblings overwrite the
// shared backing array, so the recorded tokens may name another member. Its
// length is still right. The nearest ancestor error's location is a copy and
// is a prefix of the true location; when one token is missing, it is the
// property under which the schema declared propertyNames.
func repairLocation(loc, trusted []string, schemaURL, key string, inst any) []string {
	switch {
	case len(loc) == len(trusted):
		return slices.Clone(trusted)
	case len(loc) == len(trusted)+1:
		const suffix = "/propertyNames"
		parent := strings.TrimSuffix(schemaURL, suffix)
		if i := strings.LastIndex(parent, "/properties/"); i >= 0 && parent != schemaURL {
			tok := strings.NewReplacer("~1", "/", "~0", "~").Replace(parent[i+len("/properties/"):])
			if !strings.Contains(tok, "/") {
				return append(slices.Clone(trusted), tok)
			}
		}
	}
	// Otherwise trust the recorded location only if it holds the key.
	if obj, ok := resolve(inst, loc).(map[string]any); ok {
		if _, ok := obj[key]; ok {
			return slices.Clone(loc)
		}
	}
	return slices.Clone(trusted)
}

// resolve returns the value at loc inside v, or nil.
func resolve(v any, loc []string) any {
	for _, tok := range loc {
		switch c := v.(type) {
		case map[string]any:
			v = c[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			v = c[i]
		default:
			return nil
		}
	}
	return v
}

// name is how a message refers to the value at loc.
func name(loc []string, subject string) string {
	if len(loc) == 0 {
		return subject
	}
	last := loc[len(loc)-1]
	if _, err := strconv.Atoi(last); err == nil && len(loc) > 1 {
		return fmt.Sprintf("%s[%s]", plainName(loc[len(loc)-2]), last)
	}
	return plainName(last)
}

// plainName leaves identifier-like member names bare and quotes the rest.
func plainName(s string) string {
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return strconv.Quote(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

func (e explainer) message(err *jsonschema.ValidationError, inst any, subject string) string {
	n := name(err.InstanceLocation, subject)
	cond := ""
	for then, c := range e.conditions {
		if err.SchemaURL == then || strings.HasPrefix(err.SchemaURL, then+"/") {
			cond = " " + c
		}
	}
	switch k := err.ErrorKind.(type) {
	case *kind.Type:
		return fmt.Sprintf("%s must be %s%s (got %s)", n, orList(k.Want), cond, typeName(resolve(inst, err.InstanceLocation), k.Got))
	case *kind.Enum:
		vals := make([]string, len(k.Want))
		for i, w := range k.Want {
			b, _ := json.Marshal(w)
			vals[i] = string(b)
		}
		return fmt.Sprintf("%s must be one of %s%s", n, strings.Join(vals, ", "), cond)
	case *kind.Const:
		b, _ := json.Marshal(k.Want)
		return fmt.Sprintf("%s must be %s%s", n, b, cond)
	case *kind.MinLength:
		if k.Want == 1 {
			return n + " must not be empty"
		}
		return fmt.Sprintf("%s must be at least %d characters long (got %d)", n, k.Want, k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("%s must be at most %d characters long (got %d)", n, k.Want, k.Got)
	case *kind.Minimum:
		return fmt.Sprintf("%s must be at least %s (got %s)", n, k.Want.RatString(), k.Got.RatString())
	case *kind.Maximum:
		return fmt.Sprintf("%s must be at most %s (got %s)", n, k.Want.RatString(), k.Got.RatString())
	case *kind.MinItems:
		return fmt.Sprintf("%s must have at least %d items (got %d)", n, k.Want, k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("%s must have at most %d items (got %d)", n, k.Want, k.Got)
	case *kind.Pattern:
		if rule, ok := patternRules[k.Want]; ok {
			return n + " " + rule
		}
		return fmt.Sprintf("%s must match the pattern %s", n, k.Want)
	case *kind.Format:
		if rule, ok := formatRules[k.Want]; ok {
			return n + " " + rule
		}
		return fmt.Sprintf("%s must be a valid %s", n, k.Want)
	case *kind.FalseSchema:
		return n + " is not allowed"
	default:
		return n + " " + k.LocalizedString(e.printer)
	}
}

// typeName names v's JSON type, telling integers from other numbers.
func typeName(v any, fallback string) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fallback
}

// orList joins JSON Schema type names: "integer or null".
func orList(items []string) string {
	items = slices.Compact(slices.Clone(items))
	switch len(items) {
	case 0:
		return "something else"
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}
