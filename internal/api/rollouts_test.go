package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/rollout"
)

// forEachEngine runs f on SQLite and on PostgreSQL.
func forEachEngine(t *testing.T, f func(t *testing.T, eng engine)) {
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			f(t, eng)
		})
	}
}

func TestClaim_EmptyQueueIs200WithPollAfterNever204(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		var got []int
		for range 5 {
			c := e.claim("")
			if c.status != http.StatusOK || len(c.claim.Rollouts) != 0 || !strings.Contains(string(c.body), `"rollouts":[]`) {
				t.Fatalf("empty claim: %d %s", c.status, c.body)
			}
			got = append(got, c.claim.PollAfterMS)
		}
		// The backoff grows for an agent polling an empty queue.
		if fmt.Sprint(got) != "[1000 2000 4000 8000 10000]" {
			t.Fatalf("poll_after_ms = %v, want 1000 growing to 10000", got)
		}
		// New work resets it; poll_after_ms is 0 while work remains.
		tasks := e.tasks(2)
		e.batch(tasks, "")
		if c := e.claim(""); len(c.claim.Rollouts) != 1 || c.claim.PollAfterMS != 0 {
			t.Fatalf("claim with work left: %d rollouts, poll_after_ms %d; want 1 and 0", len(c.claim.Rollouts), c.claim.PollAfterMS)
		}
		if c := e.claim(""); len(c.claim.Rollouts) != 1 || c.claim.PollAfterMS != 1000 {
			t.Fatalf("claim of the last rollout: poll_after_ms %d, want the reset backoff 1000", c.claim.PollAfterMS)
		}
	})
}

func TestClaim_RolloutRequestFollowsTheContract(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		tasks := e.tasks(1)
		batchID, ids := e.batch(tasks, `,"deadline_s":120.5,"group_size":2`)
		c := e.claim(`{"max_rollouts":1,"lease_seconds":30,"worker_id":"w-1","worker_version":"1.2"}`)
		if c.status != http.StatusOK || len(c.claim.Rollouts) != 1 {
			t.Fatalf("claim: %d %s", c.status, c.body)
		}
		r := c.claim.Rollouts[0]
		now := float64(e.clk.Now().UnixMicro()) / 1e6
		if r.RolloutID != ids[0] || r.TurnInput != "refund order 0" || r.ArtifactsDir != "rollouts/"+r.RolloutID {
			t.Errorf("rollout = %+v", r)
		}
		if !regexp.MustCompile(`^https://gyre\.example\.com/base/gw/[A-Za-z0-9_-]{43}/v1$`).MatchString(r.LLMURL) {
			t.Errorf("llm_url = %q, want <public-url>/gw/<43-char token>/v1", r.LLMURL)
		}
		if len(r.APIKey) != 43 || strings.Contains(r.LLMURL, r.APIKey) || len(leaseOf(r)) != 43 {
			t.Errorf("api_key %q / lease_token %q must be fresh 256-bit secrets", r.APIKey, leaseOf(r))
		}
		if r.DeadlineTS != now+120.5 {
			t.Errorf("deadline_ts = %v, want claim time + deadline_s = %v", r.DeadlineTS, now+120.5)
		}
		if exp, ok := r.LeaseExpiresTS.Get(); !ok || exp != now+30 {
			t.Errorf("lease_expires_ts = %v (sent %v), want always sent, claim time + grant", exp, ok)
		}
		var meta map[string]any
		if err := json.Unmarshal(r.Metadata, &meta); err != nil {
			t.Fatal(err)
		}
		if meta["task_id"] != tasks[0] || meta["batch_id"] != batchID || meta["attempt"] != float64(1) || meta["group_id"] == "" {
			t.Errorf("metadata = %v", meta)
		}
		if d, err := http.ParseTime(c.header.Get("Date")); err != nil || !d.Equal(e.clk.Now().Truncate(time.Second)) {
			t.Errorf("Date = %q, want the store clock", c.header.Get("Date"))
		}
		// Two rollouts never share a secret.
		r2 := e.claimOne()
		if r2.APIKey == r.APIKey || r2.LLMURL == r.LLMURL || leaseOf(r2) == leaseOf(r) {
			t.Error("two rollouts share a secret")
		}
	})
}

