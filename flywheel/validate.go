package flywheel

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gyrehq/gyre/internal/jcs"
)

// Violation is one way a body breaks the contract.
type Violation struct {
	// Pointer is the RFC 6901 JSON Pointer of the offending member: the
	// value at fault, the missing property (its parent's pointer plus its
	// name), the extra or duplicate property, or "" for the whole body.
	Pointer string `json:"pointer"`
	// Message is a human sentence saying what is wrong.
	Message string `json:"message"`
}

// String returns "pointer: message", or the message alone for the root.
func (v Violation) String() string {
	if v.Pointer == "" {
		return v.Message
	}
	return v.Pointer + ": " + v.Message
}

// ValidationError reports every violation of a body, ordered by where each
// appears in the JSON text: Violations[0] is the first offending field in
// document order, the one a 422 invalid_body answer points at. A violation
// at an existing member is placed at its key (or at the value, for array
// elements and the root); a missing required member is placed at its parent
// object's closing brace, where a reader learns it is missing.
type ValidationError struct {
	// Def is the definition the body was validated against; it is empty
	// for the bare identifier checks (ValidateAgentID, ValidateTurnID).
	Def Def
	// Violations is never empty.
	Violations []Violation
}

// First returns the first violation in document order.
func (e *ValidationError) First() Violation { return e.Violations[0] }

// Error reports the first violation and how many follow.
func (e *ValidationError) Error() string {
	var b strings.Builder
	what := string(e.Def)
	if what == "" {
		what = "value"
	}
	fmt.Fprintf(&b, "flywheel: invalid %s: %s", what, e.Violations[0])
	if n := len(e.Violations) - 1; n > 0 {
		fmt.Fprintf(&b, " (and %d more)", n)
	}
	return b.String()
}

// ErrUnknownDef is returned when asked to validate against a name that is
// not one of Defs.
var ErrUnknownDef = errors.New("flywheel: unknown definition")

// Validator validates bodies against the embedded contract with a draft
// 2020-12 validator: formats asserted, patterns with ECMA-262 semantics (see
// regex.go), if/then and additionalProperties:false enforced. Beyond the
// schema it rejects what gyre cannot store faithfully, each with a pointer:
// text that is not I-JSON (invalid UTF-8, duplicate object keys, unpaired
// surrogate escapes, numbers outside the double range; see internal/jcs) and
// integer members beyond ±(2^53−1), which RFC 7493 §2.2 and canonical JSON
// cannot carry exactly.
//
// A Validator is immutable once built and safe for concurrent use.
type Validator struct {
	schemas   map[Def]*jsonschema.Schema
	agentID   *jsonschema.Schema
	turnID    *jsonschema.Schema
	explainer explainer
}

// NewValidator compiles the embedded contract. Most callers use the
// package-level functions, which share one Validator.
func NewValidator() (*Validator, error) {
	doc, err := jcs.Parse(ContractJSON)
	if err != nil {
		return nil, fmt.Errorf("flywheel: parse contract: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseRegexpEngine(compileECMA)
	c.UseLoader(noLoader{})
	c.RegisterVocabulary(safeIntegerVocabulary())
	c.AssertVocabs()
	if err := c.AddResource(SchemaID, doc); err != nil {
		return nil, fmt.Errorf("flywheel: add contract: %w", err)
	}
	v := &Validator{schemas: make(map[Def]*jsonschema.Schema, len(Defs))}
	for _, d := range Defs {
		sch, err := c.Compile(d.SchemaURL())
		if err != nil {
			return nil, fmt.Errorf("flywheel: compile %s: %w", d, err)
		}
		v.schemas[d] = sch
	}
	if v.agentID, err = c.Compile(DefProductionTurnBatch.SchemaURL() + "/properties/agent_id"); err != nil {
		return nil, fmt.Errorf("flywheel: compile agent_id: %w", err)
	}
	if v.turnID, err = c.Compile(DefProductionTurn.SchemaURL() + "/properties/turn_id"); err != nil {
		return nil, fmt.Errorf("flywheel: compile turn_id: %w", err)
	}
	v.explainer = newExplainer(doc)
	return v, nil
}

// noLoader refuses every external URL: the contract is self-contained and
// the draft meta-schemas are built into the compiler.
type noLoader struct{}

// Load refuses url.
func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("flywheel: refusing to load %s: the contract is self-contained", url)
}

// Validate checks raw against the definition def. It returns nil, a
// *ValidationError listing every violation in document order, or an error
// wrapping ErrUnknownDef.
func (v *Validator) Validate(def Def, raw []byte) error {
	sch, ok := v.schemas[def]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownDef, def)
	}
	return v.validate(sch, def, "body", raw)
}

func (v *Validator) validate(sch *jsonschema.Schema, def Def, subject string, raw []byte) error {
	inst, err := jcs.Parse(raw)
	if err != nil {
		return &ValidationError{Def: def, Violations: []Violation{parseViolation(err)}}
	}
	return v.check(sch, def, subject, raw, inst)
}

