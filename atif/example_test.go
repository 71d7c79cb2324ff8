package atif_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/flywheel"
)

func ExampleCheck() {
	doc := []byte(`{
	  "schema_version": "ATIF-v1.6",
	  "session_id": "s-1",
	  "agent": {"name": "demo", "version": "1.0"},
	  "steps": [
	    {"step_id": 1, "source": "user", "message": "List the files."},
	    {"step_id": 3, "source": "agent", "message": "",
	     "tool_calls": [{"tool_call_id": "c1", "function_name": "ls", "arguments": "{}"}],
	     "observation": {"results": [{"source_call_id": "c2", "content": "a.txt"}]},
	     "llm_call_count": 1}
	  ]
	}`)
	r := atif.Check(doc)
	fmt.Println("valid:", r.Valid(), r.SchemaVersion)
	for _, v := range r.Violations {
		fmt.Println(v)
	}
	// Output:
	// valid: false ATIF-v1.6
	// steps.1.step_id: expected 2 (sequential from 1), got 3
	// steps.1.tool_calls.0.arguments: must be an object, got string (a JSON-encoded string is not allowed)
	// steps.1.observation.results.0.source_call_id: "c2" does not match any tool_call_id of this step
	// steps.1.llm_call_count: unexpected field (not part of ATIF-v1.6; added in ATIF-v1.7)
}

func ExampleParse() {
	tr, err := atif.Parse([]byte(`{
	  "schema_version": "ATIF-v1.7",
	  "agent": {"name": "demo", "version": "1.0"},
	  "steps": [
	    {"step_id": 1, "source": "user", "message": "Weather in Paris?"},
	    {"step_id": 2, "source": "agent", "message": "",
	     "tool_calls": [{"tool_call_id": "c1", "function_name": "weather", "arguments": {"city": "Paris"}}],
	     "observation": {"results": [{"source_call_id": "c1", "content": "18°C, clear"}]},
	     "metrics": {"prompt_tokens": 120, "completion_tokens": 15, "cost_usd": 0.0004}},
	    {"step_id": 3, "source": "agent", "message": "18°C and clear.",
	     "metrics": {"prompt_tokens": 150, "completion_tokens": 8, "cost_usd": 0.0005}}
	  ]
	}`))
	if err != nil {
		var ve *atif.ValidationError
		if errors.As(err, &ve) {
			fmt.Println(len(ve.Violations), "violations")
		}
		return
	}
	u := tr.TotalUsage()
	fmt.Println("agent steps:", tr.AgentSteps(), "llm calls:", tr.LLMCalls())
	fmt.Printf("tokens: %d in, %d out, $%.4f\n", *u.PromptTokens, *u.CompletionTokens, *u.CostUSD)
	for _, use := range tr.ToolUses() {
		fmt.Printf("%s(%s) -> %s\n", use.FunctionName, use.Arguments, use.Output())
	}
	// Output:
	// agent steps: 2 llm calls: 2
	// tokens: 270 in, 23 out, $0.0009
	// weather({"city": "Paris"}) -> 18°C, clear
}

func ExampleToChat() {
	tr, err := atif.Parse([]byte(`{
	  "schema_version": "ATIF-v1.5", "session_id": "s",
	  "agent": {"name": "demo", "version": "1.0"},
	  "steps": [
	    {"step_id": 1, "source": "user", "message": "Earlier task", "is_copied_context": true},
	    {"step_id": 2, "source": "user", "message": "Make a file."},
	    {"step_id": 3, "source": "agent", "message": "",
	     "tool_calls": [{"tool_call_id": "c1", "function_name": "touch", "arguments": {"path": "a"}}],
	     "observation": {"results": [{"source_call_id": "c1", "content": "ok"}]}}
	  ]
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range atif.ToChat(tr) {
		b, _ := json.Marshal(m)
		fmt.Println(string(b))
	}
	// Output:
	// {"role":"user","content":"Make a file."}
	// {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"touch","arguments":"{\"path\":\"a\"}"}}]}
	// {"role":"tool","content":"ok","tool_call_id":"c1"}
}

func ExampleFromGateway() {
	records := []atif.GatewayRecord{{
		Seq:     1,
		Counted: true,
		Model:   "policy-model",
		Request: json.RawMessage(`{"messages":[{"role":"user","content":"Make a file."}]}`),
		Response: json.RawMessage(`{"choices":[{"message":{"role":"assistant","content":null,
		  "tool_calls":[{"id":"c1","type":"function","function":{"name":"touch","arguments":"{\"path\":\"a\"}"}}]},
		  "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":9}}`),
	}}
	out := &flywheel.RolloutOutput{
		FinalText: "done",
		ToolCalls: flywheel.Some([]flywheel.ToolCallRecord{{
			Name: "touch", Outcome: flywheel.OutcomeOK, Output: json.RawMessage(`"created a"`), ToolCallID: flywheel.Some("c1"),
		}}),
	}
	tr, err := atif.FromGateway(records, out, atif.GatewayOptions{SessionID: "rollout-1", AgentName: "demo", AgentVersion: "1.0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	doc, _ := json.Marshal(tr)
	fmt.Println("valid:", atif.Validate(doc) == nil, tr.SchemaVersion)
	for _, s := range tr.Steps {
		fmt.Println(s.StepID, s.Source, len(s.ToolCalls), "tool calls")
	}
	fmt.Println(tr.ToolUses()[0].Output())
	// Output:
	// valid: true ATIF-v1.7
	// 1 user 0 tool calls
	// 2 agent 1 tool calls
	// created a
}
