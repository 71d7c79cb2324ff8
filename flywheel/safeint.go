package flywheel

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/message"
)

// maxSafeInteger is 2^53−1, the largest integer every IEEE 754 double
// reader, and so RFC 8785 canonical JSON, carries exactly (RFC 7493 §2.2).
const maxSafeInteger = 1<<53 - 1

// safeIntegerVocabulary adds one rule to every schema whose type admits
// "integer": the value must lie within ±(2^53−1). JSON Schema itself puts no
// bound on integers, but gyre hashes bodies as canonical JSON and decodes
// them into Go ints; a larger integer would be silently rounded by the one
// and could overflow the other. Running as a vocabulary keeps the check
// inside the validator, so its violation has the right pointer.
func safeIntegerVocabulary() *jsonschema.Vocabulary {
	return &jsonschema.Vocabulary{
		URL: "https://gyre.dev/vocab/safe-integer",
		Compile: func(_ *jsonschema.CompilerContext, obj map[string]any) (jsonschema.SchemaExt, error) {
			if admitsInteger(obj["type"]) {
				return safeInteger{}, nil
			}
			return nil, nil
		},
	}
}

func admitsInteger(t any) bool {
	switch t := t.(type) {
	case string:
		return t == "integer"
	case []any:
		return slices.Contains(t, any("integer"))
	}
	return false
}

type safeInteger struct{}

// Validate runs after the type check, so a number here is integral.
func (safeInteger) Validate(ctx *jsonschema.ValidatorContext, v any) {
	n, ok := v.(json.Number)
	if !ok {
		return
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f > maxSafeInteger || f < -maxSafeInteger {
		ctx.AddError(&unsafeIntegerKind{})
	}
}

// unsafeIntegerKind is the jsonschema.ErrorKind of the safe-integer rule.
type unsafeIntegerKind struct{}

// KeywordPath attributes the rule to the "type" keyword it extends.
func (*unsafeIntegerKind) KeywordPath() []string { return []string{"type"} }

// LocalizedString states the rule.
func (*unsafeIntegerKind) LocalizedString(*message.Printer) string {
	return "must be an integer within ±9007199254740991 (RFC 7493 §2.2)"
}