func TestClaim_LeaseSecondsClampedAndGrantReflected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
	e.batch(e.tasks(3), "")
	now := float64(e.clk.Now().UnixMicro()) / 1e6
	for _, c := range []struct {
		body string
		want float64
	}{
		{`{"lease_seconds":1}`, 5},
		{`{"lease_seconds":100000}`, 300},
		{``, 60},
	} {
		r := e.claim(c.body)
		exp, _ := r.claim.Rollouts[0].LeaseExpiresTS.Get()
		if exp != now+c.want {
			t.Errorf("claim %s: lease_expires_ts = now+%v, want now+%v", c.body, exp-now, c.want)
		}
	}
}

func TestClaim_BadBodies422WithPointer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
	cases := []struct {
		body, query, pointer string
	}{
		{`{"max_rollouts":0}`, "", "/max_rollouts"},
		{`{"max_rollouts":65}`, "", "/max_rollouts"},
		{`{"max_rollouts":1.5}`, "", "/max_rollouts"},
		{`{"lease_seconds":"60"}`, "", "/lease_seconds"},
		{`{"lease":60}`, "", "/lease"},
		{``, "?wait_ms=30001", ""},
		{``, "?wait_ms=-1", ""},
		{``, "?wait_ms=soon", ""},
	}
	for _, c := range cases {
		r := e.claimAs(e.agent, "agent-1", c.query, c.body)
		r.wantError(t, http.StatusUnprocessableEntity, gyre.CodeInvalidBody, c.pointer)
	}
}

func TestClaim_AgentIDPathParam(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
	// A percent-encoded Unicode agent id is decoded, then checked.
	if c := e.claimAs(e.agent, "café ü 7", "", ""); c.status != http.StatusOK {
		t.Fatalf("claim for a Unicode agent id: %d %s", c.status, c.body)
	}
	for _, bad := range []string{"a/b", "..", " x", "x\u3000", "a\u0085b", "\u00a0x"} {
		c := e.claimAs(e.agent, bad, "", "")
		c.wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
	}
	limited := e.key(gyre.RoleAgent, "agent-2")
	e.claimAs(limited, "agent-1", "", "").wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
	reader := e.key(gyre.RoleReader)
	e.claimAs(reader, "agent-1", "", "").wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
}

// A long-poll that found no work answers as soon as work arrives, and a
// shutting-down server ends it with an empty claim. The rollout service
// signals when the poll is waiting, so the work provably arrives while
// the claim is pending, not before it started.
func TestClaim_LongPollAnswersWhenWorkArrives(t *testing.T) {
	t.Parallel()
	waiting := make(chan struct{}, 1)
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}),
		withClaimWaiting(func() {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}))
	tasks := e.tasks(1)
	done := make(chan claimResp, 1)
	go func() { done <- e.claimAs(e.agent, "agent-1", "?wait_ms=30000", "") }()
	<-waiting // the claim found no work and waits for it
	select {
	case c := <-done:
		t.Fatalf("the long-poll answered before work arrived: %d %s", c.status, c.body)
	default:
	}
	_, ids := e.batch(tasks, "")
	c := <-done
	if c.status != http.StatusOK || len(c.claim.Rollouts) != 1 || c.claim.Rollouts[0].RolloutID != ids[0] {
		t.Fatalf("long-poll answered %d %s, want the new rollout", c.status, c.body)
	}
	// A shutting-down server ends long-polls with an empty claim.
	select { // drop a signal of a recheck of the first poll, which has ended
	case <-waiting:
	default:
	}
	go func() { done <- e.claimAs(e.agent, "agent-1", "?wait_ms=30000", "") }()
	<-waiting
	e.svc.Close()
	if c := <-done; c.status != http.StatusOK || len(c.claim.Rollouts) != 0 {
		t.Fatalf("long-poll at shutdown: %d %s", c.status, c.body)
	}
}

