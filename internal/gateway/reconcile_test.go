package gateway_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	_ "modernc.org/sqlite" // the database/sql driver, to set a promoted policy

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

func complete(t *testing.T, cl *openai.Client) {
	t.Helper()
	if _, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("refund please")}}); err != nil {
		t.Fatal(err)
	}
}

func TestReconciliation_Outcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		count     string // the llm_call_count member, or ""
		want      string
		reason    string
		trainable bool
		reasons   []string
	}{
		{"on_policy", `,"llm_call_count":2`, "on_policy", "", true, []string{}},
		{"off_policy", `,"llm_call_count":3`, "off_policy", "agent reported 3 completions, gateway counted 2", false, []string{"off_policy"}},
		{"not_reported", ``, "unreconciled", "llm_call_count_not_reported", false, []string{"llm_call_count_not_reported"}},
	}
	forEachEngine(t, func(t *testing.T, eng engine) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				h := newHarness(t, eng, harnessOpts{})
				rr := h.rollout(`,"policy":"p1"`)
				cl := h.client(rr)
				complete(t, cl)
				complete(t, cl)
				h.submit(rr, `{"final_text":"refund issued","tool_calls":[]`+tc.count+`}`)
				h.settle(rr.RolloutID)
				v := h.view(rr.RolloutID)
				if deref(v.Reconciliation) != tc.want || (tc.reason == "" && v.ReconciliationReason != nil) ||
					(tc.reason != "" && deref(v.ReconciliationReason) != tc.reason) {
					t.Errorf("reconciliation %v (%v), want %s (%q)", deref(v.Reconciliation), deref(v.ReconciliationReason), tc.want, tc.reason)
				}
				if v.TrainingGrade == nil || *v.TrainingGrade != tc.trainable || !slices.Equal(v.Reasons, tc.reasons) {
					t.Errorf("training grade %v, reasons %v; want %v, %v", deref(v.TrainingGrade), v.Reasons, tc.trainable, tc.reasons)
				}
				if v.State != "graded" || v.Gateway.Completions != 2 {
					t.Errorf("state %s, gateway %+v", v.State, v.Gateway)
				}
			})
		}
	})
}

// TestReconciliation_WaitsForRecordsThroughTheJobQueue: grading waits for
// the gateway records its verdicts read, up to GradeWait; then the
// verdicts are stored while the reconciliation and training grade stay
// null, and the reconcile job decides once the records are durable.
func TestReconciliation_WaitsForRecordsThroughTheJobQueue(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{gw: gateway.Config{NoFlush: true}})
		rr := h.rollout(`,"policy":"p1"`)
		cl := h.client(rr)
		complete(t, cl)
		complete(t, cl) // the first counted completion is durable; this one waits in memory
		h.submit(rr, `{"final_text":"refund issued","tool_calls":[],"llm_call_count":2}`)
		ctx := context.Background()
		run := func() {
			t.Helper()
			if _, err := h.svc.Grader().RunOnce(ctx, "test", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		run()
		if v := h.view(rr.RolloutID); v.State != "submitted" {
			t.Fatalf("graded before the records were durable and before the wait was over: %s", v.State)
		}
		h.clk.Advance(rollout.GradeWait)
		run()
		v := h.view(rr.RolloutID)
		if v.State != "graded" || v.Reconciliation != nil || v.TrainingGrade != nil || !slices.Contains(v.Reasons, "reconciliation_pending") {
			t.Fatalf("after the wait: state %s reconciliation %v training_grade %v reasons %v",
				v.State, deref(v.Reconciliation), deref(v.TrainingGrade), v.Reasons)
		}
		h.flush()
		h.clk.Advance(time.Second) // the reconcile job's retry is due
		run()
		v = h.view(rr.RolloutID)
		if deref(v.Reconciliation) != "on_policy" || v.TrainingGrade == nil || !*v.TrainingGrade {
			t.Fatalf("after the flush: reconciliation %v training_grade %v reasons %v", deref(v.Reconciliation), deref(v.TrainingGrade), v.Reasons)
		}
		if n, _ := h.svc.Grader().RunOnce(ctx, "test", time.Minute); n != 0 {
			t.Errorf("%d jobs left", n)
		}
	})
}

