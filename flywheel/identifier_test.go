package flywheel_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

// The identifier grammar of agent_id and turn_id: no leading or trailing
// ECMA-262 whitespace, no C0 or C1 controls, no slash or backslash, not "."
// or "..", 1–255 characters.
var identifierCases = []struct {
	name  string
	id    string
	valid bool
}{
	{"leading space", " x", false},
	{"leading no-break space", "\u00a0x", false},
	{"trailing ideographic space", "x\u3000", false},
	{"dot dot", "..", false},
	{"dot", ".", false},
	{"slash", "a/b", false},
	{"backslash", `a\b`, false},
	{"C1 next line", "a\u0085b", false},
	{"leading BOM", "\ufeffx", false},
	{"trailing line separator", "x\u2028", false},
	{"NUL", "a\u0000b", false},
	{"C1 APC", "a\u009fb", false},
	{"DEL", "a\u007fb", false},
	{"tab inside", "a\tb", false},
	{"trailing newline", "x\n", false},
	{"empty", "", false},
	{"256 characters", strings.Repeat("é", 256), false},
	{"slash after line separator", "a\u2028/b", false},
	{"trailing space after line separator", "a\u2028b ", false},
	{"accents and inner spaces", "café ü 7", true},
	{"inner dot", "a.b", true},
	{"three dots", "...", true},
	{"inner space", "x y", true},
	{"line separator inside", "a\u2028b", true},
	{"255 characters", strings.Repeat("é", 255), true},
	{"emoji", "\U0001F600", true},
	{"leading dot", ".hidden", true},
	{"mongolian vowel separator", "\u180ex", true}, // not ECMA-262 whitespace
}

func TestIdentifierGrammar(t *testing.T) {
	t.Parallel()
	for _, tt := range identifierCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id, err := json.Marshal(tt.id)
			if err != nil {
				t.Fatal(err)
			}
			turn := `{"turn_id":` + string(id) + `,"input_text":null,"final_text":null,"tool_calls":null,"tool_calls_omitted_count":0}`
			batch := `{"agent_id":` + string(id) + `,"turns":[{"turn_id":"t","input_text":null,"final_text":null,"tool_calls":null,"tool_calls_omitted_count":0}]}`
			for _, c := range []struct {
				def     flywheel.Def
				body    string
				pointer string
				bare    func(string) error
			}{
				{flywheel.DefProductionTurn, turn, "/turn_id", flywheel.ValidateTurnID},
				{flywheel.DefProductionTurnBatch, batch, "/agent_id", flywheel.ValidateAgentID},
			} {
				err := flywheel.Validate(c.def, []byte(c.body))
				bareErr := c.bare(tt.id)
				if tt.valid {
					if err != nil {
						t.Errorf("%s rejected %q: %v", c.def, tt.id, err)
					}
					if bareErr != nil {
						t.Errorf("bare check rejected %q: %v", tt.id, bareErr)
					}
					continue
				}
				var ve *flywheel.ValidationError
				if !asValidationError(err, &ve) {
					t.Errorf("%s accepted %q (err %v)", c.def, tt.id, err)
					continue
				}
				if got := ve.First().Pointer; got != c.pointer {
					t.Errorf("%s: pointer %q, want %q", c.def, got, c.pointer)
				}
				if bareErr == nil {
					t.Errorf("bare check accepted %q", tt.id)
				}
			}
		})
	}
}

// task_id and conversation_id share the grammar minus the path-segment rule.
func TestIdentifierGrammar_CorrelationIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id    string
		valid bool
	}{
		{"a/b", true}, {`a\b`, true}, {"..", true}, {".", true},
		{" x", false}, {"x\u3000", false}, {"a\u0085b", false}, {"", false},
	}
	for _, tt := range tests {
		for _, member := range []string{"task_id", "conversation_id"} {
			id, _ := json.Marshal(tt.id)
			body := `{"turn_id":"t","` + member + `":` + string(id) + `,"input_text":null,"final_text":null,"tool_calls":null,"tool_calls_omitted_count":0}`
			err := flywheel.Validate(flywheel.DefProductionTurn, []byte(body))
			if (err == nil) != tt.valid {
				t.Errorf("%s %q: err = %v, want valid %v", member, tt.id, err, tt.valid)
			}
		}
	}
}
