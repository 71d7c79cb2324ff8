package atif_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/flywheel"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	sysMsg   = `{"role":"system","content":"You are terse."}`
	userMsg  = `{"role":"user","content":[{"type":"text","text":"list /"}]}`
	toolsDef = `[{"type":"function","function":{"name":"ls","parameters":{"type":"object"}}}]`
)

func request(msgs ...string) json.RawMessage {
	return json.RawMessage(`{"model":"gpt-x","tools":` + toolsDef + `,"messages":[` + strings.Join(msgs, ",") + `]}`)
}

func response(message, finish, usage string) json.RawMessage {
	return json.RawMessage(`{"id":"r","object":"chat.completion","model":"upstream-model","choices":[{"index":0,"message":` + message + `,"finish_reason":"` + finish + `"}],"usage":` + usage + `}`)
}

func TestFromGateway(t *testing.T) {
	t.Parallel()
	reply1 := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"path\": \"/\"}"}}]}`
	reply2 := `{"role":"assistant","content":"Found bin and etc.","reasoning_content":"easy"}`
	reply3 := `{"role":"assistant","content":"","tool_calls":[{"id":"c2","type":"function","function":{"name":"ls","arguments":"not json"}},{"id":"c3","type":"function","function":{"name":"ls","arguments":""}}]}`
	cost := 0.25
	records := []atif.GatewayRecord{
		// Out of order on purpose: steps follow Seq.
		{
			Seq: 2, Counted: true, Model: "policy-model",
			Request:  request(sysMsg, userMsg, reply1, `{"role":"tool","tool_call_id":"c1","content":"bin etc"}`),
			Response: response(reply2, "stop", `{"prompt_tokens":60,"completion_tokens":5}`),
			Usage:    atif.Usage{CostUSD: &cost},
			DoneAt:   t0.Add(2 * time.Second),
		},
		{
			Seq: 1, Counted: true, Model: "policy-model",
			Request:            request(sysMsg, userMsg),
			Response:           response(reply1, "tool_calls", `{"prompt_tokens":50,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":20}}`),
			Usage:              atif.Usage{CostUSD: &cost},
			ReceivedAt:         t0,
			DoneAt:             t0.Add(time.Second + 500*time.Millisecond),
			PromptTokenIDs:     []int{1, 2, 3},
			CompletionTokenIDs: []int{4},
			Logprobs:           []float64{-0.5},
		},
		// A failed attempt: recorded, not counted, no step.
		{Seq: 3, Counted: false, Request: json.RawMessage(`not even json`), Response: nil},
		{
			Seq: 4, Counted: true,
			Request:  request(sysMsg, userMsg, reply1, `{"role":"tool","tool_call_id":"c1","content":"bin etc"}`, reply2, `{"role":"user","content":"and /tmp?"}`),
			Response: response(reply3, "tool_calls", `{"prompt_tokens":80,"completion_tokens":7}`),
			Usage:    atif.Usage{CostUSD: &cost},
			DoneAt:   t0.Add(3 * time.Second),
		},
		// The agent compacted its history: the system prompt comes again.
		{
			Seq: 5, Counted: true,
			Request:  request(sysMsg, `{"role":"user","content":"Summary: listed /."}`, `{"role":"tool","tool_call_id":"c3","content":"tmp is empty"}`),
			Response: response(`{"role":"assistant","content":"ok"}`, "stop", `{"prompt_tokens":30,"completion_tokens":1}`),
			Usage:    atif.Usage{CostUSD: &cost},
			DoneAt:   t0.Add(4 * time.Second),
		},
	}
	status := 200
	out := &flywheel.RolloutOutput{
		FinalText: "ok",
		ToolCalls: flywheel.Some([]flywheel.ToolCallRecord{
			{Name: "ls", Arguments: json.RawMessage(`{"path":"/"}`), Outcome: flywheel.OutcomeOK, StatusCode: &status, Output: json.RawMessage(`"bin etc"`), LatencyMS: flywheel.Some(12.5), ToolCallID: flywheel.Some("c1")},
			{Name: "ls_tmp", Outcome: flywheel.OutcomeFailed, Error: flywheel.Some("boom"), ErrorClass: flywheel.Some("IOError"), ToolCallID: flywheel.Some("c2")},
			{Name: "notify", Outcome: flywheel.OutcomeUnknown, Output: json.RawMessage(`{"sent": true}`)},
			{Name: "ghost", Outcome: flywheel.OutcomeOK, ToolCallID: flywheel.Some("zz")},
		}),
		AgentFingerprint: json.RawMessage(`{"name":"fp-agent","version":"2.1","extra":1}`),
	}
	tr, err := atif.FromGateway(records, out, atif.GatewayOptions{SessionID: "rollout-1", TrajectoryID: "traj-1"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := atif.Validate(got); err != nil {
		t.Fatalf("FromGateway wrote an invalid document: %v\n%s", err, got)
	}
	want := `{
	  "schema_version": "ATIF-v1.7",
	  "session_id": "rollout-1",
	  "trajectory_id": "traj-1",
	  "agent": {"name": "fp-agent", "version": "2.1", "model_name": "policy-model", "tool_definitions": ` + toolsDef + `},
	  "steps": [
	    {"step_id": 1, "source": "system", "message": "You are terse."},
	    {"step_id": 2, "source": "user", "message": "list /"},
	    {"step_id": 3, "source": "agent", "timestamp": "2026-03-01T12:00:01.5Z", "model_name": "policy-model", "message": "",
	     "tool_calls": [{"tool_call_id": "c1", "function_name": "ls", "arguments": {"path": "/"}}],
	     "observation": {"results": [{"source_call_id": "c1", "content": "bin etc",
	       "extra": {"origin": "tool_call_record", "outcome": "ok", "status_code": 200, "latency_ms": 12.5}}]},
	     "metrics": {"prompt_tokens": 50, "completion_tokens": 10, "cached_tokens": 20, "cost_usd": 0.25,
	       "prompt_token_ids": [1, 2, 3], "completion_token_ids": [4], "logprobs": [-0.5]},
	     "llm_call_count": 1, "extra": {"seq": 1, "finish_reason": "tool_calls"}},
	    {"step_id": 4, "source": "agent", "timestamp": "2026-03-01T12:00:02Z", "model_name": "policy-model", "message": "Found bin and etc.",
	     "reasoning_content": "easy", "metrics": {"prompt_tokens": 60, "completion_tokens": 5, "cost_usd": 0.25},
	     "llm_call_count": 1, "extra": {"seq": 2, "finish_reason": "stop"}},
	    {"step_id": 5, "source": "user", "message": "and /tmp?"},
	    {"step_id": 6, "source": "agent", "timestamp": "2026-03-01T12:00:03Z", "model_name": "upstream-model", "message": "",
	     "tool_calls": [
	       {"tool_call_id": "c2", "function_name": "ls", "arguments": {}, "extra": {"raw_arguments": "not json"}},
	       {"tool_call_id": "c3", "function_name": "ls", "arguments": {}}],
	     "observation": {"results": [
	       {"source_call_id": "c2", "content": "boom",
	        "extra": {"origin": "tool_call_record", "outcome": "failed", "error": "boom", "error_class": "IOError", "name": "ls_tmp"}},
	       {"source_call_id": "c3", "content": "tmp is empty", "extra": {"origin": "request"}}]},
	     "metrics": {"prompt_tokens": 80, "completion_tokens": 7, "cost_usd": 0.25},
	     "llm_call_count": 1, "extra": {"seq": 4, "finish_reason": "tool_calls"}},
	    {"step_id": 7, "source": "system", "message": "You are terse.", "is_copied_context": true},
	    {"step_id": 8, "source": "user", "message": "Summary: listed /."},
	    {"step_id": 9, "source": "agent", "timestamp": "2026-03-01T12:00:04Z", "model_name": "upstream-model", "message": "ok",
	     "metrics": {"prompt_tokens": 30, "completion_tokens": 1, "cost_usd": 0.25},
	     "llm_call_count": 1, "extra": {"seq": 5, "finish_reason": "stop"}}
	  ],
	  "final_metrics": {"total_prompt_tokens": 220, "total_completion_tokens": 23, "total_cost_usd": 1, "total_steps": 9},
	  "extra": {"unjoined_tool_calls": [
	    {"name": "notify", "outcome": "unknown", "status_code": null, "output": {"sent": true}},
	    {"name": "ghost", "outcome": "ok", "status_code": null, "tool_call_id": "zz"}]}
	}`
	if diff := cmp.Diff(jsonValue(t, want), jsonValue(t, string(got))); diff != "" {
		t.Errorf("FromGateway (-want +got):\n%s", diff)
	}
	if tr.AgentSteps() != 4 || tr.LLMCalls() != 4 {
		t.Errorf("AgentSteps() = %d, LLMCalls() = %d, want 4, 4", tr.AgentSteps(), tr.LLMCalls())
	}
}

// TestGatewayChatRoundTrip records a linear conversation as gateway
// records, converts them to ATIF and back to chat messages, and gets the
// conversation back.
func TestGatewayChatRoundTrip(t *testing.T) {
	t.Parallel()
	conv := []string{
		sysMsg,
		`{"role":"user","content":"list /"}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"path\":\"/\"}"}},{"id":"c2","type":"function","function":{"name":"pwd","arguments":"{}"}}]}`,
		`{"role":"tool","tool_call_id":"c1","content":"bin etc"}`,
		`{"role":"tool","tool_call_id":"c2","content":"/"}`,
		`{"role":"assistant","content":"bin and etc"}`,
		`{"role":"user","content":"thanks"}`,
		`{"role":"assistant","content":"you are welcome"}`,
	}
	var records []atif.GatewayRecord
	for i, m := range conv {
		if !strings.Contains(m, `"assistant"`) {
			continue
		}
		records = append(records, atif.GatewayRecord{
			Seq: int64(len(records) + 1), Counted: true,
			Request:  request(conv[:i]...),
			Response: response(m, "stop", `{"prompt_tokens":1,"completion_tokens":1}`),
		})
	}
	tr, err := atif.FromGateway(records, nil, atif.GatewayOptions{AgentName: "a", AgentVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := atif.Validate(raw); err != nil {
		t.Fatalf("invalid: %v", err)
	}
	if tr.SessionID != nil || tr.Agent.Name != "a" || tr.Agent.Version != "1" {
		t.Errorf("root = session %v, agent %+v", tr.SessionID, tr.Agent)
	}
	got, err := json.Marshal(atif.ToChat(tr))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(jsonValue(t, "["+strings.Join(conv, ",")+"]"), jsonValue(t, string(got))); diff != "" {
		t.Errorf("round trip (-conversation +got):\n%s", diff)
	}
}

func TestFromGatewayErrors(t *testing.T) {
	t.Parallel()
	ok := response(`{"role":"assistant","content":"x"}`, "stop", `null`)
	tests := []struct {
		name    string
		records []atif.GatewayRecord
		want    string
	}{
		{"no records", nil, "atif: no counted completions"},
		{"none counted", []atif.GatewayRecord{{Seq: 1, Request: request(), Response: ok}}, "atif: no counted completions"},
		{"bad request", []atif.GatewayRecord{{Seq: 7, Counted: true, Request: json.RawMessage(`{`), Response: ok}}, "atif: completion 7: request body: unexpected end of JSON input"},
		{"bad response", []atif.GatewayRecord{{Seq: 8, Counted: true, Request: request(), Response: json.RawMessage(`[`)}}, "atif: completion 8: response body: unexpected end of JSON input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := atif.FromGateway(tt.records, nil, atif.GatewayOptions{})
			if err == nil || err.Error() != tt.want {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := atif.FromGateway(nil, nil, atif.GatewayOptions{}); !errors.Is(err, atif.ErrNoCompletions) {
		t.Errorf("err = %v, want ErrNoCompletions", err)
	}
}

// TestFromGatewayMinimal covers a response without choices or usage, and
// an agent named by nothing.
func TestFromGatewayMinimal(t *testing.T) {
	t.Parallel()
	tr, err := atif.FromGateway([]atif.GatewayRecord{{Seq: 1, Counted: true, Request: json.RawMessage(`{"messages":[]}`), Response: json.RawMessage(`{}`)}},
		&flywheel.RolloutOutput{AgentFingerprint: json.RawMessage(`["not","an","object"]`)}, atif.GatewayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := atif.Validate(got); err != nil {
		t.Fatalf("invalid: %v\n%s", err, got)
	}
	want := `{"schema_version":"ATIF-v1.7","agent":{"name":"unknown","version":"unknown"},
	  "steps":[{"step_id":1,"source":"agent","message":"","llm_call_count":1,"extra":{"seq":1}}],
	  "final_metrics":{"total_steps":1}}`
	if diff := cmp.Diff(jsonValue(t, want), jsonValue(t, string(got))); diff != "" {
		t.Errorf("FromGateway (-want +got):\n%s", diff)
	}
}
