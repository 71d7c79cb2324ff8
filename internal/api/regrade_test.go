package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
)

// goodOutput passes the graders of env.tasks.
const goodOutput = `{"final_text":"refund issued","tool_calls":[{"name":"issue_refund","outcome":"ok","status_code":200}],"llm_call_count":0}`

// gradedRollouts creates a batch over n tasks, submits goodOutput for each
// rollout and grades them; it returns the batch and rollout ids.
func (e *env) gradedRollouts(taskIDs []string) (string, []string) {
	e.t.Helper()
	batch, _ := e.batch(taskIDs, "")
	var ids []string
	for range taskIDs {
		r := e.claimOne()
		if o := e.output(r.RolloutID, leaseOf(r), goodOutput); o.status != http.StatusOK {
			e.t.Fatalf("output: %d %s", o.status, o.body)
		}
		ids = append(ids, r.RolloutID)
	}
	e.gradeAll()
	return batch, ids
}

// gradeAll runs the grading jobs until none is left.
func (e *env) gradeAll() {
	e.t.Helper()
	for {
		n, err := e.svc.Grader().RunOnce(context.Background(), "replica-test", time.Minute)
		if err != nil {
			e.t.Fatalf("RunOnce: %v", err)
		}
		if n == 0 {
			return
		}
	}
}

// regradeAnswer is a rollout regrade's answer, decoded.
type regradeAnswer struct {
	RolloutID      string            `json:"rollout_id"`
	GradedAt       time.Time         `json:"graded_at"`
	Source         string            `json:"source"`
	GraderVersions []grade.GraderRef `json:"grader_versions"`
	Graders        json.RawMessage   `json:"graders"`
	Verdicts       []grade.Verdict   `json:"verdicts"`
	Reward         *float64          `json:"reward"`
	TrainingGrade  *bool             `json:"training_grade"`
	Reasons        []string          `json:"not_training_grade_reasons"`
}

func (e *env) regrade(id, body string) regradeAnswer {
	e.t.Helper()
	r := e.json(http.MethodPost, "/api/v1/rollouts/"+id+"/regrade", e.admin, body)
	if r.status != http.StatusOK {
		e.t.Fatalf("regrade: %d %s", r.status, r.body)
	}
	var a regradeAnswer
	decodeInto(e.t, r, &a)
	return a
}

// history decodes a rollout's verdict_history.
func (e *env) history(id string) []regradeAnswer {
	e.t.Helper()
	var h []regradeAnswer
	if err := json.Unmarshal(e.rolloutView(id)["verdict_history"], &h); err != nil {
		e.t.Fatal(err)
	}
	return h
}

func passes(vs []grade.Verdict) bool {
	for _, v := range vs {
		if v.Pass == nil || !*v.Pass {
			return false
		}
	}
	return len(vs) > 0
}

func TestRegrade_RequestGradersNeverChangeTheTaskGraders(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		tasks := e.tasks(1)
		_, ids := e.gradedRollouts(tasks)
		before := e.do(http.MethodGet, "/api/v1/tasks/"+tasks[0], e.admin, nil)

		a := e.regrade(ids[0], `{"graders":[{"contains":"chargeback"}]}`)
		if a.Source != "request" || len(a.Verdicts) != 1 || a.Verdicts[0].Pass == nil || *a.Verdicts[0].Pass ||
			!strings.Contains(string(a.Graders), "chargeback") {
			t.Fatalf("regrade with request graders = %+v, want one failing contains verdict from the request", a)
		}
		after := e.do(http.MethodGet, "/api/v1/tasks/"+tasks[0], e.admin, nil)
		if string(before.body) != string(after.body) {
			t.Fatalf("a graders body changed the task:\nbefore %s\nafter  %s", before.body, after.body)
		}
		// Without a body the task's frozen graders grade again.
		b := e.regrade(ids[0], "")
		if b.Source != "task" || string(b.Graders) != "null" || len(b.Verdicts) != 3 || !passes(b.Verdicts) {
			t.Fatalf("regrade with the task's graders = %+v, want its 3 passing verdicts", b)
		}
		if c := e.regrade(ids[0], `{"graders":null}`); c.Source != "task" {
			t.Errorf("graders null: source %q, want the task's graders", c.Source)
		}
	})
}

