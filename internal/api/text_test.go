package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/rollout"
)

// Text gyre defines holding U+0000 is refused with 422 naming the field,
// the same on both stores, and nothing is stored; text a contract defines
// (a turn's input_text, a harness's answer and model) is stored and shown
// losslessly on both (issue 11, defect 2: PostgreSQL answered 500).
func TestTextHoldingNUL(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withBlobs(fileBlobs), withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		ev := e.key(gyre.RoleEvaluator)
		tasks := e.tasks(1)
		e.batch(tasks, "") // queued work, which a refused claim must not lease
		for _, tc := range []struct {
			name, method, path, key, body, pointer string
		}{
			{"claim worker_id", http.MethodPost, "/agents/agent-1/claim", e.agent, `{"worker_id":"w\u0000x"}`, "/worker_id"},
			{"claim worker_version", http.MethodPost, "/agents/agent-1/claim", e.agent, `{"worker_version":"\u0000"}`, "/worker_version"},
			{"experiment harness", http.MethodPost, "/api/v1/experiments", ev,
				`{"suite":"refunds","suite_version":"3","harness":"http://h\u0000.test","capabilities":{},"config":{}}`, "/harness"},
			{"key name", http.MethodPost, "/api/v1/keys", e.admin, `{"role":"reader","name":"k\u0000"}`, "/name"},
			{"batch policy", http.MethodPost, "/api/v1/batches", e.admin,
				`{"agent_id":"agent-1","task_ids":["` + tasks[0] + `"],"policy":"p\u0000"}`, "/policy"},
			{"task ids", http.MethodPost, "/api/v1/batches", e.admin, `{"agent_id":"agent-1","task_ids":["` + tasks[0] + `","\u0000"]}`, "/task_ids/1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e.json(tc.method, tc.path, tc.key, tc.body).wantError(t, http.StatusUnprocessableEntity, gyre.CodeInvalidBody, tc.pointer)
			})
		}
		if r := e.do(http.MethodGet, "/api/v1/rollouts?state=leased", e.admin, nil); !strings.Contains(string(r.body), `"items":[]`) {
			t.Errorf("a refused claim leased: %s", r.body)
		}
		for _, path := range []string{"/api/v1/turns?agent_id=%00", "/api/v1/rollouts?agent_id=a%00", "/api/v1/tasks?suite=%00"} {
			e.do(http.MethodGet, path, e.admin, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
		}
		e.do(http.MethodPost, "/agents/a%00b/claim", e.agent, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")

		// Contract text keeps U+0000.
		turn := turnJSON("t-nul", `"input_text":"a\u0000b"`)
		e.postTurns(e.agent, turnBatchJSON("agent-1", turn)).wantTurnsAccepted(t, 1, 0)
		if got := e.listTurns(e.admin, "agent_id=agent-1"); len(got) != 1 || !strings.Contains(string(got[0]), `"input_text":"a\u0000b"`) {
			t.Errorf("turn listed as %s, want its input_text kept", got)
		}
		r := e.json(http.MethodPost, "/api/v1/experiments", ev, experimentBody)
		var exp struct {
			ID string `json:"id"`
		}
		decodeInto(t, r, &exp)
		run := `{"run_id":"r\u0000","status":"completed","classification":"passed","model":"m\u0000","answer":"a\u0000b","error":"e\u0000"}`
		if r := e.json(http.MethodPut, "/api/v1/experiments/"+exp.ID+"/runs/c1/1", ev, run); r.status != http.StatusCreated {
			t.Fatalf("put run: %d %s", r.status, r.body)
		}
		var got struct {
			Items []eval.RunJSON `json:"items"`
		}
		decodeInto(t, e.do(http.MethodGet, "/api/v1/experiments/"+exp.ID+"/runs", ev, nil), &got)
		if len(got.Items) != 1 {
			t.Fatalf("runs = %+v", got)
		}
		g := got.Items[0]
		if expStr(g.RunID) != "r\x00" || expStr(g.Model) != "m\x00" || expStr(g.Answer) != "a\x00b" || expStr(g.Error) != "e\x00" {
			b, _ := json.Marshal(g)
			t.Errorf("run read back as %s, want its harness text kept", b)
		}
	})
}
