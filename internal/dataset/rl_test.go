package dataset_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/grade"
)

// TestRLRowPerRollout pins an rl file: one row per rollout with every
// counted completion as a turn, token ids and logprobs only when
// captured, the reward and its components from the frozen verdicts, both
// fingerprints; rows without token ids are counted for retokenisation.
func TestRLRowPerRollout(t *testing.T) {
	t.Parallel()
	captured := weatherRollout("r-2", "g", 0.5, "call_b", "18°C.")
	for i := range captured.Completions {
		c := &captured.Completions[i]
		c.PromptTokenIDs = []int{101, 2023, 318}
		c.CompletionTokenIDs = []int{7, 8}
		c.Logprobs = []float64{-0.25, -1.5e-7}
	}
	weighted := weatherRollout("r-1", "g", 1, "call_a", "Sunny.")
	pass, abstain := true, (*bool)(nil)
	weighted.Verdicts = grade.VerdictSet{
		Verdicts: []grade.Verdict{
			{Grader: "answer", Pass: &pass, Reason: "matched"},
			{Grader: "tools", Pass: &pass, Score: ptr(0.5), Reason: "partial"},
			{Grader: "style", Pass: abstain, Reason: "judge_error"},
			{Grader: "bonus", Pass: &pass, Reason: "optional"},
		},
		Graders: []grade.GraderRef{
			{Label: "answer", Flags: grade.Flags{Weight: 3}},
			{Label: "tools"},
			{Label: "style"},
			{Label: "bonus", Flags: grade.Flags{Optional: true}},
		},
	}
	weighted.Policy = ""
	file, m := write(t, sel(dataset.FormatRL), sliceSource{captured, weighted})
	golden(t, "rl.jsonl", file)
	rows := lines(t, file)
	if len(rows) != 2 || *m.RetokenizationRequired != 1 {
		t.Fatalf("rows %d, retokenization_required %d; want 2 and 1", len(rows), *m.RetokenizationRequired)
	}
	var r1 dataset.RLRow
	if err := json.Unmarshal(rows[0], &r1); err != nil {
		t.Fatal(err)
	}
	if r1.RolloutID != "r-1" || len(r1.Turns) != 2 || r1.Policy != nil {
		t.Errorf("first row: rollout %s, %d turns, policy %v", r1.RolloutID, len(r1.Turns), r1.Policy)
	}
	if *r1.Reward != 0.875 || len(r1.RewardComponents) != 2 {
		t.Errorf("reward %v with %d components, want 0.875 = (3×1 + 0.5)/4 from 2", *r1.Reward, len(r1.RewardComponents))
	}
	if r1.Turns[0].PromptTokenIDs != nil || strings.Contains(string(rows[0]), "token_ids") {
		t.Errorf("a turn without captured tokens has token ids: %s", rows[0])
	}
	var r2 dataset.RLRow
	if err := json.Unmarshal(rows[1], &r2); err != nil {
		t.Fatal(err)
	}
	if got := r2.Turns[1]; len(got.CompletionTokenIDs) != 2 || len(got.Logprobs) != 2 || *r2.Policy != "pol-a" {
		t.Errorf("captured turn = %+v", got)
	}
}

// TestATIFDocumentPerRolloutIsValid: each line is one ATIF document that
// gyre's validator accepts, with the rollout's completions as agent steps
// and the reported tool calls as observations.
func TestATIFDocumentPerRolloutIsValid(t *testing.T) {
	t.Parallel()
	r := weatherRollout("r-1", "g", 1, "call_a", "18°C.")
	r.ToolCalls = []flywheel.ToolCallRecord{{Name: "get_weather", ToolCallID: flywheel.Some("call_a"), Outcome: flywheel.OutcomeOK, Output: json.RawMessage(`{"temp_c":18}`)}}
	file, m := write(t, sel(dataset.FormatATIF), sliceSource{r, weatherRollout("r-2", "g", 0, "call_b", "?")})
	golden(t, "atif.jsonl", file)
	rows := lines(t, file)
	if len(rows) != 2 || m.Rows != 2 {
		t.Fatalf("rows = %d, want 2", len(rows))
	}
	for i, row := range rows {
		tr, err := atif.Parse(row)
		if err != nil {
			t.Fatalf("row %d is not a valid ATIF document: %v", i, err)
		}
		if tr.SchemaVersion != atif.LatestVersion() || tr.AgentSteps() != 2 {
			t.Errorf("row %d: %s with %d agent steps", i, tr.SchemaVersion, tr.AgentSteps())
		}
	}
	tr, _ := atif.Parse(rows[0])
	if uses := tr.ToolUses(); len(uses) != 1 || uses[0].Output() != `{"temp_c":18}` {
		t.Errorf("tool uses = %+v", uses)
	}
}

// TestAdvisoryRewardAndSuccessHaveNoWayIn: the writers' input has no
// member that could carry the agent's advisory reward or success, so no
// row can hold them; the reward in a row comes from the verdicts.
func TestAdvisoryRewardAndSuccessHaveNoWayIn(t *testing.T) {
	t.Parallel()
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		for f := range ty.Fields() {
			if f.Name == "Reward" || f.Name == "Success" || f.Type == reflect.TypeFor[flywheel.RolloutOutput]() {
				t.Errorf("%s.%s could carry the agent's advisory reward or success", path, f.Name)
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	walk(reflect.TypeFor[dataset.Rollout](), "Rollout")
}
