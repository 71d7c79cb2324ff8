package schema_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/gyrehq/gyre/internal/schema"
)

func TestFirstViolation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, instance string
		pointer, message       string
		str                    string
	}{
		{"root", `{"type":"object","required":["question"]}`, `{}`, "", "missing property 'question'", "at /: missing property 'question'"},
		{"member", `{"properties":{"a":{"type":"string"}}}`, `{"a":1}`, "/a", "got number, want string", "at /a: got number, want string"},
		{"escaped tokens", `{"properties":{"a/b~c":{"type":"string"}}}`, `{"a/b~c":1}`, "/a~1b~0c", "got number, want string", "at /a~1b~0c: got number, want string"},
		{"array index", `{"items":{"type":"integer"}}`, `[1,"x"]`, "/1", "got string, want integer", "at /1: got string, want integer"},
		{"first leaf of several", `{"properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a","b"]}`, `{"a":1}`, "", "missing property 'b'", "at /: missing property 'b'"},
		{"pattern", `{"properties":{"p":{"pattern":"^(?=.*[0-9])"}}}`, `{"p":"abc"}`, "/p", "'abc' does not match pattern '^(?=.*[0-9])'", "at /p: 'abc' does not match pattern '^(?=.*[0-9])'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(tt.instance))
			v, ok := schema.FirstViolation(mustCompile(t, tt.schema).Validate(doc))
			if !ok {
				t.Fatal("no violation")
			}
			if v.Pointer != tt.pointer || v.Message != tt.message || v.String() != tt.str {
				t.Errorf("got %q %q %q, want %q %q %q", v.Pointer, v.Message, v, tt.pointer, tt.message, tt.str)
			}
			if v.Leaf == nil || len(v.Leaf.Causes) != 0 {
				t.Errorf("Leaf = %v, want the leaf error", v.Leaf)
			}
		})
	}
}

func TestFirstViolation_NotAValidationError(t *testing.T) {
	t.Parallel()
	if _, ok := schema.FirstViolation(errors.New("boom")); ok {
		t.Error("a plain error is a violation")
	}
	if _, ok := schema.FirstViolation(nil); ok {
		t.Error("nil is a violation")
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	if got := schema.OneLine("  a\n\t- at '/x':\n  b  "); got != "a - at '/x': b" {
		t.Errorf("OneLine = %q", got)
	}
	long := strings.Repeat("é", 200) // 400 bytes
	got := schema.OneLine(long)
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || len(got) > 300+len("…") {
		t.Errorf("OneLine(long) = %q (%d bytes)", got, len(got))
	}
	if short := strings.Repeat("x", 300); schema.OneLine(short) != short {
		t.Error("a 300-byte message was cut")
	}
}
