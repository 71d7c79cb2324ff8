package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gyrehq/gyre/internal/gateway"
)

// responsesUsage is the usage the Responses stub reports.
const responsesUsage = `{"input_tokens":11,"input_tokens_details":{"cached_tokens":3},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":18}`

// responsesStub is an upstream that speaks the Responses API: it answers
// with a function_call to lookup_order when the request offers tools and
// its input does not end with a function_call_output, else with text; it
// streams when asked. status, when set, replaces the final status;
// noFinal ends a stream before its final event.
type responsesStub struct {
	n       atomic.Int64
	mu      sync.Mutex
	text    string
	status  string
	noFinal bool
}

// configure sets the stub's next answers.
func (s *responsesStub) configure(text, status string, noFinal bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.text, s.status, s.noFinal = text, status, noFinal
}

// newResponsesHarness is a harness whose stub upstream speaks chat and
// responses, answering Responses requests as a responsesStub, with a
// policy "pr" whose overrides map to Responses names.
func newResponsesHarness(t *testing.T, eng engine, o harnessOpts) (*harness, *responsesStub) {
	t.Helper()
	o.stubProtocols = []gateway.Protocol{gateway.ProtocolChat, gateway.ProtocolResponses}
	h := newHarness(t, eng, o)
	h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, `{"name":"pr","upstream":"stub","model":"served-model",
		"tokenizer":"tok-1","sampling_overrides":{"temperature":1.0,"max_tokens":64},"prices":{"input":1,"cached_input":0.5,"output":2}}`,
		http.StatusCreated)
	s := &responsesStub{text: "hello"}
	h.up.set(s.serve)
	return h, s
}

func (s *responsesStub) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.URL.Path != "/v1/responses" {
		http.Error(w, "not a responses request: "+r.URL.Path, http.StatusNotFound)
		return
	}
	var req struct {
		Model  string          `json:"model"`
		Stream bool            `json:"stream"`
		Tools  json.RawMessage `json:"tools"`
		Input  json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(body, &req)
	n := s.n.Add(1)
	s.mu.Lock()
	text, status, noFinal := s.text, s.status, s.noFinal
	s.mu.Unlock()
	var items []struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(req.Input, &items)
	call := len(req.Tools) > 0 && (len(items) == 0 || items[len(items)-1].Type != "function_call_output")
	if status == "" {
		status = "completed"
	}
	var item string
	if call {
		item = fmt.Sprintf(`{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"lookup_order","arguments":"{\"order\":7}","status":"completed"}`, n, n)
	} else {
		t, _ := json.Marshal(text)
		item = fmt.Sprintf(`{"type":"message","id":"msg_%d","status":"completed","role":"assistant","content":[{"type":"output_text","text":%s,"annotations":[]}]}`, n, t)
	}
	final := fmt.Sprintf(`{"id":"resp_%d","object":"response","created_at":1700000000,"status":%q,"model":%q,"output":[%s],"usage":%s,"error":null,"incomplete_details":null}`,
		n, status, req.Model, item, responsesUsage)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(final))
		return
	}
	startStream(w)
	seq := 0
	ev := func(typ, data string) {
		fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, data)
		w.(http.Flusher).Flush()
		seq++
	}
	ev("response.created", fmt.Sprintf(`"response":{"id":"resp_%d","object":"response","created_at":1700000000,"status":"in_progress","model":%q,"output":[]}`, n, req.Model))
	if call {
		ev("response.output_item.added", fmt.Sprintf(`"output_index":0,"item":{"type":"function_call","id":"fc_%d","call_id":"call_%d","name":"lookup_order","arguments":"","status":"in_progress"}`, n, n))
		for _, piece := range []string{`{\"ord`, `er\":7}`} {
			ev("response.function_call_arguments.delta", fmt.Sprintf(`"item_id":"fc_%d","output_index":0,"delta":"%s"`, n, piece))
		}
	} else {
		ev("response.output_item.added", fmt.Sprintf(`"output_index":0,"item":{"type":"message","id":"msg_%d","status":"in_progress","role":"assistant","content":[]}`, n))
		for _, piece := range splitText(text) {
			p, _ := json.Marshal(piece)
			ev("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_%d","output_index":0,"content_index":0,"delta":%s`, n, p))
		}
	}
	if noFinal {
		return
	}
	ev("response.output_item.done", `"output_index":0,"item":`+item)
	typ := "response.completed"
	if status != "completed" {
		typ = "response." + status
	}
	ev(typ, `"response":`+final)
}

// splitText cuts s in pieces of up to three bytes.
func splitText(s string) []string {
	var out []string
	for len(s) > 3 {
		out = append(out, s[:3])
		s = s[3:]
	}
	return append(out, s)
}

// wantResponsesCall checks one recorded call of the rollout's view.
func wantCall(t *testing.T, v view, seq int, protocol string, counted bool, reason string) {
	t.Helper()
	if len(v.Gateway.Calls) < seq {
		t.Fatalf("only %d calls: %+v", len(v.Gateway.Calls), v.Gateway)
	}
	c := v.Gateway.Calls[seq-1]
	got := ""
	if c.Reason != nil {
		got = *c.Reason
	}
	if c.Seq != seq || c.Protocol != protocol || c.Counted != counted || got != reason {
		t.Errorf("call %d = seq %d protocol %q counted %v reason %q, want %s counted %v reason %q",
			seq, c.Seq, c.Protocol, c.Counted, got, protocol, counted, reason)
	}
}
