package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/harnesskit/harnesskittest"
)

var contract = sync.OnceValues(harnesskittest.New)

// client talks to a running harness and validates every response against
// the contract.
type client struct {
	t    *testing.T
	base string
	key  string
}

func (c *client) do(method, path, contentType string, body io.Reader) (*http.Response, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.key != "" {
		req.Header.Set("x-api-key", c.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	v, err := contract()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := v.Response(req, resp); err != nil {
		c.t.Errorf("contract: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, b
}

func (c *client) get(path string, v any) []byte {
	c.t.Helper()
	resp, b := c.do("GET", path, "", nil)
	if resp.StatusCode != 200 {
		c.t.Fatalf("GET %s = %d %s", path, resp.StatusCode, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			c.t.Fatalf("GET %s: %v", path, err)
		}
	}
	return b
}

// start creates a run from a JSON RunRequest and returns its id.
func (c *client) start(body string) string {
	c.t.Helper()
	return c.startWith("application/json", strings.NewReader(body))
}

func (c *client) startWith(contentType string, body io.Reader) string {
	c.t.Helper()
	resp, b := c.do("POST", "/runs", contentType, body)
	if resp.StatusCode != 201 {
		c.t.Fatalf("POST /runs = %d %s", resp.StatusCode, b)
	}
	var rc harnesskit.RunCreated
	if err := json.Unmarshal(b, &rc); err != nil {
		c.t.Fatal(err)
	}
	return rc.RunID
}

// finish polls a run until it is terminal, as an evaluator does.
func (c *client) finish(id string) harnesskit.RunStatus {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute) // a guard against hanging, not a timing assertion
	for {
		var st harnesskit.RunStatus
		c.get("/runs/"+id, &st)
		if st.IsTerminal() {
			return st
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("run %s still %s", id, st.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// trajectory fetches a run's trajectory and checks it is valid ATIF.
func (c *client) trajectory(id string) *atif.Trajectory {
	c.t.Helper()
	b := c.get("/runs/"+id+"/trajectory", nil)
	tr, err := atif.Parse(b)
	if err != nil {
		c.t.Fatalf("trajectory is not valid ATIF: %v\n%s", err, b)
	}
	return tr
}

// newClient serves the harness for cfg in-process.
func newClient(t *testing.T, cfg config) *client {
	t.Helper()
	if cfg.maxConcurrentRuns == 0 {
		cfg.maxConcurrentRuns = 2
	}
	cfg.workspaceDir = t.TempDir()
	h, err := newServer(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.Close()
		_ = h.Close()
	})
	return &client{t: t, base: hs.URL, key: cfg.apiKey}
}

// The program as `go run` starts it: flags, listener, auth, a full run,
// and a clean shutdown.
func TestServe_EndToEnd(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig([]string{"--addr", "127.0.0.1:0", "--api-key", "test-key", "--workspace-dir", t.TempDir()}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.DiscardHandler), func(a net.Addr) { addrs <- a }) }()
	var addr net.Addr
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	c := &client{t: t, base: "http://" + addr.String(), key: "test-key"}

	// Without the key nothing is served.
	anon := &client{t: t, base: c.base}
	if resp, b := anon.do("GET", "/capabilities", "", nil); resp.StatusCode != 401 {
		t.Errorf("capabilities without a key = %d %s", resp.StatusCode, b)
	}

	var caps harnesskit.Capabilities
	c.get("/capabilities", &caps)
	if caps.Agent != "support-desk" || !caps.Provides.Trajectory || !caps.Provides.ToolCalls || !caps.Provides.Workspace ||
		!caps.Provides.RunListing || !caps.Provides.Artifacts || !caps.Accepts.Files || !caps.Accepts.FileURLs || !caps.Accepts.Stop {
		t.Errorf("capabilities = %s", c.get("/capabilities", nil))
	}
	if caps.Accepts.ModelOverride || caps.Provides.TokenUsage {
		t.Error("the offline desk declares model_override or token_usage")
	}

	// The check input, end to end.
	id := c.start(`{"input":` + string(caps.CheckInput) + `,"metadata":{"experiment_id":"e1","case_id":"check","repetition":1}}`)
	st := c.finish(id)
	if st.Status != harnesskit.StatusCompleted || st.Model != rulesModel || st.Answer == nil || !strings.Contains(*st.Answer, "59.90 USD") {
		t.Fatalf("status = %+v", st)
	}
	var out outcome
	if err := json.Unmarshal(st.Output, &out); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(outcome{OrderID: "1042", Action: "refunded", RefundID: "R-1042", Amount: "59.90 USD", Turns: 3}, out); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if len(st.Artifacts) != 1 || *st.Artifacts[0].Path != "receipts/refund-1042.txt" {
		t.Errorf("artifacts = %+v", st.Artifacts)
	}

	tr := c.trajectory(id)
	var shape []string
	for _, s := range tr.Steps {
		line := string(s.Source)
		for _, tc := range s.ToolCalls {
			line += " " + tc.FunctionName + string(tc.Arguments)
		}
		if s.Observation != nil {
			for _, r := range s.Observation.Results {
				line += " -> " + *r.SourceCallID
			}
		}
		if s.LLMCallCount != nil {
			line += fmt.Sprintf(" llm=%d", *s.LLMCallCount)
		}
		shape = append(shape, line)
	}
	want := []string{
		"system",
		"user",
		`agent lookup_order{"order_id":"1042"} -> call_1 llm=0`,
		`agent issue_refund{"order_id":"1042","reason":"arrived broken"} -> call_2 llm=0`,
		"agent llm=0",
	}
	if diff := cmp.Diff(want, shape); diff != "" {
		t.Errorf("trajectory (-want +got):\n%s", diff)
	}
	if tr.Agent.Name != "support-desk" || len(tr.Agent.ToolDefinitions) != 2 {
		t.Errorf("agent = %+v", tr.Agent)
	}

	var files harnesskit.FileList
	c.get("/runs/"+id+"/files", &files)
	if len(files.Files) != 1 || files.Files[0].Path != "receipts/refund-1042.txt" {
		t.Fatalf("files = %+v", files)
	}
	if b := c.get("/runs/"+id+"/files/receipts/refund-1042.txt", nil); !bytes.Contains(b, []byte("Refund:   R-1042")) || !bytes.Contains(b, []byte("Amount:   59.90 USD")) {
		t.Errorf("receipt = %s", b)
	}

	var list harnesskit.RunList
	c.get("/runs?query="+id[:13], &list)
	if list.Total != 1 || list.Runs[0].RunID != id {
		t.Errorf("listing = %+v", list)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after cancel = %v", err)
	}
}

// The rule-based desk, case by case.
func TestDesk_Rules(t *testing.T) {
	t.Parallel()
	c := newClient(t, config{})
	tests := []struct {
		name     string
		input    string
		contains string
		action   string
		tools    []string
	}{
		{"refund a broken delivered order", `{"question":"My teapot from order 1042 arrived cracked."}`, "refunded 59.90 USD", "refunded", []string{"lookup_order", "issue_refund"}},
		{"refund by hash number", `{"question":"Please refund #1042"}`, "refund R-1042", "refunded", []string{"lookup_order", "issue_refund"}},
		{"refund a shipped order", `{"question":"Refund order 1043 please"}`, "still shipped", "answered", []string{"lookup_order"}},
		{"refund a processing order", `{"question":"I want my money back for order number 1044"}`, "still processing", "answered", []string{"lookup_order"}},
		{"refund twice", `{"question":"Order 1045 was damaged, refund it"}`, "already been refunded", "answered", []string{"lookup_order"}},
		{"status question", `{"question":"Where is order 1043?"}`, "is shipped", "answered", []string{"lookup_order"}},
		{"unknown order", `{"question":"Refund order 9999"}`, "couldn't find order 9999", "answered", []string{"lookup_order"}},
		{"no order number", `{"question":"My parcel is late"}`, "order number", "answered", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			id := c.start(`{"input":` + tt.input + `}`)
			st := c.finish(id)
			if st.Status != harnesskit.StatusCompleted || st.Answer == nil || !strings.Contains(*st.Answer, tt.contains) {
				t.Fatalf("status = %+v, want an answer containing %q", st, tt.contains)
			}
			var out outcome
			if err := json.Unmarshal(st.Output, &out); err != nil || out.Action != tt.action {
				t.Errorf("output = %s, want action %q", st.Output, tt.action)
			}
			var used []string
			for _, u := range c.trajectory(id).ToolUses() {
				used = append(used, u.FunctionName)
			}
			if diff := cmp.Diff(tt.tools, used); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
		})
	}
}

// Each run starts from a fresh order book, so repetitions agree.
func TestDesk_RunsAreIsolated(t *testing.T) {
	t.Parallel()
	c := newClient(t, config{})
	for range 2 {
		st := c.finish(c.start(`{"input":{"question":"Refund order 1042, it broke"}}`))
		if st.Answer == nil || !strings.Contains(*st.Answer, "refunded 59.90 USD") {
			t.Errorf("answer = %v", st.Answer)
		}
	}
}

// A fixture file delivered either way reaches the agent: the order number
// is only in the attached invoice.
func TestDesk_Fixtures(t *testing.T) {
	t.Parallel()
	invoice := "INVOICE\nOrder #1042\nCeramic teapot  59.90 USD\n"
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/invoice-1042.txt" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, invoice)
	}))
	t.Cleanup(files.Close)
	c := newClient(t, config{})
	const question = `{"question":"The item on the attached invoice arrived broken. I'd like a refund."}`

	t.Run("file_urls", func(t *testing.T) {
		t.Parallel()
		id := c.start(`{"input":` + question + `,"files":[{"name":"invoice-1042.txt","url":"` + files.URL + `/invoice-1042.txt","context":"the customer's invoice"}]}`)
		checkFixtureRun(t, c, id)
	})
	t.Run("multipart", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="payload"`)
		h.Set("Content-Type", "application/json")
		pw, _ := mw.CreatePart(h)
		_, _ = io.WriteString(pw, `{"input":`+question+`,"files":[{"name":"invoice-1042.txt","context":"the customer's invoice"}]}`)
		fw, _ := mw.CreateFormFile("files", "invoice-1042.txt")
		_, _ = io.WriteString(fw, invoice)
		if err := mw.Close(); err != nil {
			t.Fatal(err)
		}
		id := c.startWith(mw.FormDataContentType(), &buf)
		checkFixtureRun(t, c, id)
	})
}

func checkFixtureRun(t *testing.T, c *client, id string) {
	t.Helper()
	st := c.finish(id)
	if st.Status != harnesskit.StatusCompleted || st.Answer == nil || !strings.Contains(*st.Answer, "refunded 59.90 USD for order 1042") {
		t.Fatalf("status = %+v", st)
	}
	tr := c.trajectory(id)
	user := tr.Steps[1].Message.String()
	if !strings.Contains(user, `Attached file "invoice-1042.txt" (the customer's invoice):`) || !strings.Contains(user, "Order #1042") {
		t.Errorf("user message = %q", user)
	}
}

// With a model configured the desk asks it, offering the tools, and the
// trajectory records the model's turns with their token usage.
func TestDesk_Model(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var requests []map[string]any
	script := []string{
		`{"role":"assistant","content":null,"tool_calls":[{"id":"tc-1","type":"function","function":{"name":"lookup_order","arguments":"{\"order_id\":\"1042\"}"}}]}`,
		`{"role":"assistant","content":"Refunding now.","tool_calls":[{"id":"tc-2","type":"function","function":{"name":"issue_refund","arguments":"{\"order_id\":\"1042\",\"reason\":\"arrived broken\"}"}}]}`,
		`{"role":"assistant","content":"Sorry about the teapot! I refunded 59.90 USD (refund R-1042)."}`,
	}
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		var req map[string]any
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		n := len(requests)
		requests = append(requests, req)
		mu.Unlock()
		if n >= len(script) {
			http.Error(w, `{"error":{"message":"script exhausted"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"cmpl-%d","object":"chat.completion","created":1767225600,"model":"%s-2026-01-01","choices":[{"index":0,"finish_reason":"stop","message":%s}],"usage":{"prompt_tokens":%d,"completion_tokens":12,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":64}}}`,
			n, req["model"], script[n], 300+n, 312+n)
	}))
	t.Cleanup(model.Close)

	c := newClient(t, config{openAIBaseURL: model.URL + "/v1", openAIKey: "sk-test", model: "gpt-default"})
	var caps harnesskit.Capabilities
	c.get("/capabilities", &caps)
	if !caps.Accepts.ModelOverride || !caps.Provides.TokenUsage {
		t.Errorf("capabilities with a model: accepts %+v provides %+v", caps.Accepts, caps.Provides)
	}
	id := c.start(`{"input":{"question":"Order 1042 arrived broken."},"model":"gpt-override"}`)
	st := c.finish(id)
	if st.Status != harnesskit.StatusCompleted || st.Answer == nil || !strings.Contains(*st.Answer, "59.90 USD") {
		t.Fatalf("status = %+v", st)
	}
	if st.Model != "gpt-override-2026-01-01" {
		t.Errorf("model = %q, want the model that answered", st.Model)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(requests) != 3 {
		t.Fatalf("%d model requests, want 3", len(requests))
	}
	if requests[0]["model"] != "gpt-override" {
		t.Errorf("requested model %v, want the override", requests[0]["model"])
	}
	if tools, _ := requests[0]["tools"].([]any); len(tools) != 2 {
		t.Errorf("tools offered = %v", requests[0]["tools"])
	}
	// The third request carries the whole exchange, tool results included.
	msgs := requests[2]["messages"].([]any)
	var roles []string
	for _, m := range msgs {
		mm := m.(map[string]any)
		r := mm["role"].(string)
		if id, ok := mm["tool_call_id"].(string); ok {
			r += ":" + id
		}
		roles = append(roles, r)
	}
	if diff := cmp.Diff([]string{"system", "user", "assistant", "tool:tc-1", "assistant", "tool:tc-2"}, roles); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}

	tr := c.trajectory(id)
	usage := tr.TotalUsage()
	if deref(usage.PromptTokens) != 300+301+302 || deref(usage.CompletionTokens) != 36 || deref(usage.CachedTokens) != 3*64 {
		t.Errorf("usage = prompt %d completion %d cached %d", deref(usage.PromptTokens), deref(usage.CompletionTokens), deref(usage.CachedTokens))
	}
	var calls []string
	for _, u := range tr.ToolUses() {
		calls = append(calls, u.ToolCallID+" "+u.FunctionName)
	}
	if diff := cmp.Diff([]string{"tc-1 lookup_order", "tc-2 issue_refund"}, calls); diff != "" {
		t.Errorf("tool calls (-want +got):\n%s", diff)
	}
	last := tr.Steps[len(tr.Steps)-1]
	if last.ModelName == nil || *last.ModelName != "gpt-override-2026-01-01" || last.Metrics == nil {
		t.Errorf("last step = %+v", last)
	}
}

