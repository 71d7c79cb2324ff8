package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
)

// promotionView decodes a promotion object.
type promotionView struct {
	ID              string   `json:"id"`
	AgentID         string   `json:"agent_id"`
	Candidate       string   `json:"candidate"`
	Baseline        string   `json:"baseline"`
	Suite           *string  `json:"suite"`
	SuiteVersion    *string  `json:"suite_version"`
	TaskIDs         []string `json:"task_ids"`
	Repetitions     int      `json:"repetitions"`
	MinDelta        float64  `json:"min_delta"`
	MaxExcludedRate float64  `json:"max_excluded_rate"`
	DeadlineS       float64  `json:"deadline_s"`
	State           string   `json:"state"`
	Reasons         []string `json:"reasons"`
	Batches         struct {
		Baseline  *string `json:"baseline"`
		Candidate *string `json:"candidate"`
	} `json:"batches"`
}

// promotionEnv is a server whose tenant has agent-1 (seen through a
// batch), policies p1, p2 and p3 with p1 promoted for agent-1, and a
// suite "gate" of ten cases.
func promotionEnv(t *testing.T, eng engine) *env {
	t.Helper()
	e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
	ctx := context.Background()
	e.batch(e.tasks(1), "")
	for _, n := range []string{"p1", "p2", "p3"} {
		if _, _, err := e.st.CreatePolicy(ctx, store.Policy{TenantID: e.tenant.ID, Name: n,
			Body: json.RawMessage(`{"model":"m","name":"` + n + `","upstream":"stub"}`), SHA256: n}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.SetPromotedPolicy(ctx, promotion.Change{TenantID: e.tenant.ID, AgentID: "agent-1", Policy: "p1",
		SetBy: "key k"}); err != nil {
		t.Fatal(err)
	}
	var cases []string
	for i := range 10 {
		cases = append(cases, fmt.Sprintf(`{"id":"c%d","input":{"question":"q%d"},"graders":[{"contains":"yes"}]}`, i, i))
	}
	if r := e.json(http.MethodPost, "/api/v1/suites", e.admin,
		`{"name":"gate","version":"1","cases":[`+strings.Join(cases, ",")+`]}`); r.status != http.StatusCreated {
		t.Fatalf("upload suite: %d %s", r.status, r.body)
	}
	return e
}

// promotionBatchCount counts the tenant's batches a promotion created.
func (e *env) promotionBatchCount() int {
	e.t.Helper()
	sums, _, err := e.st.ListBatches(context.Background(), e.tenant.ID, store.BatchFilter{}, store.Page{Limit: 500})
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, b := range sums {
		if b.PromotionID != nil {
			n++
		}
	}
	return n
}

// TestPromotions_CreateReadListAndCancel: POST /api/v1/promotions makes
// the suite's tasks once and one batch per side over them, tagged with
// the promotion; the object reads back by id and in the list; a second
// promotion of the agent while one runs is 409 promotion_running;
// cancelling ends it failed (cancelled) with both batches cancelled, and
// cancelling again is 409 promotion_decided.
func TestPromotions_CreateReadListAndCancel(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := promotionEnv(t, eng)
		reader := e.key(gyre.RoleReader)
		r := e.json(http.MethodPost, "/api/v1/promotions", e.admin, `{"agent_id":"agent-1","candidate":"p2","suite":"gate","suite_version":1}`)
		if r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		var p promotionView
		decodeInto(t, r, &p)
		if loc := r.header.Get("Location"); loc != "/api/v1/promotions/"+p.ID {
			t.Errorf("Location = %q", loc)
		}
		var raw map[string]json.RawMessage
		decodeInto(t, r, &raw)
		for k, want := range map[string]string{"state": `"running"`, "reasons": `[]`, "evidence": `null`, "decided_at": `null`,
			"baseline": `"p1"`, "suite": `"gate"`, "suite_version": `"1"`, "repetitions": `5`, "min_delta": `0.02`,
			"max_excluded_rate": `0.05`, "deadline_s": `86400`} {
			if string(raw[k]) != want {
				t.Errorf("%s = %s, want %s", k, raw[k], want)
			}
		}
		for _, k := range []string{"id", "agent_id", "candidate", "task_ids", "seed", "batches", "created_by", "created_at", "deadline_at"} {
			if _, ok := raw[k]; !ok {
				t.Errorf("the promotion object lacks %q: %s", k, r.body)
			}
		}
		if len(p.TaskIDs) != 10 || p.Batches.Baseline == nil || p.Batches.Candidate == nil {
			t.Fatalf("promotion %s: want 10 tasks and both batches", r.body)
		}
		for side, id := range map[string]string{"baseline": *p.Batches.Baseline, "candidate": *p.Batches.Candidate} {
			b := e.json(http.MethodGet, "/api/v1/batches/"+id, reader, "")
			var bv struct {
				Policy        string         `json:"policy"`
				GroupSize     int            `json:"group_size"`
				TaskIDs       []string       `json:"task_ids"`
				PromotionID   string         `json:"promotion_id"`
				PromotionSide string         `json:"promotion_side"`
				Counts        map[string]int `json:"counts"`
			}
			decodeInto(t, b, &bv)
			want := map[string]string{"baseline": "p1", "candidate": "p2"}[side]
			if bv.Policy != want || bv.GroupSize != 5 || fmt.Sprint(bv.TaskIDs) != fmt.Sprint(p.TaskIDs) ||
				bv.PromotionID != p.ID || bv.PromotionSide != side || bv.Counts["queued"] != 50 {
				t.Errorf("%s batch %s; want policy %s, group 5 over the promotion's tasks, tagged", side, b.body, want)
			}
		}
		got := e.json(http.MethodGet, "/api/v1/promotions/"+p.ID, reader, "")
		if got.status != http.StatusOK || string(got.body) != string(r.body) {
			t.Errorf("GET = %d %s, want the created object", got.status, got.body)
		}
		list := e.json(http.MethodGet, "/api/v1/promotions?agent_id=agent-1&state=running", reader, "")
		var l struct {
			Items      []promotionView `json:"items"`
			NextCursor *string         `json:"next_cursor"`
		}
		decodeInto(t, list, &l)
		if len(l.Items) != 1 || l.Items[0].ID != p.ID || l.NextCursor != nil {
			t.Errorf("list = %s", list.body)
		}

		e.json(http.MethodPost, "/api/v1/promotions", e.admin, `{"agent_id":"agent-1","candidate":"p3","suite":"gate"}`).
			wantError(t, http.StatusConflict, gyre.CodePromotionRunning, "")
		e.json(http.MethodPost, "/api/v1/promotions/"+p.ID+"/cancel", reader, "").wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")

		c := e.json(http.MethodPost, "/api/v1/promotions/"+p.ID+"/cancel", e.admin, "")
		var cv promotionView
		decodeInto(t, c, &cv)
		if c.status != http.StatusOK || cv.State != promotion.StateFailed || fmt.Sprint(cv.Reasons) != "[cancelled]" {
			t.Fatalf("cancel: %d %s, want failed [cancelled]", c.status, c.body)
		}
		for _, id := range []string{*p.Batches.Baseline, *p.Batches.Candidate} {
			var bv struct {
				State  string         `json:"state"`
				Counts map[string]int `json:"counts"`
			}
			decodeInto(t, e.json(http.MethodGet, "/api/v1/batches/"+id, reader, ""), &bv)
			if bv.State != "cancelled" || bv.Counts["cancelled"] != 50 {
				t.Errorf("batch %s after the cancel: %+v, want cancelled", id, bv)
			}
		}
		if pol, _ := e.st.AgentPolicy(context.Background(), e.tenant.ID, "agent-1"); pol == nil || *pol != "p1" {
			t.Errorf("a cancelled promotion changed the promoted policy")
		}
		e.json(http.MethodPost, "/api/v1/promotions/"+p.ID+"/cancel", e.admin, "").
			wantError(t, http.StatusConflict, gyre.CodePromotionDecided, "")
		e.json(http.MethodGet, "/api/v1/promotions/0192f0c4-0000-7000-8000-0000000000aa", reader, "").
			wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		e.json(http.MethodGet, "/api/v1/promotions?state=done", reader, "").wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")

		// Once it ended, the agent may be promoted again, here over task ids.
		ids, _ := json.Marshal(p.TaskIDs[:3])
		r = e.json(http.MethodPost, "/api/v1/promotions", e.admin, `{"agent_id":"agent-1","candidate":"p3","baseline":"p2","task_ids":`+string(ids)+`,"repetitions":2}`)
		var p2 promotionView
		decodeInto(t, r, &p2)
		if r.status != http.StatusCreated || p2.Baseline != "p2" || p2.Suite != nil || fmt.Sprint(p2.TaskIDs) != fmt.Sprint(p.TaskIDs[:3]) {
			t.Errorf("promotion over task ids with a named baseline: %d %s", r.status, r.body)
		}
		_, otherAdmin := e.newTenant("other")
		e.json(http.MethodGet, "/api/v1/promotions/"+p.ID, otherAdmin, "").wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
	})
}

