package flywheel

import (
	"fmt"
	"io"
)

// Encoder writes flywheel/1 bodies as JSON, one per line, each validated
// against its definition before a byte is written. It keeps every
// distinction the contract draws: a required-but-nullable member is always
// written (status_code, tool_calls of a ProductionTurn), an Optional writes
// nothing when absent, null for Null and the value for Some — Some of an
// empty or nil slice is [] — and "<", ">" and "&" are not escaped.
//
// Go's zero values are a trap here: a nil slice encodes as null, which
// flywheel/1 reads as "not reported". Use ReportedToolCalls for a list the
// agent observed, even an empty one.
type Encoder struct {
	w io.Writer
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Encode validates x against def and writes it followed by a newline. A
// value that breaks the contract is not written; the error is a
// *ValidationError.
func (e *Encoder) Encode(def Def, x any) error {
	b, err := Marshal(def, x)
	if err != nil {
		return err
	}
	if _, err := e.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("flywheel: write %s: %w", def, err)
	}
	return nil
}

// ReportedToolCalls returns calls as a reported list for
// RolloutOutput.ToolCalls: a nil or empty slice becomes [], the positive
// assertion that zero calls were observed.
func ReportedToolCalls(calls []ToolCallRecord) Optional[[]ToolCallRecord] {
	if calls == nil {
		calls = []ToolCallRecord{}
	}
	return Some(calls)
}

// NotReported returns the null tool_calls of a rollout whose calls are not
// (all) known: never send a partial list.
func NotReported() Optional[[]ToolCallRecord] { return Null[[]ToolCallRecord]() }