// A client that hangs up during a long-poll claim (gyre worker stopping)
// is no server error: nothing is logged at ERROR or with code internal,
// and the access log records 499 (client closed request), not 500.
func TestClaim_AClientHangingUpIsNotAServerError(t *testing.T) {
	t.Parallel()
	waiting := make(chan struct{}, 1)
	accessLog := make(chan slog.Record, 1)
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}),
		withClaimWaiting(func() {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}),
		withLogTap(func(r slog.Record) {
			if r.Message != "http request" {
				return
			}
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "route" && strings.HasSuffix(a.Value.String(), "/claim") {
					accessLog <- r
				}
				return true
			})
		}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.ts.URL+"/agents/agent-1/claim?wait_ms=30000", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.agent)
	req.Header.Set("Content-Type", "application/json")
	errc := make(chan error, 1)
	go func() {
		resp, err := e.ts.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-waiting // the claim found no work and waits for it
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want context.Canceled", err)
	}
	rec := <-accessLog // the handler has returned
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "status" && a.Value.Int64() != statusClientClosedRequest {
			t.Errorf("access log status %d, want 499", a.Value.Int64())
		}
		return true
	})
	if rec.Level >= slog.LevelError {
		t.Errorf("access log at %s", rec.Level)
	}
	for _, l := range e.logs.lines(t) {
		if l["level"] == "ERROR" || l["code"] == gyre.CodeInternal {
			t.Errorf("log line %v: a client that went away is no server error", l)
		}
	}
}

func TestClaim_IdempotencyKeyReturnsSameRollouts(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		e.batch(e.tasks(3), "")
		a := e.claimAs(e.agent, "agent-1", "", `{"max_rollouts":2}`, "Idempotency-Key", "claim-7")
		b := e.claimAs(e.agent, "agent-1", "", `{"max_rollouts":2}`, "Idempotency-Key", "claim-7")
		if len(a.claim.Rollouts) != 2 || len(b.claim.Rollouts) != 2 {
			t.Fatalf("claims: %s / %s", a.body, b.body)
		}
		for i := range 2 {
			if a.claim.Rollouts[i].RolloutID != b.claim.Rollouts[i].RolloutID {
				t.Fatal("a retried claim with the same Idempotency-Key leased other rollouts")
			}
		}
		// gyre keeps no secret it could resend: the retry carries fresh
		// credentials and the first ones stop working.
		first, again := a.claim.Rollouts[0], b.claim.Rollouts[0]
		e.heartbeat(first.RolloutID, leaseOf(first)).wantError(t, http.StatusConflict, gyre.CodeLeaseLost, "")
		if r := e.heartbeat(again.RolloutID, leaseOf(again)); r.status != http.StatusOK {
			t.Fatalf("heartbeat with the retried claim's token: %d %s", r.status, r.body)
		}
		if c := e.claim(""); len(c.claim.Rollouts) != 1 {
			t.Fatalf("a fresh claim got %d rollouts, want the third", len(c.claim.Rollouts))
		}
	})
}

func TestHeartbeat_RenewsToNowPlusOriginalGrant(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		e.batch(e.tasks(1), "")
		c := e.claim(`{"lease_seconds":30}`)
		r := c.claim.Rollouts[0]
		e.clk.Advance(25 * time.Second)
		hb := e.heartbeat(r.RolloutID, leaseOf(r))
		var got struct {
			LeaseExpiresTS float64 `json:"lease_expires_ts"`
		}
		if hb.status != http.StatusOK || json.Unmarshal(hb.body, &got) != nil {
			t.Fatalf("heartbeat: %d %s", hb.status, hb.body)
		}
		if want := float64(e.clk.Now().UnixMicro())/1e6 + 30; got.LeaseExpiresTS != want {
			t.Errorf("lease_expires_ts = %v, want now + the granted 30 s = %v", got.LeaseExpiresTS, want)
		}
	})
}

