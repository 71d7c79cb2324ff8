package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// scriptedModel is a controllable OpenAI-compatible upstream: it plays a
// support agent that looks the order up, then cancels or refunds it as the
// customer asked, then answers. It decides from the conversation alone,
// so it works directly and behind gyre's gateway.
type scriptedModel struct {
	srv      *httptest.Server
	calls    atomic.Int64
	mu       sync.Mutex
	requests []map[string]any
}

var orderIDRE = regexp.MustCompile(`\b[A-Z][0-9]\b`)

func newScriptedModel(t *testing.T) *scriptedModel {
	m := &scriptedModel{}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *scriptedModel) serve(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"scripted","object":"model","created":0,"owned_by":"test"}]}`)
		return
	}
	var req struct {
		Model    string           `json:"model"`
		Messages []map[string]any `json:"messages"`
		Stream   bool             `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.requests = append(m.requests, map[string]any{"model": req.Model, "messages": req.Messages})
	m.mu.Unlock()
	n := m.calls.Add(1)

	user, lastTool, lastResult := "", "", ""
	for _, msg := range req.Messages {
		switch msg["role"] {
		case "user":
			user, _ = msg["content"].(string)
		case "assistant":
			if tcs, ok := msg["tool_calls"].([]any); ok && len(tcs) > 0 {
				fn, _ := tcs[0].(map[string]any)["function"].(map[string]any)
				lastTool, _ = fn["name"].(string)
			}
		case "tool":
			lastResult, _ = msg["content"].(string)
		}
	}
	id := orderIDRE.FindString(user)
	var msg map[string]any
	switch {
	case lastTool == "":
		msg = toolCallMessage(n, "lookup_order", map[string]any{"order_id": id})
	case lastTool == "lookup_order" && strings.Contains(strings.ToLower(user), "refund"):
		msg = toolCallMessage(n, "issue_refund", map[string]any{"order_id": id, "reason": "arrived broken"})
	case lastTool == "lookup_order" && strings.Contains(strings.ToLower(user), "cancel"):
		msg = toolCallMessage(n, "cancel_order", map[string]any{"order_id": id})
	default:
		msg = map[string]any{"role": "assistant", "content": "Done for order " + id + ": " + lastResult}
	}
	finish := "stop"
	if _, ok := msg["tool_calls"]; ok {
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": 1700000000, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
	})
}

func toolCallMessage(n int64, name string, args map[string]any) map[string]any {
	a, _ := json.Marshal(args)
	return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
		"id": fmt.Sprintf("call_%d_%s", n, name), "type": "function",
		"function": map[string]any{"name": name, "arguments": string(a)},
	}}}
}
