package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gyrehq/gyre/flywheel"
)

// rolloutStart is where a rollout test's fake clock starts.
var rolloutStart = time.Date(2031, 6, 1, 12, 0, 0, 0, time.UTC)

// suite uploads a suite of n cases whose graders look for "refund" and
// makes its tasks; it returns the task ids.
func (e *env) tasks(n int) []string {
	e.t.Helper()
	var cases []string
	for i := range n {
		cases = append(cases, fmt.Sprintf(`{"id":"c%d","input":{"question":"refund order %d"},"graders":[{"contains":"refund"},{"tool_called":{"name":"issue_refund"}},{"all_tools_ok":{}}]}`, i, i))
	}
	name := fmt.Sprintf("s%d", time.Now().UnixNano())
	doc := fmt.Sprintf(`{"name":%q,"cases":[%s]}`, name, strings.Join(cases, ","))
	if r := e.json(http.MethodPost, "/api/v1/suites", e.admin, doc); r.status != http.StatusCreated {
		e.t.Fatalf("upload suite: %d %s", r.status, r.body)
	}
	r := e.json(http.MethodPost, "/api/v1/tasks", e.admin, fmt.Sprintf(`{"suite":%q}`, name))
	if r.status != http.StatusOK && r.status != http.StatusCreated {
		e.t.Fatalf("create tasks: %d %s", r.status, r.body)
	}
	var items struct {
		Items []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.body, &items); err != nil {
		e.t.Fatal(err)
	}
	ids := make([]string, len(items.Items))
	for i, it := range items.Items {
		ids[i] = it.TaskID
	}
	return ids
}

// batch creates a batch for agent-1 from body's extra members.
func (e *env) batch(taskIDs []string, extra string, headers ...string) (string, []string) {
	e.t.Helper()
	ids, _ := json.Marshal(taskIDs)
	body := fmt.Sprintf(`{"agent_id":"agent-1","task_ids":%s%s}`, ids, extra)
	r := e.json(http.MethodPost, "/api/v1/batches", e.admin, body, headers...)
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		e.t.Fatalf("create batch: %d %s", r.status, r.body)
	}
	var b struct {
		BatchID    string   `json:"batch_id"`
		RolloutIDs []string `json:"rollout_ids"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil {
		e.t.Fatal(err)
	}
	return b.BatchID, b.RolloutIDs
}

// claimResp is a decoded, schema-checked claim answer.
type claimResp struct {
	response
	claim flywheel.ClaimResponse
}

// claimAs claims for agentID with key; body may be "".
func (e *env) claimAs(key, agentID, query, body string, headers ...string) claimResp {
	e.t.Helper()
	path := "/agents/" + url.PathEscape(agentID) + "/claim" + query
	var r response
	if body == "" {
		r = e.do(http.MethodPost, path, key, nil, headers...)
	} else {
		r = e.json(http.MethodPost, path, key, body, headers...)
	}
	out := claimResp{response: r}
	if r.status == http.StatusOK {
		// Every claim answer is checked against the contract, as sent.
		if err := flywheel.Validate(flywheel.DefClaimResponse, r.body); err != nil {
			e.t.Fatalf("claim answer fails flywheel/1: %v\n%s", err, r.body)
		}
		if err := json.Unmarshal(r.body, &out.claim); err != nil {
			e.t.Fatal(err)
		}
		for i, req := range out.claim.Rollouts {
			raw, _ := json.Marshal(req)
			if err := flywheel.Validate(flywheel.DefRolloutRequest, raw); err != nil {
				e.t.Fatalf("rollout %d fails flywheel/1: %v", i, err)
			}
		}
	}
	return out
}

func (e *env) claim(body string) claimResp {
	e.t.Helper()
	return e.claimAs(e.agent, "agent-1", "", body)
}

// claimOne claims exactly one rollout.
func (e *env) claimOne() flywheel.RolloutRequest {
	e.t.Helper()
	c := e.claim("")
	if c.status != http.StatusOK || len(c.claim.Rollouts) != 1 {
		e.t.Fatalf("claim: %d %s, want one rollout", c.status, c.body)
	}
	return c.claim.Rollouts[0]
}

func leaseOf(r flywheel.RolloutRequest) string {
	tok, _ := r.LeaseToken.Get()
	return tok
}

func (e *env) heartbeat(id, token string) response {
	e.t.Helper()
	return e.do(http.MethodPost, "/rollouts/"+id+"/heartbeat", e.agent, nil, "Lease-Token", token)
}

func (e *env) output(id, token, body string) response {
	e.t.Helper()
	return e.json(http.MethodPost, "/rollouts/"+id+"/output", e.agent, body, "Lease-Token", token)
}

// rolloutView is GET /api/v1/rollouts/{id} decoded loosely.
func (e *env) rolloutView(id string) map[string]json.RawMessage {
	e.t.Helper()
	r := e.do(http.MethodGet, "/api/v1/rollouts/"+id, e.admin, nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("GET rollout: %d %s", r.status, r.body)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &m); err != nil {
		e.t.Fatal(err)
	}
	return m
}

func str(m map[string]json.RawMessage, k string) string {
	var s string
	_ = json.Unmarshal(m[k], &s)
	return s
}
