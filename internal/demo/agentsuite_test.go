package demo_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gyrehq/gyre/internal/demo"
	"github.com/gyrehq/gyre/internal/demo/scripted"
	"github.com/gyrehq/gyre/internal/suite"
)

// The agent suite gates a promotion, so the cases the promotion runs (all
// but TroubleCases) are at least 10, of which at least 4 are questions
// demo-base gets wrong (SPEC §10: the bootstrap resamples tasks); the
// trouble cases are exactly those asking about an order in trouble, and
// meet both kinds of trouble; every case asks a question the scripted
// model knows, and no case has files (POST /api/v1/tasks refuses them).
func TestAgentSuite_GatesOnTheBaseMistake(t *testing.T) {
	t.Parallel()
	p, err := demo.WriteAgentSuite(filepath.Join(t.TempDir(), "demo"))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p) != demo.AgentSuiteName+".yaml" {
		t.Errorf("path %s", p)
	}
	s, err := suite.Load(p, suite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != demo.AgentSuiteName {
		t.Errorf("name %s", s.Name)
	}
	known := map[string]scripted.Question{}
	for _, q := range append(scripted.Questions(), scripted.TroubleQuestions()...) {
		known[q.Text] = q
	}
	gating, mistakes := 0, 0
	troubles := map[scripted.Trouble]bool{}
	for _, c := range s.Cases {
		if len(c.Files) > 0 {
			t.Errorf("case %s has files", c.ID)
		}
		var in struct {
			Question string `json:"question"`
		}
		if err := json.Unmarshal(c.Input, &in); err != nil {
			t.Fatalf("case %s: input %s", c.ID, c.Input)
		}
		q, ok := known[in.Question]
		if !ok {
			t.Errorf("case %s asks %q, which the scripted model does not know", c.ID, in.Question)
		}
		if isTrouble := slices.Contains(demo.TroubleCases, c.ID); isTrouble != (q.Trouble != "") {
			t.Errorf("case %s: in TroubleCases %v, but its question's trouble is %q", c.ID, isTrouble, q.Trouble)
		}
		if q.Trouble != "" {
			troubles[q.Trouble] = true
			continue
		}
		gating++
		if q.BaseMistake {
			mistakes++
		}
	}
	if gating < 10 || mistakes < 4 || mistakes == gating {
		t.Errorf("%d cases gate the promotion, %d of them demo-base mistakes: want at least 10 cases, at least 4 mistakes and some without", gating, mistakes)
	}
	if !troubles[scripted.TroubleBackendUnavailable] || !troubles[scripted.TroublePaymentTimeout] {
		t.Errorf("the suite meets troubles %v, want both", troubles)
	}
	for _, id := range demo.TroubleCases {
		if !slices.ContainsFunc(s.Cases, func(c suite.Case) bool { return c.ID == id }) {
			t.Errorf("trouble case %s is not in the suite", id)
		}
	}
	if b, _ := os.ReadFile(p); string(b) != string(demo.AgentSuite()) {
		t.Error("the written suite is not the embedded one")
	}
}

// The production questions are distinct and differ from the suite's
// phrasing-1 questions at the start.
func TestTurnQuestions_AreDistinct(t *testing.T) {
	t.Parallel()
	qs := demo.TurnQuestions(len(scripted.Questions()))
	seen := map[string]bool{}
	for _, q := range qs {
		if seen[q.Text] {
			t.Errorf("%q repeats", q.Text)
		}
		seen[q.Text] = true
	}
	base := 0
	for _, q := range demo.TurnQuestions(demo.DefaultTurns) {
		if q.BaseMistake {
			base++
		}
	}
	if base == 0 || base == demo.DefaultTurns {
		t.Errorf("%d of the %d default questions are demo-base mistakes: want some, not all", base, demo.DefaultTurns)
	}
}
