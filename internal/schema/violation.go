package schema

import (
	"errors"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer renders the library's messages in English.
var printer = message.NewPrinter(language.English)

// pointerEscaper escapes one reference token of a JSON Pointer (RFC 6901).
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// Violation is the first leaf failure of a validation: where in the
// instance it is and why.
type Violation struct {
	// Pointer is the JSON Pointer (RFC 6901) of the failing value within the
	// validated instance; "" is the instance itself.
	Pointer string
	// Message says why the value fails, in English on one line.
	Message string
	// Leaf is the library's error for the failure, for a caller that
	// renders it its own way.
	Leaf *jsonschema.ValidationError
}

// FirstViolation returns the first leaf failure of err, an error from a
// compiled schema's Validate, or false when err is not a validation error.
func FirstViolation(err error) (Violation, bool) {
	var leaf *jsonschema.ValidationError
	if !errors.As(err, &leaf) {
		return Violation{}, false
	}
	for len(leaf.Causes) > 0 {
		leaf = leaf.Causes[0]
	}
	var ptr strings.Builder
	for _, tok := range leaf.InstanceLocation {
		ptr.WriteString("/")
		ptr.WriteString(pointerEscaper.Replace(tok))
	}
	return Violation{
		Pointer: ptr.String(),
		Message: OneLine(leaf.ErrorKind.LocalizedString(printer)),
		Leaf:    leaf,
	}, true
}

// String renders v as "at /pointer: message", "/" naming the instance
// itself.
func (v Violation) String() string {
	where := v.Pointer
	if where == "" {
		where = "/"
	}
	return "at " + where + ": " + v.Message
}

// OneLine collapses the whitespace runs of a message (the library's span
// several lines) and caps it at 300 bytes, cut on a rune boundary.
func OneLine(s string) string {
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
