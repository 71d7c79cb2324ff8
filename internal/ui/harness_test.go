package ui_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/harness"
	"github.com/gyrehq/gyre/internal/promotion/runner"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/secret"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/telemetry"
	"github.com/gyrehq/gyre/internal/ui"
)

// xssText is the final text of one seeded rollout: agent output that
// would run if the page did not escape it.
const xssText = `<script>window.gyreXSS=1</script><img src=x onerror="window.gyreXSS=2">`

// server is a whole gyre serve in-process — admin API, flywheel/1,
// gateway in front of a stub upstream, grader and the web UI — on a
// SQLite store in a temporary directory, with one tenant and its keys.
type server struct {
	t      *testing.T
	st     store.Store
	ts     *httptest.Server
	tenant gyre.Tenant
	// Keys of the tenant: admin, reader, agent; readerID is the reader
	// key's id (to revoke it).
	admin, reader, agent, readerID string
}

// upstream answers like a model: a tool call first, then, once the
// request carries the tool's result, a text.
func upstream(t *testing.T) *httptest.Server {
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/responses"):
			// A Responses answer: with a reasoning item (no chat form)
			// when the input asks the model to think.
			item := `{"type":"message","id":"msg_r","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Responses answer: refund approved.","annotations":[]}]}`
			if bytes.Contains(body, []byte("think")) {
				item = `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"weighing the refund"}]},` + item
			}
			fmt.Fprintf(w, `{"id":"resp_%d","object":"response","created_at":1700000000,"status":"completed","model":"served-model","output":[%s],"usage":{"input_tokens":11,"output_tokens":7,"total_tokens":18},"error":null,"incomplete_details":null}`, n.Add(1), item)
			return
		case strings.HasSuffix(r.URL.Path, "/messages"):
			fmt.Fprint(w, `{"id":"msg_1","type":"message","role":"assistant","model":"served-model","content":[{"type":"text","text":"Messages answer: the parcel shipped."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":11,"output_tokens":7}}`)
			return
		}
		usage := `{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}`
		if bytes.Contains(body, []byte(`"role":"tool"`)) {
			fmt.Fprintf(w, `{"id":"c%d","object":"chat.completion","created":1700000000,"model":"served-model","choices":[{"index":0,"message":{"role":"assistant","content":"Your refund is approved."},"finish_reason":"stop"}],"usage":%s}`, n.Add(1), usage)
			return
		}
		id := fmt.Sprintf("call_%d", n.Add(1))
		fmt.Fprintf(w, `{"id":"c%s","object":"chat.completion","created":1700000000,"model":"served-model","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"1042\"}"}}]},"finish_reason":"tool_calls"}],"usage":%s}`, id, id, usage)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func newServer(t *testing.T) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: dir, Clock: clock.Real{}, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := blobstore.Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	up := upstream(t)
	var handler http.Handler
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	ts.Listener = gateway.DeliveryListener(ts.Listener)
	ts.Config.ConnContext = gateway.DeliveryContext
	ts.Start()
	grader := rollout.NewGrader(st, rollout.GraderDeps{Logger: log, Env: grade.Env{Logger: log}})
	svc, err := rollout.New(rollout.Config{PublicURL: ts.URL, GradeEvery: 20 * time.Millisecond},
		rollout.Deps{Store: st, Clock: clock.Real{}, Logger: log, Grader: grader})
	if err != nil {
		t.Fatal(err)
	}
	metrics := telemetry.NewMetrics()
	gw, err := gateway.New(gateway.Config{
		Upstreams: []gateway.Upstream{{Name: "stub", BaseURL: up.URL + "/v1", AllowPrivate: true, APIKey: "upstream-key-0123456789",
			Protocols: []gateway.Protocol{gateway.ProtocolChat, gateway.ProtocolResponses, gateway.ProtocolMessages}}},
		FlushInterval: 20 * time.Millisecond,
	}, gateway.Deps{Store: st, Blobs: blobs, Clock: clock.Real{}, Logger: log, Registerer: metrics.Registry})
	if err != nil {
		t.Fatal(err)
	}
	datasets := build.New(st, blobs, log)
	promotions := runner.New(runner.Config{Poll: 50 * time.Millisecond}, runner.Deps{Store: st, Clock: clock.Real{}, Logger: log})
	sealKey, err := secret.ParseKey(strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	// Stand-in harnesses listen on loopback; a bad one answers within
	// harnessCallTimeout's bound.
	harnesses := harness.New(st, sealKey, harness.Config{AllowPrivate: true, CallTimeout: harnessCallTimeout})
	web, err := ui.New(ui.Config{PublicURL: ts.URL}, ui.Deps{Store: st, Blobs: blobs, Logger: log, Datasets: datasets, Harnesses: harnesses})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{PublicURL: ts.URL}, api.Deps{Store: st, Logger: log, Metrics: metrics, Blobs: blobs,
		Rollouts: svc, Gateway: gw, UI: web, Datasets: datasets, Promotions: promotions, Harnesses: harnesses})
	if err != nil {
		t.Fatal(err)
	}
	handler = srv.Handler()
	if err := gw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var jobs sync.WaitGroup
	jobs.Go(func() { svc.Run(ctx) })
	jobs.Go(func() { datasets.Run(ctx, "ui-test", 50*time.Millisecond, time.Minute) })
	jobs.Go(func() { promotions.Run(ctx, "ui-test", 50*time.Millisecond) })
	t.Cleanup(func() {
		ts.Close()
		cancel()
		jobs.Wait()
		_ = gw.Stop(context.Background())
		blobs.Close()
		st.Close()
	})
	s := &server{t: t, st: st, ts: ts}
	if s.tenant, err = st.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	s.admin, _ = s.key(gyre.RoleAdmin)
	s.reader, s.readerID = s.key(gyre.RoleReader)
	s.agent, _ = s.key(gyre.RoleAgent)
	return s
}

