package grade

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// gradeFacts is a training-grade rollout; each case breaks one fact.
func gradeFacts() TrainingFacts {
	return TrainingFacts{
		State:                   "graded",
		ToolCallsReported:       true,
		Reconciliation:          OnPolicy,
		SubmittedBeforeDeadline: true,
		LeaseLiveAtSubmit:       true,
		Verdicts:                []Verdict{vPass},
		CountedCompletions:      3,
		BodiesCaptured:          true,
	}
}

func TestTrainingGrade_AllFactsHold(t *testing.T) {
	t.Parallel()
	ok, reasons := TrainingGrade(gradeFacts())
	if !ok || reasons == nil || len(reasons) != 0 {
		t.Errorf("TrainingGrade = %v %#v, want true []", ok, reasons)
	}
	f := gradeFacts()
	f.State = "submitted"
	f.Verdicts = []Verdict{vFail} // a failing verdict is still a verdict: reward 0 is training data
	if ok, reasons := TrainingGrade(f); !ok {
		t.Errorf("failed rollout not training grade: %v", reasons)
	}
}

func TestTrainingGrade_EachBrokenFactHasItsReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*TrainingFacts)
		want   []string
	}{
		{"excluded", func(f *TrainingFacts) { f.Exclusion = "capacity" }, []string{"excluded:capacity"}},
		{"server-side state", func(f *TrainingFacts) { f.State = "abandoned" }, []string{"state:abandoned"}},
		{"not submitted yet", func(f *TrainingFacts) { f.State = "leased" }, []string{"state:leased"}},
		{"tool calls not reported", func(f *TrainingFacts) { f.ToolCallsReported = false }, []string{"tool_calls_not_reported"}},
		{"tool calls omitted", func(f *TrainingFacts) { f.ToolCallsOmittedCount = 2 }, []string{"tool_calls_omitted"}},
		{"off policy", func(f *TrainingFacts) { f.Reconciliation = OffPolicy }, []string{"off_policy"}},
		{"llm call count not reported", func(f *TrainingFacts) {
			f.Reconciliation, f.ReconciliationReason = Unreconciled, "llm_call_count_not_reported"
		}, []string{"llm_call_count_not_reported"}},
		{"gateway records lost", func(f *TrainingFacts) {
			f.Reconciliation, f.ReconciliationReason = Unreconciled, "gateway_records_lost"
		}, []string{"unreconciled:gateway_records_lost"}},
		{"reconciliation pending", func(f *TrainingFacts) { f.Reconciliation = "" }, []string{"reconciliation_pending"}},
		{"late", func(f *TrainingFacts) { f.SubmittedBeforeDeadline = false }, []string{"late_submission"}},
		{"lease lapsed", func(f *TrainingFacts) { f.LeaseLiveAtSubmit = false }, []string{"lease_lapsed"}},
		{"all verdicts abstain", func(f *TrainingFacts) { f.Verdicts = []Verdict{vAbstain} }, []string{"no_verdict"}},
		{"no graders", func(f *TrainingFacts) { f.Verdicts = nil }, []string{"no_verdict"}},
		{"only optional verdicts", func(f *TrainingFacts) {
			f.Verdicts, f.Flags = []Verdict{vPass, vAbstain}, []Flags{{Optional: true}, {}}
		}, []string{"no_verdict"}},
		{"no completions", func(f *TrainingFacts) { f.CountedCompletions = 0 }, []string{"no_completions"}},
		{"bodies not captured", func(f *TrainingFacts) { f.BodiesCaptured = false }, []string{"bodies_not_captured"}},
	} {
		f := gradeFacts()
		tc.change(&f)
		ok, reasons := TrainingGrade(f)
		if ok || !slices.Equal(reasons, tc.want) {
			t.Errorf("%s: TrainingGrade = %v %v, want false %v", tc.name, ok, reasons, tc.want)
		}
	}
}

func TestTrainingGrade_ListsEveryReasonInStableOrder(t *testing.T) {
	t.Parallel()
	ok, reasons := TrainingGrade(TrainingFacts{
		State: "deadline_exceeded", Exclusion: "deadline_exceeded", ToolCallsOmittedCount: 1,
		Reconciliation: Unreconciled, ReconciliationReason: "llm_call_count_not_reported",
	})
	want := []string{"state:deadline_exceeded", "excluded:deadline_exceeded", "tool_calls_not_reported", "tool_calls_omitted",
		"llm_call_count_not_reported", "late_submission", "lease_lapsed", "no_verdict", "no_completions", "bodies_not_captured"}
	if ok || !slices.Equal(reasons, want) {
		t.Errorf("reasons = %v, want %v", reasons, want)
	}
}

func TestTrainingGrade_AdvisoryRewardIsNotAnInput(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeOf(TrainingFacts{})
	for i := 0; i < typ.NumField(); i++ {
		n := strings.ToLower(typ.Field(i).Name)
		if strings.Contains(n, "reward") || strings.Contains(n, "success") || strings.Contains(n, "fingerprint") {
			t.Errorf("TrainingFacts has field %s: advisory values must not decide training grade", typ.Field(i).Name)
		}
	}
}
