package demo

import (
	"strings"
	"testing"
)

func printed(b Block) string {
	var w strings.Builder
	b.Print(&w)
	return w.String()
}

// The batch block counts excluded and unscored rollouts apart from the
// failures, with the exclusions by reason, and shows each trouble case
// once, in TroubleCases order, with its attempts and abstentions.
func TestBatchBlock_ShowsExclusionsAndAbstentionsApartFromFailures(t *testing.T) {
	t.Parallel()
	sub := "substrate_unavailable"
	st := BatchStage{ID: "b1", Policy: "demo-base", Rollouts: 23, Retries: 2, Graded: 25, Passed: 6, Failed: 14, Unscored: 1, Excluded: 4,
		Exclusions: map[string]int{sub: 4},
		Trouble: []TroubleRollout{
			{CaseID: "refund-payment-timeout", Outcome: "unscored", Abstained: []string{"tool_outcome (outcome_unknown)", "all_tools_ok (outcome_unknown)"}},
			{CaseID: "status-backend-unavailable", Outcome: "excluded", Exclusion: &sub},
			{CaseID: "status-backend-unavailable", Outcome: "excluded", Exclusion: &sub},
		}}
	got := printed(st.block())
	for _, want := range []string{
		"   graded     25 of 25 rollouts: 6 passed, 14 failed, 1 unscored, 4 excluded\n",
		"   retries    2: ",
		"   excluded   4 (substrate_unavailable 4): infrastructure trouble the agent reported, not failures\n",
		"   unscored   1: every grader abstained",
		"   trouble    status-backend-unavailable: excluded, substrate_unavailable (2 attempts)\n" +
			"              refund-payment-timeout: unscored, abstained: tool_outcome (outcome_unknown), all_tools_ok (outcome_unknown)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("block lacks %q:\n%s", want, got)
		}
	}
}

// The training-grade block lists every reason with its count, sorted,
// and "none" only when there is none.
func TestTrainingGradeBlock_ListsReasonsWithCounts(t *testing.T) {
	t.Parallel()
	y := 20.0 / 23
	for _, tc := range []struct {
		reasons map[string]int
		want    string
	}{
		{map[string]int{"no_verdict": 1, "excluded:substrate_unavailable": 2}, "not, because  excluded:substrate_unavailable 2, no_verdict 1\n"},
		{map[string]int{}, "not, because  none\n"},
	} {
		got := printed(TrainingGradeStage{Finished: 23, TrainingGrade: 20, Yield: &y, Reasons: tc.reasons}.block())
		if !strings.Contains(got, tc.want) || !strings.Contains(got, "20 of 23 finished rollouts are training grade (0.870)") {
			t.Errorf("reasons %v: block\n%s\nlacks %q", tc.reasons, got, tc.want)
		}
	}
}