func (s *server) key(role gyre.Role) (secret, id string) {
	s.t.Helper()
	k, secret, err := auth.CreateKey(context.Background(), s.st, s.tenant.ID, auth.KeyRequest{Role: role})
	if err != nil {
		s.t.Fatal(err)
	}
	return secret, k.ID
}

// call sends a JSON request with a bearer key and decodes the answer
// into out (when not nil), failing unless the status is want.
func (s *server) call(method, path, key string, body any, want int, out any) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	u := path
	if !strings.HasPrefix(path, "http") {
		u = s.ts.URL + path
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		s.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		s.t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

// seeded is what seed made.
type seeded struct {
	Batch, Running string
	// Rollouts by what their output did.
	Passed, XSS, Excluded, Unreported string
}

// seed runs a batch through the real API the way a worker does: claim,
// chat through each rollout's gateway (a tool call, then an answer),
// submit outputs of every kind, and wait until grading has decided every
// rollout. A second batch stays queued, so it is running.
func (s *server) seed() seeded {
	s.t.Helper()
	s.call("POST", "/api/v1/policies", s.admin, map[string]any{"name": "p1", "upstream": "stub", "model": "served-model", "tokenizer": "tok-1"}, http.StatusCreated, nil)
	s.call("POST", "/api/v1/suites", s.admin, map[string]any{"name": "desk", "cases": []any{
		map[string]any{"id": "refund", "input": map[string]any{"question": "Can I get a refund for order 1042?"},
			"graders": []any{map[string]any{"contains": "refund"}, map[string]any{"all_tools_ok": true}}},
		map[string]any{"id": "status", "input": map[string]any{"question": "Where is order 1044?"},
			"graders": []any{map[string]any{"contains": "refund"}, map[string]any{"all_tools_ok": true}}},
	}}, http.StatusCreated, nil)
	var tasks struct {
		Items []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	}
	s.call("POST", "/api/v1/tasks", s.admin, map[string]any{"suite": "desk"}, http.StatusCreated, &tasks)
	ids := []string{tasks.Items[0].TaskID, tasks.Items[1].TaskID}
	var batch struct {
		BatchID string `json:"batch_id"`
	}
	s.call("POST", "/api/v1/batches", s.admin, map[string]any{"agent_id": "support-bot", "task_ids": ids, "group_size": 2,
		"policy": "p1", "max_attempts": 1}, http.StatusCreated, &batch)
	var running struct {
		BatchID string `json:"batch_id"`
	}
	s.call("POST", "/api/v1/batches", s.admin, map[string]any{"agent_id": "queued-bot", "task_ids": ids[:1]}, http.StatusCreated, &running)

	var claim flywheel.ClaimResponse
	s.call("POST", "/agents/support-bot/claim", s.agent, map[string]any{"max_rollouts": 4, "lease_seconds": 120, "worker_id": "w-1"}, http.StatusOK, &claim)
	if len(claim.Rollouts) != 4 {
		s.t.Fatalf("claimed %d rollouts, want 4", len(claim.Rollouts))
	}
	var out seeded
	out.Batch, out.Running = batch.BatchID, running.BatchID
	for i, rr := range claim.Rollouts {
		toolID := s.chat(rr)
		output := map[string]any{"final_text": "Your refund is approved.", "llm_call_count": 2,
			"tool_calls": []any{map[string]any{"name": "lookup_order", "outcome": "ok", "status_code": 200, "tool_call_id": toolID,
				"arguments": map[string]any{"order_id": "1042"}, "output": map[string]any{"status": "delivered"}}}}
		switch i {
		case 0:
			out.Passed = rr.RolloutID
			note := "Refund receipt\nAmount: 59.90 USD\n"
			sum := sha256.Sum256([]byte(note))
			output["artifacts"] = map[string]any{
				"receipts/refund-1042.txt": map[string]any{"sha256": hex.EncodeToString(sum[:]), "size_bytes": len(note), "content": note},
				"trace.bin":                strings.Repeat("ab", 32),
			}
		case 1:
			out.XSS = rr.RolloutID
			output["final_text"] = xssText
			output["tool_calls"] = []any{map[string]any{"name": "lookup_order", "outcome": "unknown", "status_code": nil, "tool_call_id": toolID}}
		case 2:
			out.Excluded = rr.RolloutID
			output["exclusion"] = map[string]any{"reason": "substrate_unavailable", "detail": "the sandbox went away"}
		case 3:
			out.Unreported = rr.RolloutID
			output["tool_calls"] = nil
			output["llm_call_count"] = 5
		}
		lt, _ := rr.LeaseToken.Get()
		s.output(rr.RolloutID, lt, output)
	}
	s.waitFinished(batch.BatchID)
	return out
}

// chat runs the rollout's two completions through its gateway: the model
// asks for a tool, the agent answers with the tool's result. It returns
// the tool call's id.
func (s *server) chat(rr flywheel.RolloutRequest) string {
	s.t.Helper()
	msgs := []any{
		map[string]any{"role": "system", "content": "You are a support desk agent."},
		map[string]any{"role": "user", "content": rr.TurnInput},
	}
	var first struct {
		Choices []struct {
			Message map[string]any `json:"message"`
		} `json:"choices"`
	}
	s.call("POST", rr.LLMURL+"/chat/completions", rr.APIKey, map[string]any{"model": "any", "messages": msgs}, http.StatusOK, &first)
	msg := first.Choices[0].Message
	id := msg["tool_calls"].([]any)[0].(map[string]any)["id"].(string)
	msgs = append(msgs, msg, map[string]any{"role": "tool", "tool_call_id": id, "content": `{"order":"1042","status":"delivered"}`})
	s.call("POST", rr.LLMURL+"/chat/completions", rr.APIKey, map[string]any{"model": "any", "messages": msgs}, http.StatusOK, nil)
	return id
}

func (s *server) output(id, leaseToken string, output map[string]any) {
	s.t.Helper()
	b, _ := json.Marshal(output)
	req, _ := http.NewRequest("POST", s.ts.URL+"/rollouts/"+id+"/output", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+s.agent)
	req.Header.Set("Lease-Token", leaseToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("output of %s: %d %s", id, resp.StatusCode, body)
	}
}

// waitFinished waits until the batch's every rollout is decided: grading
// and reconciliation run from durable queues after the outputs.
func (s *server) waitFinished(batchID string) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var b struct {
			State string `json:"state"`
		}
		s.call("GET", "/api/v1/batches/"+batchID, s.reader, nil, http.StatusOK, &b)
		if b.State == "finished" {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("batch %s still %s after 60 s", batchID, b.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// browserless is an HTTP client with a cookie jar that does not follow
// redirects, for the UI's rules checked without a browser.
type browserless struct {
	s      *server
	client *http.Client
}

func (s *server) client() *browserless {
	jar, _ := cookiejar.New(nil)
	return &browserless{s: s, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (b *browserless) get(path string) page {
	b.s.t.Helper()
	resp, err := b.client.Get(b.s.ts.URL + path)
	if err != nil {
		b.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, resp.Header, string(body)}
}

func (b *browserless) post(path string, form url.Values) page {
	b.s.t.Helper()
	resp, err := b.client.PostForm(b.s.ts.URL+path, form)
	if err != nil {
		b.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, resp.Header, string(body)}
}

// hidden reads a hidden form field's value from a page.
func hidden(t *testing.T, body, name string) string {
	t.Helper()
	marker := `name="` + name + `" value="`
	i := strings.Index(body, marker)
	if i < 0 {
		t.Fatalf("no %s field in the page:\n%s", name, body)
	}
	rest := body[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}

// signIn signs in with key and returns the page the browser lands on.
func (b *browserless) signIn(key string) page {
	b.s.t.Helper()
	form := b.get("/ui/signin")
	return b.post("/ui/signin", url.Values{"csrf": {hidden(b.s.t, form.body, "csrf")}, "key": {key}})
}
