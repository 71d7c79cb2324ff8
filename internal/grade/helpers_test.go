package grade

import (
	"context"
	"encoding/json"
	"testing"
)

func sp(s string) *string { return &s }
func ip(i int) *int       { return &i }
func i64(i int64) *int64  { return &i }
func fp(f float64) *float64 {
	return &f
}

// call builds an executed tool call.
func call(name string, outcome Outcome, status *int, args string) ToolCall {
	c := ToolCall{Name: name, Outcome: outcome, StatusCode: status}
	if args != "" {
		c.Arguments = json.RawMessage(args)
	}
	return c
}

func okCall(name string) ToolCall { return call(name, OutcomeOK, nil, "") }

// rollout builds a rollout item with a final text and the given calls
// (nil calls = not reported).
func rollout(text string, calls []ToolCall) *Item {
	return &Item{Kind: KindRollout, FinalText: sp(text), ToolCalls: calls}
}

// outcomeOf renders a verdict as "pass", "fail" or "abstain:<reason>".
func outcomeOf(v Verdict) string {
	switch {
	case v.Pass == nil:
		return "abstain:" + v.Reason
	case *v.Pass:
		return "pass"
	default:
		return "fail"
	}
}

// gradeOne parses one grader declaration (JSON) and grades item with it.
func gradeOne(t testing.TB, decl string, item *Item, env Env) Verdict {
	t.Helper()
	specs, err := ParseSpecs([]byte("[" + decl + "]"))
	if err != nil {
		t.Fatalf("ParseSpecs(%s): %v", decl, err)
	}
	s, err := Compile(specs)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	set, err := s.Grade(context.Background(), item, env)
	if err != nil {
		t.Fatalf("Grade: %v", err)
	}
	if len(set.Verdicts) != 1 {
		t.Fatalf("got %d verdicts", len(set.Verdicts))
	}
	return set.Verdicts[0]
}

type gradeCase struct {
	name string
	decl string
	item *Item
	want string
}

func runGradeCases(t *testing.T, cases []gradeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := gradeOne(t, tc.decl, tc.item, Env{})
			if got := outcomeOf(v); got != tc.want {
				t.Errorf("%s on %s: got %s (reason %q), want %s", tc.decl, tc.name, got, v.Reason, tc.want)
			}
		})
	}
}