func TestHeartbeat_ChecksInOrder(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		e.batch(e.tasks(3), `,"max_attempts":1`)
		r := e.claimOne()
		other, otherAdmin := e.newTenant("other")
		_ = other
		otherAgent := e.createKey(otherAdmin, `{"role":"agent"}`).Key

		e.do(http.MethodPost, "/rollouts/"+r.RolloutID+"/heartbeat", otherAgent, nil, "Lease-Token", leaseOf(r)).
			wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		e.heartbeat("0190b7a0-0000-7000-8000-000000000000", leaseOf(r)).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		e.heartbeat("not-a-uuid", leaseOf(r)).wantError(t, http.StatusBadRequest, gyre.CodeInvalidPathParam, "")
		e.heartbeat(r.RolloutID, "wrong").wantError(t, http.StatusConflict, gyre.CodeLeaseLost, "")
		e.heartbeat(r.RolloutID, "").wantError(t, http.StatusConflict, gyre.CodeLeaseLost, "")

		// Submitted counts as finished: 410.
		if o := e.output(r.RolloutID, leaseOf(r), `{"final_text":"refund issued"}`); o.status != http.StatusOK {
			t.Fatalf("output: %d %s", o.status, o.body)
		}
		e.heartbeat(r.RolloutID, leaseOf(r)).wantError(t, http.StatusGone, gyre.CodeRolloutFinished, "")
		// …but a wrong token is still 409 first.
		e.heartbeat(r.RolloutID, "wrong").wantError(t, http.StatusConflict, gyre.CodeLeaseLost, "")

		// A lapsed lease is 409, swept or not.
		r2 := e.claimOne()
		e.clk.Advance(61 * time.Second)
		e.heartbeat(r2.RolloutID, leaseOf(r2)).wantError(t, http.StatusConflict, gyre.CodeLeaseLost, "")
		if _, err := e.svc.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.heartbeat(r2.RolloutID, leaseOf(r2)).wantError(t, http.StatusConflict, gyre.CodeLeaseLost, "")
	})
}

func TestOutput_AcceptedReplayedAndConflicting(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		e.batch(e.tasks(1), "")
		r := e.claimOne()
		body := `{"final_text":"refund issued","tool_calls":[{"name":"issue_refund","outcome":"ok","status_code":200,"tool_call_id":"call_1"}],"llm_call_count":0}`
		o := e.output(r.RolloutID, leaseOf(r), body)
		if o.status != http.StatusOK || string(o.body) != fmt.Sprintf(`{"rollout_id":%q,"state":"submitted","replayed":false}`+"\n", r.RolloutID) {
			t.Fatalf("output: %d %s", o.status, o.body)
		}
		// Key order and whitespace differ, the content does not: a replay.
		same := `{ "llm_call_count": 0, "tool_calls":[{"status_code":200,"outcome":"ok","name":"issue_refund","tool_call_id":"call_1"}], "final_text":"refund issued"}`
		e.clk.Advance(time.Hour) // whatever the state or time
		o = e.output(r.RolloutID, leaseOf(r), same)
		if o.status != http.StatusOK || !strings.Contains(string(o.body), `"replayed":true`) {
			t.Fatalf("replay: %d %s", o.status, o.body)
		}
		e.output(r.RolloutID, leaseOf(r), `{"final_text":"something else"}`).wantError(t, http.StatusConflict, gyre.CodeOutputConflict, "")
		// The gateway token is revoked on acceptance.
		tok := strings.TrimSuffix(strings.TrimPrefix(r.LLMURL, "https://gyre.example.com/base/gw/"), "/v1")
		g, err := e.st.GatewayGrant(context.Background(), rollout.HashSecret(tok))
		if err != nil || !g.Revoked {
			t.Errorf("gateway grant after acceptance: %+v %v, want revoked", g, err)
		}
	})
}