func TestDesk_ModelFailure(t *testing.T) {
	t.Parallel()
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"message":"invalid model","type":"invalid_request_error"}}`, http.StatusBadRequest)
	}))
	t.Cleanup(model.Close)
	c := newClient(t, config{openAIBaseURL: model.URL, model: "nope"})
	st := c.finish(c.start(`{"input":{"question":"Order 1042?"}}`))
	if st.Status != harnesskit.StatusFailed || st.Error == nil || !strings.Contains(*st.Error, "chat completion") {
		t.Errorf("status = %+v", st)
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OPENAI_BASE_URL": "http://llm:8000/v1", "OPENAI_MODEL": "qwen", "HARNESS_API_KEY": "from-env"}
	getenv := func(k string) string { return env[k] }
	c, err := parseConfig(nil, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.addr != "127.0.0.1:8080" || c.apiKey != "from-env" || c.model != "qwen" || !c.usesModel() || c.maxConcurrentRuns != 4 {
		t.Errorf("config = %+v", c)
	}
	c, err = parseConfig([]string{"--addr", ":9000", "--api-key", "flag", "--model", "m2", "--max-concurrent-runs", "8"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.addr != ":9000" || c.apiKey != "flag" || c.model != "m2" || c.usesModel() || c.maxConcurrentRuns != 8 {
		t.Errorf("config = %+v", c)
	}
	for _, args := range [][]string{{"--max-concurrent-runs", "0"}, {"extra"}, {"--nope"}} {
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("parseConfig(%q) succeeded", args)
		}
	}
	if _, err := parseConfig([]string{"-h"}, func(string) string { return "" }, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h = %v", err)
	}
}

func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}