func TestRegrade_HistoryKeepsEverySetWithItsTime(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		_, ids := e.gradedRollouts(e.tasks(1))
		first := e.history(ids[0])
		if len(first) != 1 || first[0].Source != "task" {
			t.Fatalf("history after grading = %+v, want the one set from the task", first)
		}
		e.clk.Advance(time.Hour)
		a := e.regrade(ids[0], `{"graders":[{"contains":"chargeback"}]}`)
		e.clk.Advance(time.Hour)
		b := e.regrade(ids[0], "")

		h := e.history(ids[0])
		if len(h) != 3 {
			t.Fatalf("history = %d sets, want 3", len(h))
		}
		wantSources := []string{"task", "request", "task"}
		for i, s := range h {
			if s.Source != wantSources[i] {
				t.Errorf("history[%d].source = %q, want %q (oldest first)", i, s.Source, wantSources[i])
			}
			if len(s.GraderVersions) != len(s.Verdicts) || s.GraderVersions[0].Version == "" {
				t.Errorf("history[%d] grader versions %+v do not match its %d verdicts", i, s.GraderVersions, len(s.Verdicts))
			}
			if i > 0 && !s.GradedAt.After(h[i-1].GradedAt) {
				t.Errorf("history[%d].graded_at %s is not after %s", i, s.GradedAt, h[i-1].GradedAt)
			}
		}
		if !h[1].GradedAt.Equal(a.GradedAt) || !h[2].GradedAt.Equal(b.GradedAt) || !h[0].GradedAt.Equal(first[0].GradedAt) {
			t.Errorf("history times %s %s %s, want the grading's and each regrade's", h[0].GradedAt, h[1].GradedAt, h[2].GradedAt)
		}
		if !h[2].GradedAt.Equal(rolloutStart.Add(2 * time.Hour)) {
			t.Errorf("latest graded_at = %s, want the clock's time of the regrade", h[2].GradedAt)
		}
		// The current verdicts are the latest set's.
		v := e.rolloutView(ids[0])
		latest, _ := json.Marshal(h[2].Verdicts)
		var cur []grade.Verdict
		_ = json.Unmarshal(v["verdicts"], &cur)
		curJSON, _ := json.Marshal(cur)
		if string(latest) != string(curJSON) {
			t.Errorf("verdicts %s, want the latest set %s", curJSON, latest)
		}
	})
}