func TestOutput_ChecksInOrder(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		e.batch(e.tasks(4), `,"deadline_s":100,"max_attempts":1`)
		r := e.claimOne()
		invalid := `{"final_text":"x","score":1}`
		// 1. unknown or foreign → 404, before anything else.
		e.output("0190b7a0-0000-7000-8000-000000000000", leaseOf(r), invalid).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
		// 2. the lease token before the body.
		e.output(r.RolloutID, "wrong", invalid).wantError(t, http.StatusConflict, gyre.CodeLeaseLost, "")
		// 3. the schema, strictly: server-authored members are rejected.
		for _, c := range []struct{ body, ptr string }{
			{`{"final_text":"x","score":1}`, "/score"},
			{`{"final_text":"x","verdicts":[]}`, "/verdicts"},
			{`{"final_text":"x","training_grade":true}`, "/training_grade"},
			{`{"tool_calls":null}`, ""},
			{`{"final_text":"x","tool_calls":[{"name":"t","outcome":"unknown","status_code":500}]}`, "/tool_calls/0/status_code"},
			{`{"final_text":"x","tool_calls":[{"name":"t","outcome":"ok"}]}`, "/tool_calls/0"},
			{`{"final_text":"x","tool_calls":[{"name":"t","outcome":"ok","status_code":200,"entity_ids":{"order_id":"1"}}]}`, "/tool_calls/0/entity_ids/order_id"},
			{`{"final_text":"x","exclusion":{"reason":"oops"}}`, "/exclusion"},
			{`{"final_text":"x","artifacts":{"a":"0123"}}`, "/artifacts/a"},
		} {
			o := e.output(r.RolloutID, leaseOf(r), c.body)
			if o.status != http.StatusUnprocessableEntity {
				t.Fatalf("%s: status %d %s, want 422", c.body, o.status, o.body)
			}
			if d := o.errorBody(t); d.Code != gyre.CodeInvalidBody || (c.ptr != "" && !strings.HasPrefix(d.Pointer, c.ptr)) {
				t.Errorf("%s: error %+v, want invalid_body at %s", c.body, d, c.ptr)
			}
		}
		// 5. lapsed lease → 409.
		e.clk.Advance(61 * time.Second)
		e.output(r.RolloutID, leaseOf(r), `{"final_text":"x"}`).wantError(t, http.StatusConflict, gyre.CodeLeaseLost, "")
		// 6. past deadline + grace → 410, even under a live lease.
		r2 := e.claimOne()
		for range 5 {
			e.clk.Advance(29 * time.Second)
			if hb := e.heartbeat(r2.RolloutID, leaseOf(r2)); hb.status != http.StatusOK {
				t.Fatalf("heartbeat: %s", hb.body)
			}
		}
		e.output(r2.RolloutID, leaseOf(r2), `{"final_text":"x"}`).wantError(t, http.StatusGone, gyre.CodeDeadlineExceeded, "")
		// Cancelled → 409 lease_lost.
		r3 := e.claimOne()
		if c := e.do(http.MethodPost, "/api/v1/rollouts/"+r3.RolloutID+"/cancel", e.admin, nil); c.status != http.StatusOK {
			t.Fatalf("cancel: %d %s", c.status, c.body)
		}
		e.output(r3.RolloutID, leaseOf(r3), `{"final_text":"x"}`).wantError(t, http.StatusConflict, gyre.CodeLeaseLost, "")
		e.do(http.MethodPost, "/api/v1/rollouts/"+r3.RolloutID+"/cancel", e.admin, nil).wantError(t, http.StatusGone, gyre.CodeRolloutFinished, "")
	})
}

func TestOutput_AbsentToolCallsIsNullAndDistinctFromEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
	e.batch(e.tasks(2), "")
	a, b := e.claimOne(), e.claimOne()
	if o := e.output(a.RolloutID, leaseOf(a), `{"final_text":"x"}`); o.status != http.StatusOK {
		t.Fatal(string(o.body))
	}
	// An output omitting tool_calls equals one sending null: a replay.
	if o := e.output(a.RolloutID, leaseOf(a), `{"final_text":"x","tool_calls":null,"tool_calls_omitted_count":0}`); !strings.Contains(string(o.body), `"replayed":true`) {
		t.Fatalf("null after absent: %s", o.body)
	}
	e.output(a.RolloutID, leaseOf(a), `{"final_text":"x","tool_calls":[]}`).wantError(t, http.StatusConflict, gyre.CodeOutputConflict, "")
	if o := e.output(b.RolloutID, leaseOf(b), `{"final_text":"x","tool_calls":[]}`); o.status != http.StatusOK {
		t.Fatal(string(o.body))
	}
	va, vb := e.rolloutView(a.RolloutID), e.rolloutView(b.RolloutID)
	var oa, ob map[string]json.RawMessage
	_ = json.Unmarshal(va["output"], &oa)
	_ = json.Unmarshal(vb["output"], &ob)
	if string(oa["tool_calls"]) != "null" || string(ob["tool_calls"]) != "[]" {
		t.Fatalf("stored tool_calls: %s and %s, want null and [] kept apart", oa["tool_calls"], ob["tool_calls"])
	}
}

