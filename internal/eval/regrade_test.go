package eval

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// TestRegrade_GradesStoredRunsWithoutTheHarness records an experiment
// graded without a judge (the judge abstains), then regrades it with one:
// the harness is never called again, the set-reasoning grader still reads
// the stored trajectory, every earlier verdict set is kept, and the
// summary follows the latest sets, on both engines.
func TestRegrade_GradesStoredRunsWithoutTheHarness(t *testing.T) {
	t.Parallel()
	for _, eng := range storeEngines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := eng.open(t)
			blobs, err := blobstore.Open(ctx, "file://"+filepath.Join(t.TempDir(), "blobs"), "")
			if err != nil {
				t.Fatal(err)
			}
			defer blobs.Close()
			tn, err := st.CreateTenant(ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
			h := newFakeHarness(t, `{"agent":"bot","revision":"r1","provides":{"trajectory":true,"tool_calls":true}}`)
			srv := httptest.NewServer(h)
			defer srv.Close()
			s := writeSuite(t, `name: refunds
version: "1"
defaults: {repetitions: 2}
cases:
  - id: small
    input: {question: "Refund order 1042"}
    graders:
      - tool_called: {name: issue_refund, max: 1}
      - judge: {rubric: "Confirms the refund amount.", policy: judge}
`, nil)
			c, err := NewClient(srv.URL, "k", nil, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			runner, err := NewRunner(Config{Criteria: DefaultCriteria()}, Deps{Client: c,
				Recorder: &StoreRecorder{Store: st, Blobs: blobs, Tenant: tn.ID}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := runner.Run(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Report.Passed != 2 {
				t.Fatalf("first grading: %+v, want both runs passed with the judge abstaining", res.Report.Summary)
			}
			before, err := st.Experiment(ctx, tn.ID, res.Experiment.ID)
			if err != nil {
				t.Fatal(err)
			}
			creates, _, polls, trajs := h.snapshot()

			var mu sync.Mutex
			var asked []grade.Subject
			judge := grade.JudgeFunc(func(_ context.Context, req grade.JudgeRequest) (grade.JudgeAnswer, error) {
				mu.Lock()
				asked = append(asked, req.Subject)
				mu.Unlock()
				return grade.JudgeAnswer{Text: `{"score":0.2,"reason":"no amount"}`}, nil
			})
			rg := Regrader{Store: st, Blobs: blobs, Tenant: tn.ID,
				Env: grade.Env{Judge: judge, Subject: grade.Subject{TenantID: tn.ID, TenantName: tn.Name}}}
			out, err := rg.Regrade(ctx, res.Experiment.ID, nil)
			if err != nil {
				t.Fatalf("Regrade: %v", err)
			}
			if out.Regraded != 2 || out.Report.Passed != 0 || out.Report.Failed != 2 || out.Report.PassRate == nil || *out.Report.PassRate != 0 ||
				out.Report.ExitCode != ExitFailed {
				t.Fatalf("regrade = %+v %+v, want both runs failed by the judge", out, out.Report.Summary)
			}
			mu.Lock()
			if len(asked) != 2 || asked[0].Kind != grade.SubjectRun || asked[0].TenantID != tn.ID ||
				!strings.HasPrefix(asked[0].ID, res.Experiment.ID+"/small/") {
				t.Errorf("the judge was asked for %+v, want each run of the experiment in its tenant", asked)
			}
			mu.Unlock()
			creates2, _, polls2, trajs2 := h.snapshot()
			if len(creates2) != len(creates) || len(polls2) != len(polls) || len(trajs2) != len(trajs) {
				t.Fatalf("the regrade called the harness: creates %d→%d", len(creates), len(creates2))
			}
			runs, _, err := st.ListRuns(ctx, tn.ID, res.Experiment.ID, store.Page{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				vs := decodeJSON[[]grade.Verdict](t, r.Verdicts)
				if len(vs) != 2 || vs[0].Pass == nil || !*vs[0].Pass || vs[1].Pass == nil || *vs[1].Pass {
					t.Errorf("run %s/%d verdicts %s: want tool_called passing from the stored trajectory and the judge failing", r.CaseID, r.Repetition, r.Verdicts)
				}
				if r.Classification != "failed" || r.Score == nil {
					t.Errorf("run %s/%d: %s score %v, want failed with a score", r.CaseID, r.Repetition, r.Classification, r.Score)
				}
				sets, err := st.RunVerdictSets(ctx, tn.ID, r.ExperimentID, r.CaseID, r.Repetition)
				if err != nil || len(sets) != 2 {
					t.Fatalf("history = %d sets (%v), want the first grading and the regrade", len(sets), err)
				}
				first := decodeJSON[[]grade.Verdict](t, sets[0].Verdicts)
				if first[1].Reason != grade.ReasonJudgeUnavailable || sets[1].Source != store.VerdictsFromTask {
					t.Errorf("history %+v: want the judge_unavailable set kept, then the case's graders again", sets)
				}
			}
			after, err := st.Experiment(ctx, tn.ID, res.Experiment.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(after.Summary), `"failed":2`) || !after.FinishedAt.Equal(*before.FinishedAt) {
				t.Errorf("stored summary %s finished %v; want the new summary and the finish time kept (%v)", after.Summary, after.FinishedAt, before.FinishedAt)
			}

			// Graders given to the regrade are used instead and recorded.
			specs, err := grade.ParseSpecs(json.RawMessage(`[{"contains":"Refund"}]`))
			if err != nil {
				t.Fatal(err)
			}
			g, err := grade.Compile(specs)
			if err != nil {
				t.Fatal(err)
			}
			out, err = rg.Regrade(ctx, res.Experiment.ID, &g)
			if err != nil || out.Report.Passed != 2 {
				t.Fatalf("regrade with graders = %+v, %v; want both passing", out.Report.Summary, err)
			}
			sets, _ := st.RunVerdictSets(ctx, tn.ID, res.Experiment.ID, "small", 1)
			if len(sets) != 3 || sets[2].Source != store.VerdictsFromRequest || !strings.Contains(string(sets[2].Graders), "contains") {
				t.Errorf("history after a graders regrade = %+v", sets)
			}
			if _, err := rg.Regrade(ctx, "0190b7a0-0000-7000-8000-000000000000", nil); err == nil || !strings.Contains(err.Error(), "not found") {
				t.Errorf("unknown experiment: %v, want not found", err)
			}
		})
	}
}

// TestRegrade_LeavesUngradedRunsAlone: timed-out and errored runs never
// reached grading, so a regrade skips them; runs recorded without their
// graders need graders named.
func TestRegrade_LeavesUngradedRunsAlone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rec  store.RunRecord
		want bool
	}{
		{store.RunRecord{Status: "completed", Classification: "passed"}, true},
		{store.RunRecord{Status: "completed", Classification: "unscored"}, true},
		{store.RunRecord{Status: "completed", Classification: "error", Error: "grading: boom"}, true},
		{store.RunRecord{Status: "completed", Classification: "error", Error: "invalid response"}, false},
		{store.RunRecord{Status: "running", Classification: "failed", TimedOut: true}, false},
		{store.RunRecord{Status: "completed", Classification: "failed", TimedOut: true}, false},
		{store.RunRecord{Status: "failed", Classification: "error"}, false},
		{store.RunRecord{Status: "completed", Classification: ""}, false},
	} {
		if got := regradable(c.rec); got != c.want {
			t.Errorf("regradable(%+v) = %v, want %v", c.rec, got, c.want)
		}
	}
}
