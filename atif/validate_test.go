package atif_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/atif"
)

// doc builds a document with the given version, steps and extra root
// members (each `"key":value`).
func doc(version, steps string, root ...string) string {
	s := `{"schema_version":"` + version + `","session_id":"s","agent":{"name":"a","version":"1"},"steps":[` + steps + `]`
	for _, r := range root {
		s += "," + r
	}
	return s + "}"
}

const (
	userStep  = `{"step_id":1,"source":"user","message":"hi"}`
	agentStep = `{"step_id":1,"source":"agent","message":"ok"}`
)

// step builds step 1 with the given source and extra members.
func step(source string, members ...string) string {
	s := `{"step_id":1,"source":"` + source + `","message":"m"`
	for _, m := range members {
		s += "," + m
	}
	return s + "}"
}

// sub builds an embedded subagent trajectory with the given members after
// schema_version.
func sub(members ...string) string {
	s := `{"schema_version":"ATIF-v1.7","agent":{"name":"sub","version":"1"},"steps":[` + agentStep + `]`
	for _, m := range members {
		s += "," + m
	}
	return s + "}"
}

const accepted = "ATIF-v1.0, ATIF-v1.1, ATIF-v1.2, ATIF-v1.3, ATIF-v1.4, ATIF-v1.5, ATIF-v1.6, ATIF-v1.7"

