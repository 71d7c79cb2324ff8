package llm_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/examples/harness/desk"
	"github.com/gyrehq/gyre/examples/harness/desk/desktest"
	"github.com/gyrehq/gyre/examples/harness/desk/llm"
	"github.com/gyrehq/gyre/harnesskit"
)

// serve runs the desk with a model policy on the server at baseURL.
func serve(t *testing.T, baseURL, apiKey, model string) *desktest.Client {
	t.Helper()
	p, err := llm.New(baseURL, apiKey)
	if err != nil {
		t.Fatal(err)
	}
	return desktest.Serve(t, desk.Config{Policy: p, Model: model})
}

// With a model the desk asks it, offering the tools, and the trajectory
// records the model's turns with their token usage.
func TestPolicy(t *testing.T) {
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

	c := serve(t, model.URL+"/v1", "sk-test", "gpt-default")
	var caps harnesskit.Capabilities
	c.Get("/capabilities", &caps)
	if !caps.Accepts.ModelOverride || !caps.Provides.TokenUsage {
		t.Errorf("capabilities with a model: accepts %+v provides %+v", caps.Accepts, caps.Provides)
	}
	id := c.Start(`{"input":{"question":"Order 1042 arrived broken."},"model":"gpt-override"}`)
	st := c.Finish(id)
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

	tr := c.Trajectory(id)
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

// A model error fails the run with the error's text.
func TestPolicy_Failure(t *testing.T) {
	t.Parallel()
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"message":"invalid model","type":"invalid_request_error"}}`, http.StatusBadRequest)
	}))
	t.Cleanup(model.Close)
	c := serve(t, model.URL, "", "nope")
	st := c.Finish(c.Start(`{"input":{"question":"Order 1042?"}}`))
	if st.Status != harnesskit.StatusFailed || st.Error == nil || !strings.Contains(*st.Error, "chat completion") {
		t.Errorf("status = %+v", st)
	}
}

func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}