func TestWatchdog_LeaseExpiryAbandonsRevokesAndRetries(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		e.batch(e.tasks(1), `,"max_attempts":2`)
		r := e.claimOne()
		e.clk.Advance(59 * time.Second)
		if res, err := e.svc.Sweep(context.Background()); err != nil || res.Abandoned != 0 {
			t.Fatalf("sweep before expiry: %+v %v", res, err)
		}
		e.clk.Advance(2 * time.Second)
		res, err := e.svc.Sweep(context.Background())
		if err != nil || res.Abandoned != 1 || res.Retried != 1 {
			t.Fatalf("sweep after expiry: %+v %v, want one abandoned and retried", res, err)
		}
		v := e.rolloutView(r.RolloutID)
		if str(v, "state") != "abandoned" || string(v["exclusion"]) != `{"reason":"state:abandoned","detail":null}` {
			t.Errorf("abandoned rollout: state %s exclusion %s", v["state"], v["exclusion"])
		}
		// The retry is a new rollout: new id, attempt 2, same group.
		r2 := e.claimOne()
		var m1, m2 map[string]any
		_ = json.Unmarshal(r.Metadata, &m1)
		_ = json.Unmarshal(r2.Metadata, &m2)
		if r2.RolloutID == r.RolloutID || m2["attempt"] != float64(2) || m2["group_id"] != m1["group_id"] {
			t.Fatalf("retry = %s %v, want a new id with attempt 2 in group %v", r2.RolloutID, m2, m1["group_id"])
		}
		// The last attempt is not retried again.
		e.clk.Advance(61 * time.Second)
		if res, err := e.svc.Sweep(context.Background()); err != nil || res.Abandoned != 1 || res.Retried != 0 {
			t.Fatalf("sweep of the last attempt: %+v %v", res, err)
		}
	})
}

func TestGrading_AcceptedOutputIsGradedFromTheDurableQueue(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		e.batch(e.tasks(2), "")
		a, b := e.claimOne(), e.claimOne()
		good := `{"final_text":"refund issued","tool_calls":[{"name":"issue_refund","outcome":"ok","status_code":200}],"llm_call_count":0,"reward":1,"success":true}`
		unknown := `{"final_text":"refund issued","tool_calls":[{"name":"issue_refund","outcome":"unknown","status_code":null}]}`
		for _, c := range []struct {
			r    flywheel.RolloutRequest
			body string
		}{{a, good}, {b, unknown}} {
			if o := e.output(c.r.RolloutID, leaseOf(c.r), c.body); o.status != http.StatusOK {
				t.Fatal(string(o.body))
			}
		}
		if v := e.rolloutView(a.RolloutID); string(v["verdicts"]) != "null" || str(v, "state") != "submitted" {
			t.Fatalf("before grading: verdicts %s state %s", v["verdicts"], v["state"])
		}
		// A grader (any replica, after any restart) takes the jobs.
		n, err := e.svc.Grader().RunOnce(context.Background(), "replica-test", time.Minute)
		if err != nil || n != 2 {
			t.Fatalf("RunOnce = %d, %v", n, err)
		}
		va := e.rolloutView(a.RolloutID)
		var verdicts []struct {
			Grader string `json:"grader"`
			Pass   *bool  `json:"pass"`
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(va["verdicts"], &verdicts); err != nil || len(verdicts) != 3 {
			t.Fatalf("verdicts = %s (%v)", va["verdicts"], err)
		}
		for _, v := range verdicts {
			if v.Pass == nil || !*v.Pass {
				t.Errorf("rollout a: %s did not pass: %+v", v.Grader, v)
			}
		}
		if str(va, "state") != "graded" || str(va, "reconciliation") != "on_policy" || string(va["training_grade"]) != "false" {
			t.Errorf("rollout a: state %s reconciliation %s training_grade %s", va["state"], va["reconciliation"], va["training_grade"])
		}
		// Zero counted completions can never be training grade, and the
		// advisory reward and success decide nothing.
		if !strings.Contains(string(va["not_training_grade_reasons"]), `"no_completions"`) {
			t.Errorf("reasons = %s, want no_completions", va["not_training_grade_reasons"])
		}
		vb := e.rolloutView(b.RolloutID)
		_ = json.Unmarshal(vb["verdicts"], &verdicts)
		if verdicts[2].Pass != nil {
			t.Errorf("all_tools_ok over an unknown outcome = %v, want an abstention", *verdicts[2].Pass)
		}
		reasons := string(vb["not_training_grade_reasons"])
		if !strings.Contains(reasons, `"llm_call_count_not_reported"`) || str(vb, "reconciliation") != "unreconciled" {
			t.Errorf("rollout b: reconciliation %s, reasons %s", vb["reconciliation"], reasons)
		}
		if n, _ := e.svc.Grader().RunOnce(context.Background(), "replica-test", time.Minute); n != 0 {
			t.Errorf("a second run found %d jobs, want none left", n)
		}
	})
}