// TestRegrade_TrainingGradeFollowsTheLatestSet is SPEC §8's judge outage:
// a judge whose upstream is down abstains (judge_error), so nothing
// decided the rollout (no_verdict) and it has no reward; once the judge
// answers, a batch regrade passes it, the history keeps both sets, and
// the training grade, its reasons and the reward follow the latest set
// while the reconciliation stays as it was.
func TestRegrade_TrainingGradeFollowsTheLatestSet(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		var up atomic.Bool
		var subjects sync.Map // rollout id -> tenant id the judge was asked for
		judge := grade.JudgeFunc(func(ctx context.Context, req grade.JudgeRequest) (grade.JudgeAnswer, error) {
			if req.Subject.Kind == grade.SubjectRollout {
				subjects.Store(req.Subject.ID, req.Subject.TenantID)
			}
			if !up.Load() {
				return grade.JudgeAnswer{}, errors.New("dial tcp: connection refused")
			}
			return grade.JudgeAnswer{Text: `{"score":0.9,"reason":"apologises and confirms the amount"}`}, nil
		})
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}),
			withGradeEnv(func(store.Store) grade.Env { return grade.Env{Judge: judge} }))
		doc := fmt.Sprintf(`{"name":"judged%d","cases":[{"id":"c0","input":{"question":"refund"},"graders":[{"judge":{"rubric":"Confirms the refund.","policy":"judge"}}]}]}`, time.Now().UnixNano())
		var suite struct {
			Name string `json:"name"`
		}
		decodeInto(t, e.json(http.MethodPost, "/api/v1/suites", e.admin, doc), &suite)
		tasks := e.mustCreateTasks(fmt.Sprintf(`{"suite":%q}`, suite.Name))
		batch, ids := e.gradedRollouts([]string{tasks.Items[0].TaskID})

		v := e.rolloutView(ids[0])
		var verdicts []grade.Verdict
		_ = json.Unmarshal(v["verdicts"], &verdicts)
		if len(verdicts) != 1 || verdicts[0].Pass != nil || verdicts[0].Reason != grade.ReasonJudgeError {
			t.Fatalf("verdicts while the judge is down = %s, want one judge_error abstention", v["verdicts"])
		}
		if !strings.Contains(string(v["not_training_grade_reasons"]), `"no_verdict"`) || string(v["reward"]) != "null" {
			t.Fatalf("before the regrade: reasons %s reward %s, want no_verdict and no reward", v["not_training_grade_reasons"], v["reward"])
		}
		reconciliation := string(v["reconciliation"])
		batchOutcomes := func() (outcomes string, reward string) {
			t.Helper()
			var b map[string]json.RawMessage
			decodeInto(t, e.do(http.MethodGet, "/api/v1/batches/"+batch, e.admin, nil), &b)
			return string(b["outcomes"]), string(b["mean_reward"])
		}
		if o, r := batchOutcomes(); !strings.Contains(o, `"unscored":1`) || r != "null" {
			t.Fatalf("batch before the regrade: outcomes %s mean_reward %s, want one unscored and no reward", o, r)
		}

		up.Store(true)
		e.clk.Advance(time.Minute)
		r := e.json(http.MethodPost, "/api/v1/batches/"+batch+"/regrade", e.admin, "")
		if r.status != http.StatusOK {
			t.Fatalf("batch regrade: %d %s", r.status, r.body)
		}
		var br struct {
			BatchID    string          `json:"batch_id"`
			Items      []regradeAnswer `json:"items"`
			NotGraded  []string        `json:"not_graded"`
			NextCursor *string         `json:"next_cursor"`
		}
		decodeInto(t, r, &br)
		if br.BatchID != batch || len(br.Items) != 1 || br.Items[0].RolloutID != ids[0] || !passes(br.Items[0].Verdicts) ||
			len(br.NotGraded) != 0 || br.NextCursor != nil {
			t.Fatalf("batch regrade = %s, want the one rollout passing", r.body)
		}
		if br.Items[0].Reward == nil || *br.Items[0].Reward != 0.9 {
			t.Errorf("regrade reward = %v, want the judge's 0.9", br.Items[0].Reward)
		}
		v = e.rolloutView(ids[0])
		if strings.Contains(string(v["not_training_grade_reasons"]), `"no_verdict"`) || string(v["reward"]) != "0.9" {
			t.Errorf("after the regrade: reasons %s reward %s, want no no_verdict and reward 0.9", v["not_training_grade_reasons"], v["reward"])
		}
		if string(v["training_grade"]) == "null" || string(v["reconciliation"]) != reconciliation {
			t.Errorf("after the regrade: training_grade %s reconciliation %s; want a decision and reconciliation %s unchanged",
				v["training_grade"], v["reconciliation"], reconciliation)
		}
		if o, r := batchOutcomes(); !strings.Contains(o, `"passed":1`) || !strings.Contains(r, `"value":0.9`) {
			t.Errorf("batch after the regrade: outcomes %s mean_reward %s, want the latest set's pass and reward", o, r)
		}
		// The regrade asked the judge for the rollout, in its tenant, as
		// the first grading did.
		if tenant, ok := subjects.Load(ids[0]); !ok || tenant != e.tenant.ID {
			t.Errorf("the judge was asked for rollout %s in tenant %v, want %s", ids[0], tenant, e.tenant.ID)
		}
		if h := e.history(ids[0]); len(h) != 2 || h[0].Verdicts[0].Reason != grade.ReasonJudgeError || !passes(h[1].Verdicts) {
			t.Errorf("history = %+v, want the abstention then the pass", h)
		}
	})
}

func TestRegrade_ForeignIDsAre404(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		batch, ids := e.gradedRollouts(e.tasks(1))
		_, otherAdmin := e.newTenant("other")
		for _, path := range []string{
			"/api/v1/rollouts/" + ids[0] + "/regrade",
			"/api/v1/batches/" + batch + "/regrade",
			"/api/v1/rollouts/0190b7a0-0000-7000-8000-000000000000/regrade",
			"/api/v1/batches/0190b7a0-0000-7000-8000-000000000000/regrade",
		} {
			e.json(http.MethodPost, path, otherAdmin, "").wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		}
		e.json(http.MethodPost, "/api/v1/rollouts/not-a-uuid/regrade", e.admin, "").wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
		e.json(http.MethodPost, "/api/v1/rollouts/"+ids[0]+"/regrade", e.key(gyre.RoleReader), "").wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
		if h := e.history(ids[0]); len(h) != 1 {
			t.Errorf("refused regrades stored sets: history has %d", len(h))
		}
	})
}

