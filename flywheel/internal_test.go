package flywheel

import (
	"slices"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/jcs"
)

func TestLocate(t *testing.T) {
	t.Parallel()
	raw := []byte(` {"a" : [1, {"b":"x\"}","c":{}}], "d~/e":null, "\u0066":true , "g":[[],[3]]} `)
	locs := [][]string{
		{},
		{"a"},
		{"a", "1", "b"},
		{"a", "1", "c"},
		{"d~/e"},
		{"f"},
		{"g", "1", "0"},
		{"a", "7"},
		{"missing"},
	}
	want := []struct {
		start, end string // text at the span's start and end
		found      bool
	}{
		{`{"a"`, `}`, true},
		{`"a" :`, `]`, true},
		{`"b":"x\"}"`, `"`, true},
		{`"c":{}`, `}`, true},
		{`"d~/e":null`, `l`, true},
		{`"\u0066":true`, `e`, true},
		{`3]`, `3`, true},
		{"", "", false},
		{"", "", false},
	}
	spans := locate(raw, locs)
	for i, s := range spans {
		if s.found != want[i].found {
			t.Errorf("%v: found = %v, want %v", locs[i], s.found, want[i].found)
			continue
		}
		if !s.found {
			continue
		}
		if !strings.HasPrefix(string(raw[s.start:]), want[i].start) || string(raw[s.end]) != want[i].end {
			t.Errorf("%v: span %d..%d = %q…%q", locs[i], s.start, s.end, raw[s.start:], raw[s.end])
		}
	}
}

func TestLocate_MalformedTextTerminates(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`[}`, `{"a":`, `[1,`, `{"a" 1}`, `"`, `[[[`, `{`} {
		locate([]byte(raw), [][]string{{"a"}, {"0", "0"}})
	}
}

func TestRepairLocation(t *testing.T) {
	t.Parallel()
	inst, err := jcs.Parse([]byte(`{"turns":[{"tool_calls":[{"entity_ids":{"bad":"x"},"name":"n"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	trusted := []string{"turns", "0", "tool_calls", "0"}
	schemaURL := SchemaID + "#/$defs/ToolCallRecord/properties/entity_ids/propertyNames"
	corrupted := []string{"turns", "9", "tool_calls", "0", "name"}
	got := repairLocation(corrupted, trusted, schemaURL, "bad", inst)
	if want := []string{"turns", "0", "tool_calls", "0", "entity_ids"}; !slices.Equal(got, want) {
		t.Errorf("repairLocation = %q, want %q", got, want)
	}
	// Same length as the ancestor: the ancestor is the object.
	if got := repairLocation([]string{"x"}, []string{"turns"}, "", "bad", inst); !slices.Equal(got, []string{"turns"}) {
		t.Errorf("repairLocation = %q", got)
	}
	// Further away: keep the recorded location only if it holds the key.
	far := []string{"turns", "0", "tool_calls", "0", "entity_ids"}
	if got := repairLocation(far, []string{"turns"}, "", "bad", inst); !slices.Equal(got, far) {
		t.Errorf("repairLocation = %q, want %q", got, far)
	}
	if got := repairLocation([]string{"turns", "0", "x", "y", "z"}, []string{"turns"}, "", "bad", inst); !slices.Equal(got, []string{"turns"}) {
		t.Errorf("repairLocation = %q, want the ancestor", got)
	}
}

func TestLastTokenAndFormatPointer(t *testing.T) {
	t.Parallel()
	if got := formatPointer([]string{"a/b", "c~d", "0"}); got != "/a~1b/c~0d/0" {
		t.Errorf("formatPointer = %q", got)
	}
	if got := formatPointer(nil); got != "" {
		t.Errorf("formatPointer(nil) = %q", got)
	}
	if got := lastToken("/x/a~1b~0c"); got != "a/b~c" {
		t.Errorf("lastToken = %q", got)
	}
	if got := lastToken(""); got != "" {
		t.Errorf("lastToken(\"\") = %q", got)
	}
}

func TestDecodeInt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"200", 200, true},
		{"200.0", 200, true},
		{"2e2", 200, true},
		{"-0", 0, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"1.5", 0, false},
		{"1e19", 0, false},
		{`"7"`, 0, false},
		{"true", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := decodeInt([]byte(tt.in))
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("decodeInt(%s) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