func TestRolloutDetail_EveryKeyPresentAndNoSecrets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
	e.batch(e.tasks(1), "")
	r := e.claimOne()
	resp := e.do(http.MethodGet, "/api/v1/rollouts/"+r.RolloutID, e.admin, nil)
	for _, secret := range []string{r.APIKey, leaseOf(r), strings.TrimSuffix(strings.TrimPrefix(r.LLMURL, "https://gyre.example.com/base/gw/"), "/v1")} {
		if strings.Contains(string(resp.body), secret) {
			t.Fatalf("the rollout view shows a secret gyre issued: %s", resp.body)
		}
	}
	v := e.rolloutView(r.RolloutID)
	for _, k := range []string{"rollout_id", "agent_id", "task_id", "batch_id", "group_id", "attempt", "state", "worker_id",
		"created_at", "claimed_at", "submitted_at", "deadline_ts", "turn_input", "output", "exclusion", "gateway",
		"tool_call_joins", "reconciliation", "reconciliation_reason", "server_fingerprint", "agent_fingerprint",
		"verdicts", "training_grade", "not_training_grade_reasons", "reward", "verdict_history"} {
		if _, ok := v[k]; !ok {
			t.Errorf("key %q missing from the rollout view", k)
		}
	}
	if string(v["verdict_history"]) != "[]" || string(v["reward"]) != "null" {
		t.Errorf("an ungraded rollout: verdict_history %s reward %s, want [] and null", v["verdict_history"], v["reward"])
	}
	if string(v["output"]) != "null" || string(v["training_grade"]) != "null" || string(v["submitted_at"]) != "null" {
		t.Errorf("unknown values must be null: output %s training_grade %s submitted_at %s", v["output"], v["training_grade"], v["submitted_at"])
	}
	other, otherAdmin := e.newTenant("other")
	_ = other
	e.do(http.MethodGet, "/api/v1/rollouts/"+r.RolloutID, otherAdmin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
}

func TestBatches_ValidationDefaultsAndIdempotency(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		tasks := e.tasks(2)
		ids, _ := json.Marshal(tasks)
		bad := []struct{ body, code, ptr string }{
			{`{"task_ids":` + string(ids) + `}`, gyre.CodeInvalidBody, "/agent_id"},
			{`{"agent_id":"a/b","task_ids":` + string(ids) + `}`, gyre.CodeInvalidBody, "/agent_id"},
			{`{"agent_id":"a"}`, gyre.CodeInvalidBody, "/task_ids"},
			{`{"agent_id":"a","task_ids":[]}`, gyre.CodeInvalidBody, "/task_ids"},
			{`{"agent_id":"a","task_ids":["x"]}`, gyre.CodeInvalidBody, "/task_ids/0"},
			{`{"agent_id":"a","task_ids":["0190b7a0-0000-7000-8000-000000000000"]}`, gyre.CodeInvalidBody, "/task_ids/0"},
			{`{"agent_id":"a","task_ids":` + string(ids) + `,"group_size":0}`, gyre.CodeInvalidBody, "/group_size"},
			{`{"agent_id":"a","task_ids":` + string(ids) + `,"deadline_s":0}`, gyre.CodeInvalidBody, "/deadline_s"},
			{`{"agent_id":"a","task_ids":` + string(ids) + `,"max_attempts":0}`, gyre.CodeInvalidBody, "/max_attempts"},
			{`{"agent_id":"a","task_ids":` + string(ids) + `,"retry_on":["deadline_exceeded"]}`, gyre.CodeInvalidBody, "/retry_on/0"},
			{`{"agent_id":"a","task_ids":` + string(ids) + `,"retry_on":["nope"]}`, gyre.CodeInvalidBody, "/retry_on/0"},
			{`{"agent_id":"a","task_ids":` + string(ids) + `,"limits":{"max_tokens":1}}`, gyre.CodeInvalidBody, "/limits/max_tokens"},
			{`{"agent_id":"a","task_ids":` + string(ids) + `,"policy":"nope"}`, gyre.CodePolicyNotFound, "/policy"},
			{`{"agent_id":"a","suite":"nope"}`, gyre.CodeNotFound, "/suite"},
		}
		for _, c := range bad {
			r := e.json(http.MethodPost, "/api/v1/batches", e.admin, c.body)
			if r.status < 400 {
				t.Fatalf("%s: %d %s", c.body, r.status, r.body)
			}
			if d := r.errorBody(t); d.Code != c.code || d.Pointer != c.ptr {
				t.Errorf("%s: %+v, want %s at %s", c.body, d, c.code, c.ptr)
			}
		}
		batchID, rollouts := e.batch(tasks, "", "Idempotency-Key", "b-1")
		again, rollouts2 := e.batch(tasks, "", "Idempotency-Key", "b-1")
		if again != batchID || strings.Join(rollouts, ",") != strings.Join(rollouts2, ",") {
			t.Fatal("a repeated Idempotency-Key created another batch")
		}
		g := e.do(http.MethodGet, "/api/v1/batches/"+batchID, e.admin, nil)
		var b batchView
		if err := json.Unmarshal(g.body, &b); err != nil {
			t.Fatal(err)
		}
		if b.GroupSize != 1 || b.DeadlineS != 600 || b.MaxAttempts != 2 || strings.Join(b.RetryOn, ",") != "capacity,substrate_unavailable,flywheel_crash" ||
			b.Counts[gyre.StateQueued] != 2 || b.Groups != 2 {
			t.Errorf("defaults = %+v", b)
		}
		// A batch may name a suite instead of tasks.
		r := e.json(http.MethodPost, "/api/v1/batches", e.admin, `{"agent_id":"agent-1","suite":"`+e.suiteName(tasks[0])+`","group_size":3}`)
		if r.status != http.StatusCreated || strings.Count(string(r.body), ",")+1 < 6 {
			t.Fatalf("batch from a suite: %d %s", r.status, r.body)
		}
		// Cancel: queued and leased rollouts end, the rest stay.
		c := e.do(http.MethodPost, "/api/v1/batches/"+batchID+"/cancel", e.admin, nil)
		if c.status != http.StatusOK || !strings.Contains(string(c.body), `"cancelled":2`) {
			t.Fatalf("cancel: %d %s", c.status, c.body)
		}
	})
}