func TestRegrade_BadGradersAre422AndChangeNothing(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{AllowCommand: func(_, argv0 string) bool { return argv0 == "/usr/local/bin/ok-grader" }},
			withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		batch, ids := e.gradedRollouts(e.tasks(1))
		for _, c := range []struct {
			name, body, code, pointer string
			status                    int
		}{
			{"not a list", `{"graders":{"contains":"x"}}`, gyre.CodeInvalidBody, "/graders", 422},
			{"unknown grader", `{"graders":[{"contains":"x"},{"telepathy":{}}]}`, gyre.CodeInvalidBody, "/graders/1", 422},
			{"bad config", `{"graders":[{"regex":"("}]}`, gyre.CodeInvalidBody, "/graders/0/regex", 422},
			{"command not allow-listed", `{"graders":[{"command":{"run":["/bin/sh","-c","echo"]}}]}`, gyre.CodeGraderNotAllowed, "/graders/0/command", 422},
			{"unknown member", `{"graders":[],"grader":[]}`, gyre.CodeInvalidBody, "/grader", 422},
			{"not JSON", `{"graders":[`, gyre.CodeInvalidBody, "", 422},
		} {
			t.Run(c.name, func(t *testing.T) {
				for _, path := range []string{"/api/v1/rollouts/" + ids[0] + "/regrade", "/api/v1/batches/" + batch + "/regrade"} {
					r := e.json(http.MethodPost, path, e.admin, c.body)
					if r.status != c.status {
						t.Fatalf("%s: status %d %s, want %d", path, r.status, r.body, c.status)
					}
					if d := r.errorBody(t); d.Code != c.code || (c.pointer != "" && !strings.HasPrefix(d.Pointer, c.pointer)) {
						t.Errorf("%s: error %+v, want %s at %s", path, d, c.code, c.pointer)
					}
				}
			})
		}
		r := e.do(http.MethodPost, "/api/v1/rollouts/"+ids[0]+"/regrade", e.admin, strings.NewReader(`graders`), "Content-Type", "text/plain")
		r.wantError(t, http.StatusUnsupportedMediaType, gyre.CodeUnsupportedMedia, "")
		if h := e.history(ids[0]); len(h) != 1 {
			t.Errorf("refused regrades stored sets: history has %d", len(h))
		}
		// An allow-listed command is accepted as a declaration.
		if a := e.regrade(ids[0], `{"graders":[{"command":{"run":["/usr/local/bin/ok-grader"]}}]}`); a.Source != "request" || len(a.Verdicts) != 1 {
			t.Errorf("allow-listed command regrade = %+v", a)
		}
	})
}

func TestRegrade_NotGradedIs409(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		e.batch(e.tasks(1), "")
		r := e.claimOne()
		e.json(http.MethodPost, "/api/v1/rollouts/"+r.RolloutID+"/regrade", e.admin, "").wantError(t, http.StatusConflict, gyre.CodeNotGraded, "")
		if o := e.output(r.RolloutID, leaseOf(r), goodOutput); o.status != http.StatusOK {
			t.Fatal(string(o.body))
		}
		// Submitted, but its grading has not run yet.
		e.json(http.MethodPost, "/api/v1/rollouts/"+r.RolloutID+"/regrade", e.admin, "").wantError(t, http.StatusConflict, gyre.CodeNotGraded, "")
		if h := e.history(r.RolloutID); len(h) != 0 {
			t.Errorf("a refused regrade stored %d sets", len(h))
		}
		e.gradeAll()
		if a := e.regrade(r.RolloutID, ""); len(a.Verdicts) != 3 {
			t.Errorf("regrade after grading = %+v", a)
		}
	})
}

func TestRegradeBatch_PagesThroughTheBatchAndListsUngradedRollouts(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		batch, _ := e.batch(e.tasks(5), "")
		var graded []string
		for range 3 {
			r := e.claimOne()
			if o := e.output(r.RolloutID, leaseOf(r), goodOutput); o.status != http.StatusOK {
				t.Fatal(string(o.body))
			}
			graded = append(graded, r.RolloutID)
		}
		e.claimOne() // leased: nothing to regrade
		e.gradeAll()
		seen := map[string]int{}
		notGraded := 0
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("the batch regrade never ends")
			}
			path := "/api/v1/batches/" + batch + "/regrade?limit=2"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			r := e.json(http.MethodPost, path, e.admin, "")
			if r.status != http.StatusOK {
				t.Fatalf("page %d: %d %s", pages, r.status, r.body)
			}
			var br struct {
				Items      []regradeAnswer `json:"items"`
				NotGraded  []string        `json:"not_graded"`
				NextCursor *string         `json:"next_cursor"`
			}
			decodeInto(t, r, &br)
			if len(br.Items)+len(br.NotGraded) > 2 {
				t.Fatalf("page %d holds %d rollouts, want at most the limit 2", pages, len(br.Items)+len(br.NotGraded))
			}
			for _, it := range br.Items {
				seen[it.RolloutID]++
			}
			notGraded += len(br.NotGraded)
			if br.NextCursor == nil {
				break
			}
			cursor = *br.NextCursor
		}
		if len(seen) != 3 || notGraded != 2 {
			t.Fatalf("regraded %v and %d not graded; want the 3 graded rollouts once each and 2 not graded", seen, notGraded)
		}
		for _, id := range graded {
			if seen[id] != 1 {
				t.Errorf("rollout %s regraded %d times", id, seen[id])
			}
			if h := e.history(id); len(h) != 2 {
				t.Errorf("rollout %s history has %d sets, want 2", id, len(h))
			}
		}
	})
}