func TestRules(t *testing.T) {
	t.Parallel()
	toolStep := func(obs string) string {
		return step("agent", `"tool_calls":[{"tool_call_id":"c1","function_name":"f","arguments":{}}]`, `"observation":{"results":[`+obs+`]}`)
	}
	tests := []struct {
		name string
		doc  string
		want []string // exact violations; nil means valid
	}{
		// Documents.
		{"minimal v1.7", `{"schema_version":"ATIF-v1.7","agent":{"name":"","version":""},"steps":[` + userStep + `]}`, nil},
		{"not an object", `[]`, []string{"must be a JSON object, got array"}},
		{"not json", `{"a":}`, []string{"invalid JSON at line 1, column 6: invalid character '}' looking for beginning of value"}},
		{"trailing text", `{} x`, []string{"invalid JSON at line 1, column 4: invalid character 'x' after top-level value"}},
		{"not utf-8", "{\"a\":\"\xff\"}", []string{"not valid UTF-8 (byte offset 6)"}},
		{"duplicate key", doc("ATIF-v1.7", userStep, `"notes":"a"`, `"notes":"b"`), []string{"notes: duplicate key"}},

		// schema_version.
		{"schema_version missing", `{"session_id":"s","agent":{"name":"a","version":"1"},"steps":[` + userStep + `]}`,
			[]string{"schema_version: field required"}},
		{"schema_version unlisted", doc("ATIF-v1.8", userStep),
			[]string{`schema_version: "ATIF-v1.8" is not an accepted schema_version (accepted: ` + accepted + `)`}},
		{"schema_version without prefix", doc("1.4", userStep),
			[]string{`schema_version: "1.4" is not an accepted schema_version (accepted: ` + accepted + `)`}},
		{"schema_version leading zero", doc("ATIF-v1.07", userStep),
			[]string{`schema_version: "ATIF-v1.07" is not an accepted schema_version (accepted: ` + accepted + `)`}},
		{"schema_version null", `{"schema_version":null,"agent":{"name":"a","version":"1"},"steps":[` + userStep + `]}`,
			[]string{"schema_version: must be a string, got null"}},

		// Root.
		{"session_id required before v1.7", `{"schema_version":"ATIF-v1.6","agent":{"name":"a","version":"1"},"steps":[` + userStep + `]}`,
			[]string{"session_id: field required (before ATIF-v1.7)"}},
		{"session_id null before v1.7", `{"schema_version":"ATIF-v1.0","session_id":null,"agent":{"name":"a","version":"1"},"steps":[` + userStep + `]}`,
			[]string{"session_id: field required (before ATIF-v1.7)"}},
		{"agent and steps missing", `{"schema_version":"ATIF-v1.7"}`, []string{"agent: field required", "steps: field required"}},
		{"steps empty", doc("ATIF-v1.7", ""), []string{"steps: must contain at least 1 step"}},
		{"steps null", `{"schema_version":"ATIF-v1.7","agent":{"name":"a","version":"1"},"steps":null}`,
			[]string{"steps: must be an array of steps, got null"}},
		{"unknown root key", doc("ATIF-v1.7", userStep, `"evaluation_context":{}`),
			[]string{"evaluation_context: unexpected field (not part of ATIF schema)"}},
		{"odd key quoted", doc("ATIF-v1.7", userStep, `"a.b":1`, `"":2`),
			[]string{`"a.b": unexpected field (not part of ATIF schema)`, `"": unexpected field (not part of ATIF schema)`}},
		{"root extra before v1.1", doc("ATIF-v1.0", userStep, `"extra":{}`),
			[]string{"extra: unexpected field (not part of ATIF-v1.0; added in ATIF-v1.1)"}},
		{"root extra v1.1", doc("ATIF-v1.1", userStep, `"extra":{"any":[1,{"x":null}]}`), nil},
		{"root extra not an object", doc("ATIF-v1.7", userStep, `"extra":[]`), []string{"extra: must be an object, got array"}},
		{"continued_trajectory_ref before v1.5", doc("ATIF-v1.4", userStep, `"continued_trajectory_ref":"x"`),
			[]string{"continued_trajectory_ref: unexpected field (not part of ATIF-v1.4; added in ATIF-v1.5)"}},
		{"trajectory_id before v1.7", doc("ATIF-v1.6", userStep, `"trajectory_id":"t"`),
			[]string{"trajectory_id: unexpected field (not part of ATIF-v1.6; added in ATIF-v1.7)"}},
		{"version after gated fields", `{"steps":[` + step("agent", `"llm_call_count":1`) + `],"agent":{"name":"a","version":"1"},"session_id":"s","schema_version":"ATIF-v1.6"}`,
			[]string{"steps.0.llm_call_count: unexpected field (not part of ATIF-v1.6; added in ATIF-v1.7)"}},
		{"notes not a string", doc("ATIF-v1.7", userStep, `"notes":1`), []string{"notes: must be a string, got number"}},

		// Agent.
		{"agent unknown key", `{"schema_version":"ATIF-v1.7","agent":{"name":"a","version":"1","model":"m"},"steps":[` + userStep + `]}`,
			[]string{"agent.model: unexpected field (not part of ATIF schema)"}},
		{"agent version a number", `{"schema_version":"ATIF-v1.7","agent":{"name":"a","version":1},"steps":[` + userStep + `]}`,
			[]string{"agent.version: must be a string, got number"}},
		{"agent name missing", `{"schema_version":"ATIF-v1.7","agent":{"version":"1"},"steps":[` + userStep + `]}`,
			[]string{"agent.name: field required"}},
		{"tool_definitions before v1.5", `{"schema_version":"ATIF-v1.4","session_id":"s","agent":{"name":"a","version":"1","tool_definitions":[]},"steps":[` + userStep + `]}`,
			[]string{"agent.tool_definitions: unexpected field (not part of ATIF-v1.4; added in ATIF-v1.5)"}},
		{"tool_definitions not objects", `{"schema_version":"ATIF-v1.7","agent":{"name":"a","version":"1","tool_definitions":[{},"f"]},"steps":[` + userStep + `]}`,
			[]string{"agent.tool_definitions.1: must be an object, got string"}},

		// Step ids.
		{"step ids from 0", doc("ATIF-v1.7", `{"step_id":0,"source":"user","message":""},{"step_id":1,"source":"agent","message":""}`),
			[]string{"steps.0.step_id: expected 1 (sequential from 1), got 0", "steps.1.step_id: expected 2 (sequential from 1), got 1"}},
		{"step ids reordered", doc("ATIF-v1.7", `{"step_id":2,"source":"user","message":""},{"step_id":1,"source":"agent","message":""}`),
			[]string{"steps.0.step_id: expected 1 (sequential from 1), got 2", "steps.1.step_id: expected 2 (sequential from 1), got 1"}},
		{"step_id integral float", doc("ATIF-v1.7", `{"step_id":1.0,"source":"user","message":""},{"step_id":2e0,"source":"user","message":""}`), nil},
		{"step_id fractional", doc("ATIF-v1.7", `{"step_id":1.5,"source":"user","message":""}`), []string{"steps.0.step_id: must be an integer, got 1.5"}},
		{"step_id string", doc("ATIF-v1.7", `{"step_id":"1","source":"user","message":""}`), []string{"steps.0.step_id: must be an integer, got string"}},
		{"step_id boolean", doc("ATIF-v1.7", `{"step_id":true,"source":"user","message":""}`), []string{"steps.0.step_id: must be an integer, got boolean"}},
		{"step_id huge", doc("ATIF-v1.7", `{"step_id":9007199254740993,"source":"user","message":""}`), []string{"steps.0.step_id: integer out of range, got 9007199254740993"}},
		{"step_id overflow", doc("ATIF-v1.7", `{"step_id":1e400,"source":"user","message":""}`), []string{"steps.0.step_id: integer out of range, got 1e400"}},
		{"step fields missing", doc("ATIF-v1.7", `{}`),
			[]string{"steps.0.step_id: field required", "steps.0.source: field required", "steps.0.message: field required"}},
		{"step not an object", doc("ATIF-v1.7", `1`), []string{"steps.0: must be a step object, got number"}},
		{"step unknown key", doc("ATIF-v1.7", step("user", `"role":"user"`)), []string{"steps.0.role: unexpected field (not part of ATIF schema)"}},

		// Source and agent-only fields.
		{"source assistant", doc("ATIF-v1.7", step("assistant")), []string{`steps.0.source: must be one of "system", "user", "agent", got "assistant"`}},
		{"agent-only fields on a user step", doc("ATIF-v1.7", step("user", `"model_name":"m"`, `"reasoning_effort":"low"`, `"reasoning_content":"r"`, `"tool_calls":[]`, `"metrics":{}`)),
			[]string{
				`steps.0.model_name: only allowed on agent steps (source is "user")`,
				`steps.0.reasoning_effort: only allowed on agent steps (source is "user")`,
				`steps.0.reasoning_content: only allowed on agent steps (source is "user")`,
				`steps.0.tool_calls: only allowed on agent steps (source is "user")`,
				`steps.0.metrics: only allowed on agent steps (source is "user")`,
			}},
		{"agent-only fields null on a system step", doc("ATIF-v1.7", step("system", `"model_name":null`, `"tool_calls":null`, `"metrics":null`)), nil},
		{"agent-only fields on an agent step", doc("ATIF-v1.7", step("agent", `"model_name":"m"`, `"reasoning_effort":0.5`, `"reasoning_content":"r"`, `"tool_calls":[]`, `"metrics":{"prompt_tokens":-1}`)), nil},
		{"reasoning_effort boolean", doc("ATIF-v1.7", step("agent", `"reasoning_effort":true`)), []string{"steps.0.reasoning_effort: must be a string or a number, got boolean"}},

		// Message and content parts.
		{"message null", doc("ATIF-v1.7", `{"step_id":1,"source":"user","message":null}`), []string{"steps.0.message: must be a string or an array of content parts, got null"}},
		{"message empty", doc("ATIF-v1.7", `{"step_id":1,"source":"agent","message":""}`), nil},
		{"parts before v1.6", doc("ATIF-v1.5", `{"step_id":1,"source":"user","message":[]}`),
			[]string{"steps.0.message: must be a string before ATIF-v1.6 (content part arrays were added in ATIF-v1.6)"}},
		{"parts v1.6", doc("ATIF-v1.6", `{"step_id":1,"source":"user","message":[{"type":"text","text":"look"},{"type":"image","source":{"media_type":"image/png","path":"images/a.png"}},{"type":"image","text":null,"source":{"media_type":"image/webp","path":"https://x/y.webp"}}]}`), nil},
		{"bad parts", doc("ATIF-v1.6", `{"step_id":1,"source":"user","message":[{"type":"text"},{"type":"text","text":"t","source":{"media_type":"image/png","path":"p"}},{"type":"image","text":"t"},{"type":"audio"},{},{"type":"image","source":{"media_type":"image/bmp","path":"p","url":"u"}},{"type":"image","source":{}},"x"]}`),
			[]string{
				"steps.0.message.0.text: field required on a text part",
				"steps.0.message.1.source: not allowed on a text part",
				"steps.0.message.2.source: field required on an image part",
				"steps.0.message.2.text: not allowed on an image part",
				`steps.0.message.3.type: must be one of "text", "image", got "audio"`,
				"steps.0.message.4.type: field required",
				`steps.0.message.5.source.media_type: must be one of image/jpeg, image/png, image/gif, image/webp, got "image/bmp"`,
				"steps.0.message.5.source.url: unexpected field (not part of ATIF schema)",
				"steps.0.message.6.source.media_type: field required",
				"steps.0.message.6.source.path: field required",
				"steps.0.message.7: must be a content part object, got string",
			}},

		// Timestamps.
		{"timestamps", doc("ATIF-v1.7", `{"step_id":1,"source":"user","message":"","timestamp":"2025-10-11T10:00:00.123456789Z"},{"step_id":2,"source":"user","message":"","timestamp":"2025-10-11 10:00"},{"step_id":3,"source":"user","message":"","timestamp":"2025-10-11"},{"step_id":4,"source":"user","message":"","timestamp":null}`), nil},
		{"timestamp bad", doc("ATIF-v1.7", `{"step_id":1,"source":"user","message":"","timestamp":"yesterday"},{"step_id":2,"source":"user","message":"","timestamp":"2025-02-29T00:00:00Z"},{"step_id":3,"source":"user","message":"","timestamp":1}`),
			[]string{`steps.0.timestamp: "yesterday" is not an ISO 8601 timestamp`, `steps.1.timestamp: "2025-02-29T00:00:00Z" is not an ISO 8601 timestamp`, "steps.2.timestamp: must be a string, got number"}},

		// Tool calls.
		{"tool call arguments string", doc("ATIF-v1.7", step("agent", `"tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":"{\"a\":1}"}]`)),
			[]string{"steps.0.tool_calls.0.arguments: must be an object, got string (a JSON-encoded string is not allowed)"}},
		{"tool call arguments null", doc("ATIF-v1.7", step("agent", `"tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":null}]`)),
			[]string{"steps.0.tool_calls.0.arguments: must be an object, got null"}},
		{"tool call fields missing", doc("ATIF-v1.7", step("agent", `"tool_calls":[{"name":"f"}]`)),
			[]string{"steps.0.tool_calls.0.tool_call_id: field required", "steps.0.tool_calls.0.function_name: field required", "steps.0.tool_calls.0.arguments: field required", "steps.0.tool_calls.0.name: unexpected field (not part of ATIF schema)"}},
		{"tool call extra before v1.7", doc("ATIF-v1.6", step("agent", `"tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":{},"extra":{}}]`)),
			[]string{"steps.0.tool_calls.0.extra: unexpected field (not part of ATIF-v1.6; added in ATIF-v1.7)"}},
		{"tool_calls not an array", doc("ATIF-v1.7", step("agent", `"tool_calls":{}`)), []string{"steps.0.tool_calls: must be an array of tool calls, got object"}},
		{"duplicate tool_call_id allowed", doc("ATIF-v1.7", step("agent", `"tool_calls":[{"tool_call_id":"c","function_name":"f","arguments":{}},{"tool_call_id":"c","function_name":"f","arguments":{}}]`)), nil},

		// Observations.
		{"source_call_id resolves", doc("ATIF-v1.7", toolStep(`{"source_call_id":"c1","content":"out"},{"content":"free"},{"source_call_id":null}`)), nil},
		{"source_call_id unknown", doc("ATIF-v1.7", toolStep(`{"source_call_id":"c2","content":"out"}`)),
			[]string{`steps.0.observation.results.0.source_call_id: "c2" does not match any tool_call_id of this step`}},
		{"source_call_id before tool_calls", doc("ATIF-v1.7", `{"step_id":1,"source":"agent","message":"","observation":{"results":[{"source_call_id":"c1"},{"source_call_id":"c3"}]},"tool_calls":[{"tool_call_id":"c1","function_name":"f","arguments":{}}]}`),
			[]string{`steps.0.observation.results.1.source_call_id: "c3" does not match any tool_call_id of this step`}},
		{"source_call_id from another step", doc("ATIF-v1.7", `{"step_id":1,"source":"agent","message":"","tool_calls":[{"tool_call_id":"c1","function_name":"f","arguments":{}}]},{"step_id":2,"source":"agent","message":"","observation":{"results":[{"source_call_id":"c1"}]}}`),
			[]string{`steps.1.observation.results.0.source_call_id: "c1" does not match any tool_call_id of this step`}},
		{"results missing", doc("ATIF-v1.7", step("agent", `"observation":{}`)), []string{"steps.0.observation.results: field required"}},
		{"results null", doc("ATIF-v1.7", step("agent", `"observation":{"results":null}`)), []string{"steps.0.observation.results: must be an array of results, got null"}},
		{"results empty", doc("ATIF-v1.7", step("agent", `"observation":{"results":[]}`)), nil},
		{"observation on a user step", doc("ATIF-v1.7", step("user", `"observation":{"results":[]}`)), nil},
		{"observation on a system step before v1.2", doc("ATIF-v1.1", step("system", `"observation":{"results":[]}`)),
			[]string{"steps.0.observation: not allowed on a system step before ATIF-v1.2"}},
		{"observation on a system step v1.2", doc("ATIF-v1.2", step("system", `"observation":{"results":[]}`)), nil},
		{"result content object", doc("ATIF-v1.7", step("agent", `"observation":{"results":[{"content":{"a":1}}]}`)),
			[]string{"steps.0.observation.results.0.content: must be a string or an array of content parts, got object"}},
		{"result content parts before v1.6", doc("ATIF-v1.5", step("agent", `"observation":{"results":[{"content":[{"type":"text","text":"x"}]}]}`)),
			[]string{"steps.0.observation.results.0.content: must be a string before ATIF-v1.6 (content part arrays were added in ATIF-v1.6)"}},
		{"result extra before v1.7", doc("ATIF-v1.6", step("agent", `"observation":{"results":[{"extra":{}}]}`)),
			[]string{"steps.0.observation.results.0.extra: unexpected field (not part of ATIF-v1.6; added in ATIF-v1.7)"}},
		{"result unknown key", doc("ATIF-v1.7", step("agent", `"observation":{"results":[{"output":"x"}]}`)),
			[]string{"steps.0.observation.results.0.output: unexpected field (not part of ATIF schema)"}},

		// Subagent references.
		{"ref session_id required before v1.7", doc("ATIF-v1.6", step("agent", `"observation":{"results":[{"subagent_trajectory_ref":[{"trajectory_path":"p"}]}]}`)),
			[]string{"steps.0.observation.results.0.subagent_trajectory_ref.0.session_id: field required (before ATIF-v1.7)"}},
		{"ref with session_id only at v1.6", doc("ATIF-v1.6", step("agent", `"observation":{"results":[{"subagent_trajectory_ref":[{"session_id":"x"}]}]}`)), nil},
		{"ref with session_id only at v1.7", doc("ATIF-v1.7", step("agent", `"observation":{"results":[{"subagent_trajectory_ref":[{"session_id":"x"}]}]}`)),
			[]string{"steps.0.observation.results.0.subagent_trajectory_ref.0: needs trajectory_id or trajectory_path (from ATIF-v1.7)"}},
		{"ref by unresolved trajectory_id at v1.7", doc("ATIF-v1.7", step("agent", `"observation":{"results":[{"subagent_trajectory_ref":[{"trajectory_id":"elsewhere"}]}]}`)), nil},
		{"ref trajectory_id before v1.7", doc("ATIF-v1.6", step("agent", `"observation":{"results":[{"subagent_trajectory_ref":[{"session_id":"x","trajectory_id":"t"}]}]}`)),
			[]string{"steps.0.observation.results.0.subagent_trajectory_ref.0.trajectory_id: unexpected field (not part of ATIF-v1.6; added in ATIF-v1.7)"}},

		// Metrics.
		{"metrics types", doc("ATIF-v1.7", step("agent", `"metrics":{"prompt_tokens":"10","cost_usd":"0.1","logprobs":[-0.1,"x",1e999],"prompt_token_ids":[1,2.5],"reasoning_tokens":3}`)),
			[]string{
				"steps.0.metrics.prompt_tokens: must be an integer, got string",
				"steps.0.metrics.cost_usd: must be a number, got string",
				"steps.0.metrics.logprobs.1: must be a number, got string",
				"steps.0.metrics.logprobs.2: number out of range, got 1e999",
				"steps.0.metrics.prompt_token_ids.1: must be an integer, got 2.5",
				"steps.0.metrics.reasoning_tokens: unexpected field (not part of ATIF schema)",
			}},
		{"completion_token_ids before v1.3", doc("ATIF-v1.2", step("agent", `"metrics":{"completion_token_ids":[1]}`)),
			[]string{"steps.0.metrics.completion_token_ids: unexpected field (not part of ATIF-v1.2; added in ATIF-v1.3)"}},
		{"prompt_token_ids before v1.4", doc("ATIF-v1.3", step("agent", `"metrics":{"prompt_token_ids":[1],"completion_token_ids":[2]}`)),
			[]string{"steps.0.metrics.prompt_token_ids: unexpected field (not part of ATIF-v1.3; added in ATIF-v1.4)"}},
		{"metrics full", doc("ATIF-v1.4", step("agent", `"metrics":{"prompt_tokens":3,"completion_tokens":2,"cached_tokens":1,"cost_usd":0,"prompt_token_ids":[1,2,3],"completion_token_ids":[4,5],"logprobs":[-0.5,-1e-3],"extra":{"reasoning_tokens":1}}`)), nil},

		// is_copied_context and llm_call_count.
		{"is_copied_context before v1.5", doc("ATIF-v1.4", step("user", `"is_copied_context":true`)),
			[]string{"steps.0.is_copied_context: unexpected field (not part of ATIF-v1.4; added in ATIF-v1.5)"}},
		{"is_copied_context string", doc("ATIF-v1.5", step("user", `"is_copied_context":"true"`)), []string{"steps.0.is_copied_context: must be a boolean, got string"}},
		{"llm_call_count negative", doc("ATIF-v1.7", step("agent", `"llm_call_count":-1`)), []string{"steps.0.llm_call_count: must be ≥ 0"}},
		{"llm_call_count 0 with metrics", doc("ATIF-v1.7", step("agent", `"llm_call_count":0`, `"metrics":{}`, `"reasoning_content":"r"`)),
			[]string{"steps.0.metrics: must be absent when llm_call_count is 0 (deterministic dispatch)", "steps.0.reasoning_content: must be absent when llm_call_count is 0 (deterministic dispatch)"}},
		{"llm_call_count 0 on a system step", doc("ATIF-v1.7", step("system", `"llm_call_count":0`)), nil},
		{"llm_call_count 0 plain", doc("ATIF-v1.7", step("agent", `"llm_call_count":0`, `"metrics":null`)), nil},

		// final_metrics.
		{"final metrics", doc("ATIF-v1.7", userStep, `"final_metrics":{"total_prompt_tokens":1,"total_completion_tokens":2,"total_cached_tokens":0,"total_cost_usd":0.5,"total_steps":0,"extra":{}}`), nil},
		{"final metrics bad", doc("ATIF-v1.7", userStep, `"final_metrics":{"total_steps":-1,"total_tokens":3}`),
			[]string{"final_metrics.total_steps: must be ≥ 0", "final_metrics.total_tokens: unexpected field (not part of ATIF schema)"}},

		// Embedded subagent trajectories.
		{"subagents", doc("ATIF-v1.7", userStep, `"subagent_trajectories":[`+sub(`"trajectory_id":"a"`)+`,`+sub(`"trajectory_id":"b"`, `"subagent_trajectories":[`+sub(`"trajectory_id":"a"`)+`]`)+`]`), nil},
		{"subagents before v1.7", doc("ATIF-v1.6", userStep, `"subagent_trajectories":[`+sub(`"trajectory_id":"a"`)+`]`),
			[]string{"subagent_trajectories: unexpected field (not part of ATIF-v1.6; added in ATIF-v1.7)"}},
		{"subagent without trajectory_id", doc("ATIF-v1.7", userStep, `"subagent_trajectories":[`+sub()+`,`+sub(`"trajectory_id":null`)+`]`),
			[]string{"subagent_trajectories.0.trajectory_id: field required (on every embedded subagent trajectory)", "subagent_trajectories.1.trajectory_id: field required (on every embedded subagent trajectory)"}},
		{"subagent trajectory_id duplicate", doc("ATIF-v1.7", userStep, `"subagent_trajectories":[`+sub(`"trajectory_id":"a"`)+`,`+sub(`"trajectory_id":"b"`)+`,`+sub(`"trajectory_id":"a"`)+`]`),
			[]string{`subagent_trajectories.2.trajectory_id: duplicate trajectory_id "a" (also subagent_trajectories.0)`}},
		{"subagent violations prefixed", doc("ATIF-v1.7", userStep, `"subagent_trajectories":[{"schema_version":"ATIF-v1.7","trajectory_id":"a","agent":{"name":"x","version":"1"},"steps":[{"step_id":2,"source":"tool","message":""}],"subagent_trajectories":[{"trajectory_id":"b","agent":{"name":"y"},"steps":[]}]}]`),
			[]string{
				"subagent_trajectories.0.steps.0.step_id: expected 1 (sequential from 1), got 2",
				`subagent_trajectories.0.steps.0.source: must be one of "system", "user", "agent", got "tool"`,
				"subagent_trajectories.0.subagent_trajectories.0.schema_version: field required",
				"subagent_trajectories.0.subagent_trajectories.0.agent.version: field required",
				"subagent_trajectories.0.subagent_trajectories.0.steps: must contain at least 1 step",
			}},
		{"subagent at its own older version", doc("ATIF-v1.7", userStep, `"subagent_trajectories":[{"schema_version":"ATIF-v1.6","trajectory_id":"a","agent":{"name":"x","version":"1"},"steps":[`+agentStep+`]}]`),
			[]string{"subagent_trajectories.0.session_id: field required (before ATIF-v1.7)", "subagent_trajectories.0.trajectory_id: unexpected field (not part of ATIF-v1.6; added in ATIF-v1.7)"}},
		{"subagent not an object", doc("ATIF-v1.7", userStep, `"subagent_trajectories":[[]]`), []string{"subagent_trajectories.0: must be a trajectory object, got array"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := atif.Check([]byte(tt.doc))
			got := violationStrings(r.Violations)
			if len(got) == 0 {
				got = nil
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s\ndocument: %s", diff, tt.doc)
			}
			if r.Valid() != (tt.want == nil) || (r.Trajectory != nil) != (tt.want == nil) {
				t.Errorf("Valid() = %v, Trajectory = %v, want valid %v", r.Valid(), r.Trajectory != nil, tt.want == nil)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	small := doc("ATIF-v1.7", userStep)
	size := len(small)
	deep := doc("ATIF-v1.7", userStep, `"extra":`+strings.Repeat(`{"a":`, 20)+`1`+strings.Repeat(`}`, 20))
	many := doc("ATIF-v1.7", step("agent", `"metrics":{"logprobs":["a","b","c","d","e"]}`))
	tests := []struct {
		name    string
		opts    atif.Options
		doc     string
		want    []string
		omitted int
	}{
		{"too large", atif.Options{MaxBytes: size - 1}, small, []string{fmt.Sprintf("document is %d bytes, over the limit of %d", size, size-1)}, 0},
		{"at the size limit", atif.Options{MaxBytes: size}, small, nil, 0},
		{"too deep in extra", atif.Options{MaxDepth: 10}, deep, []string{"extra: nesting deeper than 10 levels"}, 0},
		{"deep enough", atif.Options{MaxDepth: 21}, deep, nil, 0},
		{"too deep in subagents", atif.Options{MaxDepth: 6}, doc("ATIF-v1.7", userStep, `"subagent_trajectories":[`+sub(`"trajectory_id":"a"`, `"subagent_trajectories":[`+sub(`"trajectory_id":"b"`)+`]`)+`]`),
			[]string{"subagent_trajectories.0.subagent_trajectories.0.steps.0: nesting deeper than 6 levels"}, 0},
		{"violations capped", atif.Options{MaxViolations: 2}, many, []string{"steps.0.metrics.logprobs.0: must be a number, got string", "steps.0.metrics.logprobs.1: must be a number, got string"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := atif.NewValidator(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			r := v.Check([]byte(tt.doc))
			got := violationStrings(r.Violations)
			if len(got) == 0 {
				got = nil
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
			if r.Omitted != tt.omitted {
				t.Errorf("Omitted = %d, want %d", r.Omitted, tt.omitted)
			}
		})
	}
}

func TestValidatorOptions(t *testing.T) {
	t.Parallel()
	v, err := atif.NewValidator(atif.Options{Accepted: []string{"ATIF-v1.6"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate([]byte(doc("ATIF-v1.6", userStep))); err != nil {
		t.Errorf("listed version rejected: %v", err)
	}
	err = v.Validate([]byte(doc("ATIF-v1.7", userStep)))
	var ve *atif.ValidationError
	if !errors.As(err, &ve) || len(ve.Violations) != 1 || ve.Violations[0].String() != `schema_version: "ATIF-v1.7" is not an accepted schema_version (accepted: ATIF-v1.6)` {
		t.Errorf("unlisted version: got %v", err)
	}
	for _, bad := range []atif.Options{
		{Accepted: []string{}},
		{Accepted: []string{"ATIF-v1.8"}},
		{Accepted: []string{"ATIF-v1.1", "ATIF-v1.1"}},
		{MaxDepth: -1},
	} {
		if _, err := atif.NewValidator(bad); err == nil {
			t.Errorf("NewValidator(%+v) accepted", bad)
		}
	}
}

func TestImageDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "images", "a.png"), []byte("png"), 0o644); err != nil {
		t.Fatal(err)
	}
	abs := filepath.ToSlash(filepath.Join(dir, "images", "a.png"))
	d := doc("ATIF-v1.6", `{"step_id":1,"source":"user","message":[`+
		`{"type":"image","source":{"media_type":"image/png","path":"images/a.png"}},`+
		`{"type":"image","source":{"media_type":"image/png","path":"`+abs+`"}},`+
		`{"type":"image","source":{"media_type":"image/png","path":"https://example.com/b.png"}},`+
		`{"type":"image","source":{"media_type":"image/png","path":"images/missing.png"}},`+
		`{"type":"image","source":{"media_type":"image/png","path":"images"}}]}`)
	if err := atif.Validate([]byte(d)); err != nil {
		t.Fatalf("without ImageDir, files are not checked: %v", err)
	}
	v, err := atif.NewValidator(atif.Options{ImageDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r := v.Check([]byte(d))
	want := []string{
		`steps.0.message.3.source.path: image file not found: "images/missing.png"`,
		`steps.0.message.4.source.path: image file not found: "images"`,
	}
	if diff := cmp.Diff(want, violationStrings(r.Violations)); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

func TestValidationError(t *testing.T) {
	t.Parallel()
	_, err := atif.Parse([]byte(doc("ATIF-v1.7", `{"step_id":3,"source":"bot","message":""}`)))
	var ve *atif.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Parse error = %v, want a *ValidationError", err)
	}
	if ve.SchemaVersion != "ATIF-v1.7" || len(ve.Violations) != 2 {
		t.Errorf("ValidationError = %+v", ve)
	}
	want := "atif: invalid document: steps.0.step_id: expected 1 (sequential from 1), got 3 (and 1 more)"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	long := strings.Repeat("é", 100)
	r := atif.Check([]byte(doc("ATIF-v1.7", userStep, `"`+long+`":1`)))
	if len(r.Violations) != 1 || !strings.HasSuffix(r.Violations[0].Path, `"…`) || len(r.Violations[0].Path) > 80 {
		t.Errorf("long key not cut short: %q", r.Violations)
	}
}