func (v *Validator) check(sch *jsonschema.Schema, def Def, subject string, raw []byte, inst any) error {
	err := sch.Validate(inst)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Errorf("flywheel: validate %s: %w", def, err)
	}
	return &ValidationError{Def: def, Violations: v.explainer.explain(verr, raw, inst, subject)}
}

// Marshal encodes x as JSON (without HTML escaping) and validates the result
// against def, so that a server only ever sends bodies the contract allows.
// It returns the validated bytes.
func (v *Validator) Marshal(def Def, x any) ([]byte, error) {
	raw, err := marshal(x)
	if err != nil {
		return nil, fmt.Errorf("flywheel: encode %s: %w", def, err)
	}
	if err := v.Validate(def, raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// ValidateValue encodes x and validates the result against def; see Marshal.
func (v *Validator) ValidateValue(def Def, x any) error {
	_, err := v.Marshal(def, x)
	return err
}

// Unmarshal validates raw against def and, when it is valid, decodes it into
// dst, normally a pointer to def's Go type.
func (v *Validator) Unmarshal(def Def, raw []byte, dst any) error {
	if err := v.Validate(def, raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("flywheel: decode %s: %w", def, err)
	}
	return nil
}

// ValidateAgentID checks a bare agent id (for example a percent-decoded path
// parameter) against the contract's agent_id grammar. A failure is a
// *ValidationError with one violation at pointer "".
func (v *Validator) ValidateAgentID(id string) error {
	return v.check(v.agentID, "", "agent_id", nil, id)
}

// ValidateTurnID checks a bare turn id against the contract's turn_id
// grammar, like ValidateAgentID.
func (v *Validator) ValidateTurnID(id string) error {
	return v.check(v.turnID, "", "turn_id", nil, id)
}

// parseViolation turns a jcs parse error into a violation. Syntax errors
// point at the whole body; duplicate keys, unpaired surrogates and numbers
// out of range point at the member at fault.
func parseViolation(err error) Violation {
	var e *jcs.Error
	if !errors.As(err, &e) {
		return Violation{Message: "body is not valid JSON"}
	}
	switch {
	case errors.Is(err, jcs.ErrDuplicateKey):
		return Violation{Pointer: e.Pointer, Message: fmt.Sprintf(
			"duplicate key %q: %s, which makes the body ambiguous", lastToken(e.Pointer), e.Detail)}
	case errors.Is(err, jcs.ErrLoneSurrogate):
		return Violation{Pointer: e.Pointer, Message: fmt.Sprintf(
			"string has an unpaired UTF-16 surrogate escape at byte %d (not I-JSON, RFC 7493)", e.Offset)}
	case errors.Is(err, jcs.ErrNumberRange):
		return Violation{Pointer: e.Pointer, Message: "number is outside the IEEE 754 double range (not I-JSON, RFC 7493)"}
	case errors.Is(err, jcs.ErrInvalidUTF8):
		return Violation{Message: fmt.Sprintf("body is not valid UTF-8 (at byte %d)", e.Offset)}
	case errors.Is(err, jcs.ErrTooDeep):
		return Violation{Message: fmt.Sprintf("body nests objects and arrays more than %d deep", jcs.MaxDepth)}
	default:
		detail := e.Detail
		if detail == "" {
			detail = "syntax error"
		}
		return Violation{Message: fmt.Sprintf("body is not valid JSON: %s (at byte %d)", detail, e.Offset)}
	}
}

// The package-level functions share one Validator, compiled on first use.
var defaultValidator = sync.OnceValues(NewValidator)

// Default returns the shared Validator the package-level functions use.
func Default() (*Validator, error) { return defaultValidator() }

// Validate checks raw against def with the shared Validator; see
// Validator.Validate.
func Validate(def Def, raw []byte) error {
	v, err := defaultValidator()
	if err != nil {
		return err
	}
	return v.Validate(def, raw)
}

// ValidateValue encodes x and validates it against def with the shared
// Validator; see Validator.Marshal.
func ValidateValue(def Def, x any) error {
	v, err := defaultValidator()
	if err != nil {
		return err
	}
	return v.ValidateValue(def, x)
}

// Marshal encodes x and returns the bytes when they are valid against def,
// with the shared Validator; see Validator.Marshal.
func Marshal(def Def, x any) ([]byte, error) {
	v, err := defaultValidator()
	if err != nil {
		return nil, err
	}
	return v.Marshal(def, x)
}

// Unmarshal validates raw against def and decodes it into dst, with the
// shared Validator; see Validator.Unmarshal.
func Unmarshal(def Def, raw []byte, dst any) error {
	v, err := defaultValidator()
	if err != nil {
		return err
	}
	return v.Unmarshal(def, raw, dst)
}

// ValidateAgentID checks a bare agent id with the shared Validator; see
// Validator.ValidateAgentID.
func ValidateAgentID(id string) error {
	v, err := defaultValidator()
	if err != nil {
		return err
	}
	return v.ValidateAgentID(id)
}

// ValidateTurnID checks a bare turn id with the shared Validator; see
// Validator.ValidateTurnID.
func ValidateTurnID(id string) error {
	v, err := defaultValidator()
	if err != nil {
		return err
	}
	return v.ValidateTurnID(id)
}
