package flywheel_test

import (
	"encoding/json"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

func TestOptional_States(t *testing.T) {
	t.Parallel()
	var absent flywheel.Optional[string]
	if !absent.IsAbsent() || !absent.IsZero() || absent.IsNull() || absent.IsSet() {
		t.Error("zero Optional is not absent")
	}
	null := flywheel.Null[string]()
	if null.IsAbsent() || null.IsZero() || !null.IsNull() || null.IsSet() {
		t.Error("Null is not null")
	}
	some := flywheel.Some("x")
	if v, ok := some.Get(); !ok || v != "x" || some.IsNull() || some.IsZero() {
		t.Error("Some is not set")
	}
	if got := null.Or("d"); got != "d" {
		t.Errorf("Null.Or = %q", got)
	}
	if got := absent.Or("d"); got != "d" {
		t.Errorf("absent.Or = %q", got)
	}
	if got := some.Or("d"); got != "x" {
		t.Errorf("Some.Or = %q", got)
	}
}

func TestOptional_JSON(t *testing.T) {
	t.Parallel()
	type doc struct {
		S flywheel.Optional[string]                    `json:"s,omitzero"`
		N flywheel.Optional[int]                       `json:"n,omitzero"`
		L flywheel.Optional[[]flywheel.ToolCallRecord] `json:"l,omitzero"`
		M flywheel.Optional[map[string]int]            `json:"m,omitzero"`
	}
	tests := []struct {
		in, out string
	}{
		{`{}`, `{}`},
		{`{"s":null,"n":null,"l":null,"m":null}`, `{"s":null,"n":null,"l":null,"m":null}`},
		{`{"s":"","n":0,"l":[],"m":{}}`, `{"s":"","n":0,"l":[],"m":{}}`},
		{`{"n":7.0}`, `{"n":7}`},
		{`{"n":7e1}`, `{"n":70}`},
	}
	for _, tt := range tests {
		var d doc
		if err := json.Unmarshal([]byte(tt.in), &d); err != nil {
			t.Errorf("Unmarshal(%s): %v", tt.in, err)
			continue
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Errorf("Marshal: %v", err)
			continue
		}
		if string(b) != tt.out {
			t.Errorf("%s round-tripped to %s, want %s", tt.in, b, tt.out)
		}
	}
	var d doc
	if err := json.Unmarshal([]byte(`{"n":7.5}`), &d); err == nil {
		t.Error("Optional[int] accepted 7.5")
	}
}

// Some never encodes as null: a nil slice inside Some asserts emptiness.
func TestOptional_SomeNilSliceIsEmpty(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(flywheel.RolloutOutput{FinalText: "x", ToolCalls: flywheel.Some[[]flywheel.ToolCallRecord](nil)})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"final_text":"x","tool_calls":[]}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	if _, err := json.Marshal(flywheel.Some[*int](nil)); err == nil {
		t.Error("Some(nil pointer) encoded; want an error telling to use Null")
	}
}

// An absent Optional outside an omitzero field is a programming error.
func TestOptional_AbsentWithoutOmitzeroFails(t *testing.T) {
	t.Parallel()
	type bad struct {
		S flywheel.Optional[string] `json:"s"`
	}
	if b, err := json.Marshal(bad{}); err == nil {
		t.Errorf("marshalled %s; want an error", b)
	}
}
