package dataset_test

import (
	"encoding/json"
	"testing"

	"github.com/gyrehq/gyre/internal/dataset"
)

// convRollout is a rollout whose conversation is msgs: one counted
// completion per assistant message, its request everything before it.
func convRollout(id, group string, score float64, msgs ...string) *dataset.Rollout {
	var comps []dataset.Completion
	for i, m := range msgs {
		var role struct{ Role string }
		_ = json.Unmarshal([]byte(m), &role)
		if role.Role == "assistant" {
			comps = append(comps, comp(len(comps)+1, m, msgs[:i]...))
		}
	}
	return rollout(id, group, score, comps...)
}

type pairRow struct {
	Input struct {
		Messages []json.RawMessage `json:"messages"`
		Tools    json.RawMessage   `json:"tools"`
	} `json:"input"`
	Preferred    []json.RawMessage `json:"preferred_output"`
	NonPreferred []json.RawMessage `json:"non_preferred_output"`
}

func pairs(t *testing.T, file []byte) []pairRow {
	t.Helper()
	var out []pairRow
	for _, l := range lines(t, file) {
		var p pairRow
		if err := json.Unmarshal(l, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestDPOPairsOnlyFromMixedGroups: all-pass and all-fail groups give no
// pairs and are counted as groups without pairs; a group of rewards 1, 1,
// 0 gives two pairs, the higher preferred.
func TestDPOPairsOnlyFromMixedGroups(t *testing.T) {
	t.Parallel()
	s, u := sys("You answer weather questions."), user("Weather in Paris?")
	src := sliceSource{
		convRollout("r-a1", "g-a", 1, s, u, asst("Sunny, 18°C.")),
		convRollout("r-a2", "g-a", 1, s, u, asst("18°C and sunny.")),
		convRollout("r-b1", "g-b", 0, s, u, asst("No idea.")),
		convRollout("r-b2", "g-b", 0, s, u, asst("Ask someone else.")),
		weatherRollout("r-c1", "g-c", 1, "call_1a", "18°C and sunny."),
		weatherRollout("r-c2", "g-c", 1, "call_2b", "It is 18°C in Paris."),
		weatherRollout("r-c3", "g-c", 0, "call_3c", "I could not find out."),
	}
	file, m := write(t, sel(dataset.FormatDPO), src)
	golden(t, "dpo.jsonl", file)
	got := pairs(t, file)
	if len(got) != 2 || m.Rows != 2 {
		t.Fatalf("pairs = %d (manifest %d), want 2", len(got), m.Rows)
	}
	if *m.GroupsWithoutPairs != 2 {
		t.Errorf("groups_without_pairs = %d, want 2", *m.GroupsWithoutPairs)
	}
	if m.RolloutsExported != 3 || m.NotExportedByReason[dataset.ReasonNoPair] != 4 {
		t.Errorf("exported %d, no_pair %d; want 3 and 4", m.RolloutsExported, m.NotExportedByReason[dataset.ReasonNoPair])
	}
	for i, want := range []string{"18°C and sunny.", "It is 18°C in Paris."} {
		p := got[i]
		if content(t, p.Preferred[0]) != want || content(t, p.NonPreferred[0]) != "I could not find out." {
			t.Errorf("pair %d: preferred %s, non-preferred %s", i, p.Preferred[0], p.NonPreferred[0])
		}
		if len(p.Input.Messages) != 4 {
			t.Errorf("pair %d: input has %d messages, want the 4 before the answers", i, len(p.Input.Messages))
		}
	}
}

func content(t *testing.T, msg json.RawMessage) any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatal(err)
	}
	return m["content"]
}

// TestDPOInputIsPrefixUpToFirstDivergentAssistantTurn checks where the
// input ends, comparing tool call ids after normalisation: rollouts that
// differ only in the ids the model generated do not diverge there.
func TestDPOInputIsPrefixUpToFirstDivergentAssistantTurn(t *testing.T) {
	t.Parallel()
	s, u := sys("S"), user("Weather in Paris and Rome?")
	paris := func(id string) string { return asstCalls(call(id, "get_weather", `{"city":"Paris"}`)) }
	rome := func(id string) string { return asstCalls(call(id, "get_weather", `{"city":"Rome"}`)) }
	tests := []struct {
		name        string
		win, lose   []string
		inputLen    int
		wantWinLast string
	}{
		{
			name:     "diverge at turn 1: the input is the system and user messages",
			win:      []string{s, u, paris("a1"), tool("a1", "18"), asst("Paris 18.")},
			lose:     []string{s, u, asst("I cannot check the weather.")},
			inputLen: 2,
		},
		{
			name:     "diverge at turn 3 after identical calls with other ids",
			win:      []string{s, u, paris("a1"), tool("a1", "18"), rome("a2"), tool("a2", "21"), asst("Paris 18, Rome 21.")},
			lose:     []string{s, u, paris("b1"), tool("b1", "18"), rome("b2"), tool("b2", "21"), asst("Paris 18.")},
			inputLen: 6,
		},
		{
			name:     "diverge at turn 2: the first calls differ only in their ids",
			win:      []string{s, u, paris("call_X"), tool("call_X", "18"), rome("call_Y"), tool("call_Y", "21"), asst("Both.")},
			lose:     []string{s, u, paris("zz_9"), tool("zz_9", "18"), asst("Only Paris.")},
			inputLen: 4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file, m := write(t, sel(dataset.FormatDPO), sliceSource{
				convRollout("r-1", "g", 0, tt.lose...),
				convRollout("r-2", "g", 1, tt.win...),
			})
			got := pairs(t, file)
			if len(got) != 1 {
				t.Fatalf("pairs = %d, want 1 (manifest %+v)", len(got), m)
			}
			p := got[0]
			if len(p.Input.Messages) != tt.inputLen {
				t.Fatalf("input has %d messages, want %d", len(p.Input.Messages), tt.inputLen)
			}
			for i := range tt.inputLen {
				if !sameMessage(t, p.Input.Messages[i], []byte(tt.win[i])) {
					t.Errorf("input message %d = %s, want the preferred rollout's %s", i, p.Input.Messages[i], tt.win[i])
				}
			}
			if !sameMessage(t, p.Preferred[0], []byte(tt.win[tt.inputLen])) {
				t.Errorf("preferred = %s, want %s", p.Preferred[0], tt.win[tt.inputLen])
			}
			if !sameMessage(t, p.NonPreferred[0], []byte(tt.lose[tt.inputLen])) {
				t.Errorf("non-preferred = %s, want %s", p.NonPreferred[0], tt.lose[tt.inputLen])
			}
		})
	}
}