// suiteName finds the suite a task came from.
func (e *env) suiteName(taskID string) string {
	e.t.Helper()
	r := e.do(http.MethodGet, "/api/v1/tasks/"+taskID, e.admin, nil)
	var tk struct {
		Source struct {
			Suite string `json:"suite"`
		} `json:"source"`
	}
	if err := json.Unmarshal(r.body, &tk); err != nil || tk.Source.Suite == "" {
		e.t.Fatalf("task view has no suite name: %s", r.body)
	}
	return tk.Source.Suite
}

// TestClaim_ConcurrentClaimersTakeEachRolloutExactlyOnce is the Must-show:
// 1,000 rollouts, 32 concurrent claimers over HTTP, every rollout claimed
// exactly once, on both stores.
func TestClaim_ConcurrentClaimersTakeEachRolloutExactlyOnce(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
		_, ids := e.batch(e.tasks(100), `,"group_size":10`)
		if len(ids) != 1000 {
			t.Fatalf("minted %d rollouts", len(ids))
		}
		counts := claimConcurrently(t, e.ts.URL, e.agent, "agent-1", 32)
		if len(counts) != 1000 {
			t.Fatalf("claimed %d distinct rollouts, want 1000", len(counts))
		}
		for id, n := range counts {
			if n != 1 {
				t.Errorf("rollout %s claimed %d times", id, n)
			}
		}
	})
}

// claimConcurrently runs claimers against base until the queue is empty
// and counts how often each rollout was handed out.
func claimConcurrently(t *testing.T, base, key, agent string, claimers int, bases ...string) map[string]int {
	t.Helper()
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		wg     sync.WaitGroup
	)
	urls := append([]string{base}, bases...)
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range claimers {
		wg.Go(func() {
			u := urls[i%len(urls)] + "/agents/" + url.PathEscape(agent) + "/claim"
			for {
				req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"max_rollouts":1}`))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				var c flywheel.ClaimResponse
				err = json.NewDecoder(resp.Body).Decode(&c)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil {
					t.Errorf("claim: %d %v", resp.StatusCode, err)
					return
				}
				if len(c.Rollouts) == 0 {
					return
				}
				mu.Lock()
				for _, r := range c.Rollouts {
					counts[r.RolloutID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return counts
}