// TestReconciliation_CrashBeforeFlushIsNeverOnPolicy: a replica that dies
// with records in memory makes its rollouts unreconciled
// (gateway_records_lost), whatever the agent reports — even a count that
// matches what did reach the store.
func TestReconciliation_CrashBeforeFlushIsNeverOnPolicy(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		for _, reported := range []string{"1", "2"} {
			t.Run("reported_"+reported, func(t *testing.T) {
				// A recorder that never flushes: the crash comes before it.
				h := newHarness(t, eng, harnessOpts{gw: gateway.Config{NoFlush: true, ReplicaTTL: 10 * time.Second}})
				rr := h.rollout(`,"policy":"p1"`)
				cl := h.client(rr)
				complete(t, cl)
				complete(t, cl)
				h.clk.Advance(time.Second)
				h.submit(rr, `{"final_text":"refund issued","tool_calls":[],"llm_call_count":`+reported+`}`)
				ctx := context.Background()
				for _, wait := range []time.Duration{0, rollout.GradeWait} {
					h.clk.Advance(wait) // then grading stops waiting for the records
					if _, err := h.svc.Grader().RunOnce(ctx, "test", time.Minute); err != nil {
						t.Fatal(err)
					}
				}
				if v := h.view(rr.RolloutID); v.State != "graded" || v.Reconciliation != nil {
					t.Fatalf("state %s reconciliation %v, want graded and undecided", v.State, deref(v.Reconciliation))
				}
				if done, err := h.svc.Grader().ReconcileRollout(ctx, rr.RolloutID); err != nil || done {
					t.Fatalf("reconciled while the replica is alive and unflushed: %v %v", done, err)
				}
				if calls := h.calls(rr.RolloutID); len(calls) != 1 {
					t.Fatalf("%d durable records, want the provisional one only", len(calls))
				}
				// The replica's heartbeat expires: it is dead.
				h.clk.Advance(11 * time.Second)
				if done, err := h.svc.Grader().ReconcileRollout(ctx, rr.RolloutID); err != nil || !done {
					t.Fatalf("not reconciled after the replica died: %v %v", done, err)
				}
				v := h.view(rr.RolloutID)
				if deref(v.Reconciliation) != "unreconciled" || deref(v.ReconciliationReason) != "gateway_records_lost" {
					t.Errorf("reconciliation %v (%v), want unreconciled (gateway_records_lost)", deref(v.Reconciliation), deref(v.ReconciliationReason))
				}
				if v.TrainingGrade == nil || *v.TrainingGrade || !slices.Contains(v.Reasons, "unreconciled:gateway_records_lost") {
					t.Errorf("training grade %v reasons %v", deref(v.TrainingGrade), v.Reasons)
				}
			})
		}
	})
}