// TestDPOMinMargin: a pair needs rewards at least min_margin apart
// (default 0.5), rounding aside.
func TestDPOMinMargin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		a, b   float64
		margin *float64
		want   int
	}{
		{"default margin, 1 and 0", 1, 0, nil, 1},
		{"default margin, 1 and 0.6 are too close", 1, 0.6, nil, 0},
		{"default margin, 0.7 and 0.2 differ by exactly the margin", 0.7, 0.2, nil, 1},
		{"margin 0.3 admits 1 and 0.6", 1, 0.6, ptr(0.3), 1},
		{"margin 0 pairs equal rewards too", 1, 1, ptr(0.0), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := sel(dataset.FormatDPO)
			s.Filters.MinMargin = tt.margin
			_, m := write(t, s, sliceSource{
				convRollout("r-1", "g", tt.a, user("q"), asst("A")),
				convRollout("r-2", "g", tt.b, user("q"), asst("B")),
			})
			if m.Rows != tt.want {
				t.Errorf("rows = %d, want %d", m.Rows, tt.want)
			}
		})
	}
}

// TestDPOPairWithoutDivergentAssistantTurn: when a tool result differs
// before any assistant message, or one conversation continues the other,
// the pair is left out and counted.
func TestDPOPairWithoutDivergentAssistantTurn(t *testing.T) {
	t.Parallel()
	u, c := user("q"), asstCalls(call("c", "f", "{}"))
	tests := []struct {
		name    string
		a, b    []string
		outcome string
	}{
		{"a tool result differs first", []string{u, c, tool("c", "1"), asst("one")}, []string{u, c, tool("c", "2"), asst("two")}, dataset.ReasonNoDivergentAssistantTurn},
		{"one conversation continues the other", []string{u, asst("a")}, []string{u, asst("a"), user("more"), asst("b")}, dataset.ReasonNoDivergentAssistantTurn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, m := write(t, sel(dataset.FormatDPO), sliceSource{convRollout("r-1", "g", 1, tt.a...), convRollout("r-2", "g", 0, tt.b...)})
			if m.Rows != 0 || m.PairsNotExportedByReason[tt.outcome] != 1 || *m.GroupsWithoutPairs != 1 {
				t.Errorf("rows %d, pairs_not_exported %v, groups_without_pairs %d; want 0, %s: 1, 1", m.Rows, m.PairsNotExportedByReason, *m.GroupsWithoutPairs, tt.outcome)
			}
		})
	}
}