// TestPromotions_BadInputIs422AtTheFieldAndChangesNothing: every rule of
// the promotion body, one row each.
func TestPromotions_BadInputIs422AtTheFieldAndChangesNothing(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := promotionEnv(t, eng)
		// agent-2 is seen (a batch) but has no promoted policy, and the
		// server has no default policy.
		if r := e.json(http.MethodPost, "/api/v1/batches", e.admin, `{"agent_id":"agent-2","suite":"gate"}`); r.status != http.StatusCreated {
			t.Fatalf("agent-2's batch: %d %s", r.status, r.body)
		}
		for _, tc := range []struct {
			rule, body, code, pointer string
		}{
			{"candidate equal to the baseline", `"candidate":"p1"`, gyre.CodeInvalidBody, "/candidate"},
			{"candidate equal to the named baseline", `"candidate":"p2","baseline":"p2"`, gyre.CodeInvalidBody, "/candidate"},
			{"candidate is required", `"candidate":""`, gyre.CodeInvalidBody, "/candidate"},
			{"unknown candidate policy", `"candidate":"nope"`, gyre.CodePolicyNotFound, "/candidate"},
			{"unknown baseline policy", `"candidate":"p2","baseline":"nope"`, gyre.CodePolicyNotFound, "/baseline"},
			{"agent gyre never saw", `"candidate":"p2","agent_id":"ghost"`, gyre.CodeInvalidBody, "/agent_id"},
			{"agent id off the contract grammar", `"candidate":"p2","agent_id":"a/b"`, gyre.CodeInvalidBody, "/agent_id"},
			{"no baseline resolvable", `"candidate":"p2","agent_id":"agent-2"`, gyre.CodeInvalidBody, "/baseline"},
			{"unknown suite", `"candidate":"p2","suite":"nope"`, gyre.CodeInvalidBody, "/suite"},
			{"unknown suite version", `"candidate":"p2","suite_version":"9"`, gyre.CodeInvalidBody, "/suite_version"},
			{"suite and task ids both", `"candidate":"p2","task_ids":["0192f0c4-0000-7000-8000-0000000000aa"]`, gyre.CodeInvalidBody, "/task_ids"},
			{"neither suite nor task ids", `"candidate":"p2","suite":null`, gyre.CodeInvalidBody, "/suite"},
			{"unknown task id", `"candidate":"p2","suite":null,"task_ids":["0192f0c4-0000-7000-8000-0000000000aa"]`, gyre.CodeInvalidBody, "/task_ids/0"},
			{"task ids are UUIDs", `"candidate":"p2","suite":null,"task_ids":["x"]`, gyre.CodeInvalidBody, "/task_ids/0"},
			{"empty task ids", `"candidate":"p2","suite":null,"task_ids":[]`, gyre.CodeInvalidBody, "/task_ids"},
			{"min_delta above 1", `"candidate":"p2","min_delta":1.5`, gyre.CodeInvalidBody, "/min_delta"},
			{"min_delta below -1", `"candidate":"p2","min_delta":-1.01`, gyre.CodeInvalidBody, "/min_delta"},
			{"max_excluded_rate below 0", `"candidate":"p2","max_excluded_rate":-0.1`, gyre.CodeInvalidBody, "/max_excluded_rate"},
			{"max_excluded_rate above 1", `"candidate":"p2","max_excluded_rate":1.1`, gyre.CodeInvalidBody, "/max_excluded_rate"},
			{"repetitions below 1", `"candidate":"p2","repetitions":0`, gyre.CodeInvalidBody, "/repetitions"},
			{"repetitions above 100", `"candidate":"p2","repetitions":101`, gyre.CodeInvalidBody, "/repetitions"},
			{"deadline_s below 1", `"candidate":"p2","deadline_s":0.5`, gyre.CodeInvalidBody, "/deadline_s"},
			{"unknown member", `"candidate":"p2","colour":"red"`, gyre.CodeInvalidBody, "/colour"},
		} {
			t.Run(tc.rule, func(t *testing.T) {
				body := `{"agent_id":"agent-1","suite":"gate",` + tc.body + `}`
				if strings.Contains(tc.body, `"agent_id"`) {
					body = `{"suite":"gate",` + tc.body + `}`
				}
				if strings.Contains(tc.body, `"suite":null`) {
					body = strings.Replace(body, `"suite":"gate",`, "", 1)
					body = strings.Replace(body, `,"suite":null`, "", 1)
				}
				e.json(http.MethodPost, "/api/v1/promotions", e.admin, body).wantError(t, http.StatusUnprocessableEntity, tc.code, tc.pointer)
			})
		}
		var l struct {
			Items []promotionView `json:"items"`
		}
		decodeInto(t, e.json(http.MethodGet, "/api/v1/promotions", e.admin, ""), &l)
		if len(l.Items) != 0 || e.promotionBatchCount() != 0 {
			t.Errorf("refused promotions left %d promotions and %d promotion batches", len(l.Items), e.promotionBatchCount())
		}
		e.json(http.MethodPost, "/api/v1/promotions", e.key(gyre.RoleReader), `{"agent_id":"agent-1","candidate":"p2","suite":"gate"}`).
			wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
	})
}