func TestProductionEndpoint(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{gw: gateway.Config{DefaultPolicy: "p1"}})
	h.rollout("") // agent-1 exists
	inference := h.key(gyre.RoleInference, "agent-1")
	body := `{"model":"prod-model","messages":[{"role":"user","content":"hi"}]}`
	r := h.mustJSON(http.MethodPost, "/agents/agent-1/v1/chat/completions", inference, body, http.StatusOK)
	if !strings.Contains(string(r.body), `"hello"`) || h.up.last(t)["model"] != "served-model" {
		t.Fatalf("production answer %s, upstream model %v", r.body, h.up.last(t)["model"])
	}
	// The agent's promoted policy wins over the default.
	h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, `{"name":"p2","upstream":"stub","model":"promoted-model"}`, http.StatusCreated)
	db, err := sql.Open("sqlite", filepath.Join(h.dir, storeopen.SQLiteFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one connection, so the busy timeout holds for every statement
	if _, err := db.Exec(`PRAGMA busy_timeout = 10000`); err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.SetPromotedPolicy(t.Context(), promotion.Change{TenantID: h.tenant.ID, AgentID: "agent-1", Policy: "p2", SetBy: "key test"}); err != nil {
		t.Fatal(err)
	}
	h.mustJSON(http.MethodPost, "/agents/agent-1/v1/chat/completions", h.agent, body, http.StatusOK)
	if m := h.up.last(t)["model"]; m != "promoted-model" {
		t.Errorf("upstream model %v, want the promoted policy's", m)
	}
	wantOpenAIError(t, h.do(http.MethodPost, "/agents/agent-2/v1/chat/completions", inference, []byte(body)), http.StatusForbidden, gateway.CodeForbidden)
	wantOpenAIError(t, h.do(http.MethodPost, "/agents/agent-1/v1/chat/completions", h.key(gyre.RoleReader), []byte(body)), http.StatusForbidden, gateway.CodeForbidden)
	wantOpenAIError(t, h.do(http.MethodPost, "/agents/agent-1/v1/chat/completions", "", []byte(body)), http.StatusUnauthorized, gateway.CodeInvalidAPIKey)
	// Production traffic is recorded without a rollout.
	h.flush()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM gateway_calls WHERE rollout_id IS NULL AND agent_id = 'agent-1' AND counted`).Scan(&n); err != nil || n != 2 {
		t.Errorf("production records = %d (%v), want 2", n, err)
	}
}

func TestPoliciesAPI(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{gw: gateway.Config{Upstreams: []gateway.Upstream{
			{Name: "other-tenants", BaseURL: "https://llm.example.com/v1", Tenants: []string{"someone-else"}},
		}}})
		// p1 exists (the harness made it): the identical body again is 200
		// (member order and spelling do not matter), a different one 409.
		same := `{"prices":{"output":2,"cached_input":0.5,"input":1.0},"sampling_overrides":{"temperature":1},"tokenizer":"tok-1",
			"model":"served-model","upstream":"stub","name":"p1","capture_tokens":false}`
		r := h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, same, http.StatusOK)
		var v map[string]any
		_ = json.Unmarshal(r.body, &v)
		if v["name"] != "p1" || v["model"] != "served-model" || v["capture_tokens"] != false || v["created_at"] == nil {
			t.Errorf("policy view %s", r.body)
		}
		for _, tc := range []struct {
			body, code, ptr string
			status          int
		}{
			{`{"name":"p1","upstream":"stub","model":"other"}`, gyre.CodePolicyExists, "/name", http.StatusConflict},
			{`{"name":"p9","upstream":"nope","model":"m"}`, gyre.CodeUpstreamNotAllowed, "/upstream", http.StatusUnprocessableEntity},
			{`{"name":"p9","upstream":"other-tenants","model":"m"}`, gyre.CodeUpstreamNotAllowed, "/upstream", http.StatusUnprocessableEntity},
			{`{"name":"p9","upstream":"stub","model":"m","sampling_overrides":{"messages":[]}}`, gyre.CodeInvalidBody, "/sampling_overrides/messages", http.StatusUnprocessableEntity},
			{`{"name":"p9","upstream":"stub","model":"m","prices":{"input":-1,"output":1}}`, gyre.CodeInvalidBody, "/prices/input", http.StatusUnprocessableEntity},
			{`{"name":"../x","upstream":"stub","model":"m"}`, gyre.CodeInvalidBody, "/name", http.StatusUnprocessableEntity},
			{`{"name":"p9","upstream":"stub"}`, gyre.CodeInvalidBody, "/model", http.StatusUnprocessableEntity},
			{`{"name":"p9","upstream":"stub","model":"m","base_url":"http://evil"}`, gyre.CodeInvalidBody, "/base_url", http.StatusUnprocessableEntity},
		} {
			r := h.do(http.MethodPost, "/api/v1/policies", h.admin, []byte(tc.body))
			var e struct {
				Error struct{ Code, Pointer string }
			}
			_ = json.Unmarshal(r.body, &e)
			if r.status != tc.status || e.Error.Code != tc.code || e.Error.Pointer != tc.ptr {
				t.Errorf("%s: %d %s, want %d %s at %s", tc.body, r.status, r.body, tc.status, tc.code, tc.ptr)
			}
		}
		h.mustJSON(http.MethodPost, "/api/v1/policies", h.agent, `{"name":"p3","upstream":"stub","model":"m"}`, http.StatusForbidden)
		h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, `{"name":"p0","upstream":"stub","model":"m"}`, http.StatusCreated)
		reader := h.key(gyre.RoleReader)
		first := h.mustJSON(http.MethodGet, "/api/v1/policies?limit=1", reader, "", http.StatusOK)
		var page struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
			Next *string `json:"next_cursor"`
		}
		if err := json.Unmarshal(first.body, &page); err != nil || len(page.Items) != 1 || page.Items[0].Name != "p0" || page.Next == nil {
			t.Fatalf("first page %s", first.body)
		}
		second := h.mustJSON(http.MethodGet, "/api/v1/policies?limit=1&cursor="+*page.Next, reader, "", http.StatusOK)
		if err := json.Unmarshal(second.body, &page); err != nil || len(page.Items) != 1 || page.Items[0].Name != "p1" {
			t.Fatalf("second page %s", second.body)
		}
		// A batch naming a policy the tenant lacks is refused.
		r = h.do(http.MethodPost, "/api/v1/batches", h.admin, []byte(`{"agent_id":"a","task_ids":["0190b7a0-0000-7000-8000-000000000000"],"policy":"missing"}`))
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("batch with a missing policy: %d %s", r.status, r.body)
		}
	})
}

// spanText prints every span's name, attributes, events and status, for
// searching.
func spanText(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "%s %v %s", s.Name(), s.Status(), s.SpanContext().TraceID())
		for _, kv := range s.Attributes() {
			fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.Emit())
		}
		for _, ev := range s.Events() {
			fmt.Fprintf(&b, " event %s %v", ev.Name, ev.Attributes)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestGateway_NoSecretInLogsOrMetrics: SPEC §2 — no log line, metric or
// span recorded during a run carries a secret issued during it; the
// gateway token in a path shows only as its route template.
func TestGateway_NoSecretInLogsOrMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, sqliteEngine, harnessOpts{})
	rr := h.rollout(`,"policy":"p1"`)
	cl := h.client(rr)
	complete(t, cl)
	h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) { streamText(w, body, []string{"x"}, false) })
	stream := cl.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	for stream.Next() {
	}
	h.do(http.MethodPost, "/gw/"+gatewayToken(rr)+"/v1/chat/completions", "wrong", []byte(`{}`))
	h.do(http.MethodGet, "/gw/"+gatewayToken(rr)+"/v1/files", rr.APIKey, nil)
	h.submit(rr, `{"final_text":"refund","tool_calls":[],"llm_call_count":2}`)
	h.settle(rr.RolloutID)
	// The upstream saw its own key, never the rollout's.
	h.up.mu.Lock()
	auth := h.up.headers[0].Get("Authorization")
	h.up.mu.Unlock()
	if auth != "Bearer upstream-secret-key-0123456789" {
		t.Errorf("upstream Authorization = %q", auth)
	}
	metrics := string(h.mustJSON(http.MethodGet, "/metrics", h.admin, "", http.StatusOK).body)
	logs := h.logs.String()
	spans := spanText(h.spans.Ended())
	for _, s := range h.secrets {
		if strings.Contains(logs, s) {
			t.Errorf("a secret issued during the run appears in the logs")
		}
		if strings.Contains(metrics, s) {
			t.Errorf("a secret issued during the run appears in the metrics")
		}
		if strings.Contains(spans, s) {
			t.Errorf("a secret issued during the run appears in a span")
		}
	}
	if !strings.Contains(spans, "POST /gw/{token}/v1/chat/completions") || !strings.Contains(spans, "gateway upstream") {
		t.Errorf("gateway requests have no spans under their route template:\n%s", spans)
	}
	if !strings.Contains(logs, `"route":"/gw/{token}/v1/chat/completions"`) {
		t.Errorf("gateway requests are not logged under their route template")
	}
	for _, m := range []string{`gyre_gateway_requests_total{route="/gw/{token}/v1/chat/completions",status="200"} 2`,
		`gyre_gateway_completions_total{counted="true",reason=""} 2`, `gyre_gateway_added_latency_seconds_bucket`,
		`gyre_gateway_upstream_latency_seconds_bucket{stream="true",upstream="stub"`} {
		if !strings.Contains(metrics, m) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

// TestReplicas_RevocationAndReconciliationAcrossReplicas: two gateway
// replicas share one store. A stream admitted on one is cut when the
// rollout is cancelled through the other, and a rollout both served is
// reconciled only once both have flushed past its seal.
func TestReplicas_RevocationAndReconciliationAcrossReplicas(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h := newHarness(t, eng, harnessOpts{})
		// Replica B: its own gateway (never flushing on its own) and server,
		// with a credential cache short enough to wait out.
		const cacheB = 20 * time.Millisecond
		gwB, err := gateway.New(gateway.Config{NoFlush: true, ReplicaID: "b", GrantCacheTTL: cacheB,
			Upstreams: []gateway.Upstream{{Name: "stub", BaseURL: h.up.ts.URL + "/v1", AllowPrivate: true}}},
			gateway.Deps{Store: h.st, Blobs: h.blobs, Clock: tickClock{h.clk}})
		if err != nil {
			t.Fatal(err)
		}
		if err := gwB.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = gwB.Stop(context.Background()) })
		srvB, err := api.New(api.Config{}, api.Deps{Store: h.st, Clock: tickClock{h.clk}, Rollouts: h.svc, Gateway: gwB, Blobs: h.blobs})
		if err != nil {
			t.Fatal(err)
		}
		tsB := httptest.NewServer(srvB.Handler())
		t.Cleanup(tsB.Close)
		onB := func(rr flywheel.RolloutRequest) *openai.Client {
			rr.LLMURL = tsB.URL + "/gw/" + gatewayToken(rr) + "/v1"
			return h.client(rr)
		}

		// Reconciliation waits for both replicas.
		rr := h.rollout(`,"policy":"p1"`)
		complete(t, h.client(rr))
		complete(t, onB(rr))
		h.flush()
		h.clk.Advance(time.Second)
		h.submit(rr, `{"final_text":"refund issued","tool_calls":[],"llm_call_count":2}`)
		ctx := context.Background()
		if _, err := h.svc.Grader().RunOnce(ctx, "test", time.Minute); err != nil {
			t.Fatal(err)
		}
		h.flush() // replica A is past the seal; B is not
		if done, err := h.svc.Grader().ReconcileRollout(ctx, rr.RolloutID); err != nil || done {
			t.Fatalf("reconciled before replica B flushed: %v %v", done, err)
		}
		// B's cached credential could admit a request read before the
		// seal, so B's flush gets past the seal only once it has lapsed
		// (TestRecorder_WatermarkWaitsForCachedCredentials).
		time.Sleep(cacheB + 5*time.Millisecond)
		if err := gwB.Recorder().Flush(ctx); err != nil {
			t.Fatal(err)
		}
		h.clk.Advance(rollout.GradeWait)
		h.settle(rr.RolloutID)
		if v := h.view(rr.RolloutID); deref(v.Reconciliation) != "on_policy" || v.Gateway.Completions != 2 {
			t.Fatalf("reconciliation %v, gateway %+v", deref(v.Reconciliation), v.Gateway)
		}

		// A stream on B is cut when the rollout is cancelled through A.
		cancelled := make(chan struct{})
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			startStream(w)
			sse(w, chunkJSON(`{"role":"assistant","content":"first"}`, ""))
			<-r.Context().Done()
			close(cancelled)
		})
		rr2 := h.rollout(`,"policy":"p1"`)
		stream := onB(rr2).Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		if !stream.Next() {
			t.Fatalf("first event: %v", stream.Err())
		}
		h.mustJSON(http.MethodPost, "/api/v1/rollouts/"+rr2.RolloutID+"/cancel", h.admin, "", http.StatusOK)
		for stream.Next() {
		}
		if err := stream.Err(); err == nil || !strings.Contains(err.Error(), gateway.CodeCredentialExpired) {
			t.Fatalf("stream on replica B after cancellation through A: %v", err)
		}
		<-cancelled
		// The check that cut the stream also dropped B's cached credential:
		// a new request on B is refused.
		_, err = onB(rr2).Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("again")}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || apiErr.Code != gateway.CodeCredentialExpired {
			t.Fatalf("new request on replica B after cancellation through A: %v", err)
		}
	})
}