func TestRegradeExperiment_RulesOfTheEndpoint(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withBlobs(fileBlobs))
		_, ev := e.newKey(e.tenant.ID, auth.KeyRequest{Role: gyre.RoleEvaluator})
		_, rd := e.newKey(e.tenant.ID, auth.KeyRequest{Role: gyre.RoleReader})
		var exp eval.ExperimentJSON
		decodeInto(t, e.json(http.MethodPost, "/api/v1/experiments", ev, experimentBody), &exp)
		base := "/api/v1/experiments/" + exp.ID
		put := func(caseID, body string) {
			t.Helper()
			if r := e.json(http.MethodPut, base+"/runs/"+caseID+"/1", ev, body); r.status != http.StatusCreated {
				t.Fatalf("put run: %d %s", r.status, r.body)
			}
		}
		put("c1", `{"status":"completed","classification":"passed","model":"m","answer":"Refund issued","verdicts":[{"grader":"contains","pass":true,"score":null,"reason":""}],"graders":[{"contains":"Refund"}],"input":{"question":"q"}}`)
		put("c2", `{"status":"failed","classification":"error","model":"m","error":"the harness reported the run failed"}`)
		if r := e.json(http.MethodPost, base+"/finish", ev, `{"model":"m","summary":{"passed":1}}`); r.status != http.StatusOK {
			t.Fatalf("finish: %d %s", r.status, r.body)
		}

		e.json(http.MethodPost, base+"/regrade", rd, "").wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
		_, otherAdmin := e.newTenant("other")
		e.json(http.MethodPost, base+"/regrade", otherAdmin, "").wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		e.json(http.MethodPost, base+"/regrade", ev, `{"graders":[{"telepathy":{}}]}`).wantError(t, 422, gyre.CodeInvalidBody, "/graders/0")
		e.json(http.MethodPost, base+"/regrade", ev, `{"graders":[{"command":{"run":["/bin/sh"]}}]}`).
			wantError(t, 422, gyre.CodeGraderNotAllowed, "/graders/0/command")

		r := e.json(http.MethodPost, base+"/regrade", ev, `{"graders":[{"contains":"chargeback"}]}`)
		if r.status != http.StatusOK {
			t.Fatalf("regrade: %d %s", r.status, r.body)
		}
		var got eval.RegradeJSON
		decodeInto(t, r, &got)
		if got.ExperimentID != exp.ID || got.Regraded != 1 || got.Skipped[eval.SkipNotGraded] != 1 || got.Summary.Failed != 1 ||
			got.Summary.Errors != 1 || got.Summary.Passed != 0 {
			t.Fatalf("regrade = %s, want c1 failed by the request's grader and c2 left an error", r.body)
		}
		// The admin may regrade too, with the graders the run kept.
		r = e.json(http.MethodPost, base+"/regrade", e.admin, "")
		decodeInto(t, r, &got)
		if r.status != http.StatusOK || got.Summary.Passed != 1 {
			t.Fatalf("regrade with the run's graders: %d %s", r.status, r.body)
		}
		sets, err := e.st.RunVerdictSets(context.Background(), e.tenant.ID, exp.ID, "c1", 1)
		if err != nil || len(sets) != 3 {
			t.Fatalf("run history = %d sets (%v), want the first grading and two regrades", len(sets), err)
		}

		// Runs recorded without their graders need graders named.
		var old eval.ExperimentJSON
		decodeInto(t, e.json(http.MethodPost, "/api/v1/experiments", ev, experimentBody), &old)
		if r := e.json(http.MethodPut, "/api/v1/experiments/"+old.ID+"/runs/c1/1", ev,
			`{"status":"completed","classification":"passed","model":"m","answer":"Refund"}`); r.status != http.StatusCreated {
			t.Fatalf("put: %d %s", r.status, r.body)
		}
		e.json(http.MethodPost, "/api/v1/experiments/"+old.ID+"/regrade", ev, "").wantError(t, http.StatusConflict, gyre.CodeNotGraded, "")
	})
}
