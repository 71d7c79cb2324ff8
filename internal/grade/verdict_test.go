package grade

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"
)

var (
	vPass    = Verdict{Pass: boolp(true)}
	vFail    = Verdict{Pass: boolp(false)}
	vAbstain = Verdict{Reason: ReasonOutcomeUnknown}
)

func scored(p bool, s float64) Verdict { return Verdict{Pass: boolp(p), Score: &s} }

func TestClassify_Rules(t *testing.T) {
	t.Parallel()
	opt := Flags{Optional: true}
	for _, tc := range []struct {
		name     string
		verdicts []Verdict
		flags    []Flags
		want     Classification
	}{
		{"all pass", []Verdict{vPass, vPass}, nil, Passed},
		{"one fail fails", []Verdict{vPass, vFail}, nil, Failed},
		{"abstention is never a failure", []Verdict{vPass, vAbstain}, nil, Passed},
		{"fail beats abstention", []Verdict{vAbstain, vFail}, nil, Failed},
		{"all abstain is unscored", []Verdict{vAbstain, vAbstain}, nil, Unscored},
		{"no graders is unscored", nil, nil, Unscored},
		{"optional fail never decides", []Verdict{vPass, vFail}, []Flags{{}, opt}, Passed},
		{"optional pass never decides", []Verdict{vAbstain, vPass}, []Flags{{}, opt}, Unscored},
		{"only optional graders", []Verdict{vPass}, []Flags{opt}, Unscored},
		{"missing flags mean non-optional", []Verdict{vPass, vFail}, []Flags{opt}, Failed},
		{"judge score below threshold is its pass", []Verdict{scored(false, 0.4)}, nil, Failed},
	} {
		if got := Classify(tc.verdicts, tc.flags); got != tc.want {
			t.Errorf("%s: Classify = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestReward_WeightedMeanOfDecidingGraders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		verdicts []Verdict
		flags    []Flags
		want     float64 // NaN = nil
	}{
		{"pass and fail", []Verdict{vPass, vFail}, nil, 0.5},
		{"abstentions left out", []Verdict{vPass, vAbstain, vAbstain}, nil, 1},
		{"optional left out", []Verdict{vPass, vFail}, []Flags{{}, {Optional: true}}, 1},
		{"weights", []Verdict{vPass, vFail}, []Flags{{Weight: 3}, {Weight: 1}}, 0.75},
		{"explicit score used", []Verdict{scored(true, 0.8), vFail}, nil, 0.4},
		{"score wins over pass", []Verdict{scored(false, 0.3)}, nil, 0.3},
		{"nothing decides", []Verdict{vAbstain}, nil, math.NaN()},
		{"empty", nil, nil, math.NaN()},
	} {
		got := Reward(tc.verdicts, tc.flags)
		switch {
		case math.IsNaN(tc.want):
			if got != nil {
				t.Errorf("%s: Reward = %v, want nil", tc.name, *got)
			}
		case got == nil || math.Abs(*got-tc.want) > 1e-12:
			t.Errorf("%s: Reward = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestGrade_VerdictSetRecordsGraderVersionsAndFlags(t *testing.T) {
	t.Parallel()
	specs, err := ParseSpecs([]byte(`[{"contains":"refund"},{"tool_called":{"name":"issue_refund","weight":2,"label":"refunded"}},{"judge":{"rubric":"r","optional":true}}]`))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Compile(specs)
	set, err := s.Grade(context.Background(), rollout("refund sent", []ToolCall{okCall("issue_refund")}), Env{})
	if err != nil {
		t.Fatal(err)
	}
	labels := []string{}
	for _, v := range set.Verdicts {
		labels = append(labels, v.Grader)
	}
	if !slices.Equal(labels, []string{"contains", "refunded", "judge"}) {
		t.Errorf("labels = %v", labels)
	}
	if set.ItemSchema != ItemSchema || set.Graders[1].Name != "tool_called" || set.Graders[1].Version != "1" ||
		set.Graders[1].Weight != 2 || !set.Graders[2].Optional {
		t.Errorf("graders = %+v", set.Graders)
	}
	if set.Classify() != Passed {
		t.Errorf("Classify = %s (verdicts %+v)", set.Classify(), set.Verdicts)
	}
	if r := set.Reward(); r == nil || *r != 1 {
		t.Errorf("Reward = %v", r)
	}
	// The stored form round-trips and classifies the same way.
	b, _ := json.Marshal(set)
	var back VerdictSet
	if err := json.Unmarshal(b, &back); err != nil || back.Classify() != Passed || back.Graders[2].Optional != true {
		t.Errorf("round trip %s: %v", b, err)
	}
}

func TestGrade_AbstentionCarriesNoScore(t *testing.T) {
	t.Parallel()
	v := gradeOne(t, `{"contains":"x"}`, &Item{Kind: KindRollout}, Env{})
	if v.Pass != nil || v.Score != nil || v.Reason != ReasonTargetNull || v.Grader != "contains" {
		t.Errorf("verdict = %+v", v)
	}
}

func TestGrade_RejectsInvalidItem(t *testing.T) {
	t.Parallel()
	s, _ := Compile(nil)
	if _, err := s.Grade(context.Background(), &Item{Kind: "turn"}, Env{}); err == nil {
		t.Error("graded an item of unknown kind")
	}
	if _, err := s.Grade(context.Background(), nil, Env{}); err == nil {
		t.Error("graded a nil item")
	}
}

func TestSuite_GradesConcurrently(t *testing.T) {
	t.Parallel()
	specs, err := ParseSpecs([]byte(`[{"regex":"^(?=.*refund)"},{"json_schema":{"schema":{"type":"string","pattern":"^(?!x)"}}},{"tool_called":{"name":"a","args":{"k":1}}},{"all_tools_ok":true}]`))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Compile(specs)
	done := make(chan Classification, 8)
	for i := 0; i < 8; i++ {
		go func() {
			it := rollout(`"refund"`, []ToolCall{call("a", OutcomeOK, nil, `{"k":1}`)})
			set, err := s.Grade(context.Background(), it, Env{})
			if err != nil {
				done <- ""
				return
			}
			done <- set.Classify()
		}()
	}
	for i := 0; i < 8; i++ {
		if c := <-done; c != Passed {
			t.Errorf("concurrent grade: %s", c)
		}
	}
}
