package flywheel_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

// One test per normative sentence of the contract that the validator
// itself enforces. Each case is a body and either "valid" or the pointer of
// the first violation.

type ruleCase struct {
	name    string
	body    string
	pointer string // first violation's pointer; ignored when valid
	valid   bool
}

func checkRule(t *testing.T, def flywheel.Def, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := flywheel.Validate(def, []byte(tc.body))
			if tc.valid {
				if err != nil {
					t.Fatalf("rejected a valid %s: %v\n%s", def, err, tc.body)
				}
				return
			}
			var ve *flywheel.ValidationError
			if !asValidationError(err, &ve) {
				t.Fatalf("accepted an invalid %s (err %v)\n%s", def, err, tc.body)
			}
			if got := ve.First().Pointer; got != tc.pointer {
				t.Errorf("first violation at %q, want %q; all: %v", got, tc.pointer, ve.Violations)
			}
			if ve.First().Message == "" {
				t.Error("empty message")
			}
		})
	}
}

func valid(name, body string) ruleCase { return ruleCase{name: name, body: body, valid: true} }
func invalid(name, body, pointer string) ruleCase {
	return ruleCase{name: name, body: body, pointer: pointer}
}

// edit builds a variant of a JSON object: each pair is a member name and
// its raw JSON value, or "-" to delete the member. Members keep their order;
// new ones go last.
func edit(base string, pairs ...string) string {
	dec := json.NewDecoder(strings.NewReader(base))
	dec.UseNumber()
	type member struct {
		k string
		v json.RawMessage
	}
	var members []member
	// Read the members in document order from the token stream.
	if _, err := dec.Token(); err != nil {
		panic(err)
	}
	for dec.More() {
		k, _ := dec.Token()
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			panic(err)
		}
		members = append(members, member{k.(string), v})
	}
	for i := 0; i < len(pairs); i += 2 {
		k, v := pairs[i], pairs[i+1]
		idx := -1
		for j, m := range members {
			if m.k == k {
				idx = j
			}
		}
		switch {
		case v == "-" && idx >= 0:
			members = append(members[:idx], members[idx+1:]...)
		case v == "-":
		case idx >= 0:
			members[idx].v = json.RawMessage(v)
		default:
			members = append(members, member{k, json.RawMessage(v)})
		}
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.k)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.v)
	}
	b.WriteByte('}')
	return b.String()
}

const (
	baseCall   = `{"name":"create_ticket","outcome":"ok","status_code":201}`
	baseTurn   = `{"turn_id":"t1","input_text":"hi","final_text":"hello","tool_calls":[],"tool_calls_omitted_count":0}`
	baseReq    = `{"rollout_id":"r1","turn_input":"q","llm_url":"http://127.0.0.1:7070/gw/x/v1","api_key":"k","artifacts_dir":"rollouts/r1","deadline_ts":1738324800}`
	baseOutput = `{"final_text":"done"}`
	sha64      = "4b227777d4dd1fc61c6f884f48641d02b4d121d3fd328cb08b5531fcacdabf8a"
)

func TestToolCallRecord_OutcomeIsRequiredWithoutDefault(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		invalid("absent", edit(baseCall, "outcome", "-"), "/outcome"),
		invalid("null", edit(baseCall, "outcome", "null"), "/outcome"),
		invalid("empty", edit(baseCall, "outcome", `""`), "/outcome"),
	})
}

func TestToolCallRecord_OutcomeUnknownIsLegal(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		valid("ok", edit(baseCall, "outcome", `"ok"`)),
		valid("failed", edit(baseCall, "outcome", `"failed"`)),
		valid("unknown", edit(baseCall, "outcome", `"unknown"`, "status_code", "null")),
		invalid("success is not an outcome", edit(baseCall, "outcome", `"success"`), "/outcome"),
		invalid("case matters", edit(baseCall, "outcome", `"OK"`), "/outcome"),
		invalid("boolean", edit(baseCall, "outcome", `true`), "/outcome"),
	})
}

func TestToolCallRecord_StatusCodeIsRequiredKeyNullableValue(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		invalid("absent", edit(baseCall, "status_code", "-"), "/status_code"),
		invalid("absent with unknown outcome", edit(baseCall, "outcome", `"unknown"`, "status_code", "-"), "/status_code"),
		valid("null", edit(baseCall, "status_code", "null")),
		valid("null with failed outcome", edit(baseCall, "outcome", `"failed"`, "status_code", "null")),
	})
}

func TestToolCallRecord_StatusCodeMustBeNullWhenOutcomeUnknown(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		invalid("unknown with 200", edit(baseCall, "outcome", `"unknown"`, "status_code", "200"), "/status_code"),
		invalid("unknown with 500", edit(baseCall, "outcome", `"unknown"`, "status_code", "500"), "/status_code"),
		valid("unknown with null", edit(baseCall, "outcome", `"unknown"`, "status_code", "null")),
		valid("ok with 200", edit(baseCall, "outcome", `"ok"`, "status_code", "200")),
		valid("failed with 500", edit(baseCall, "outcome", `"failed"`, "status_code", "500")),
		valid("failed with 200 contradicts, allowed", edit(baseCall, "outcome", `"failed"`, "status_code", "200")),
	})
	// The message says why, in the contract's words.
	err := flywheel.Validate(flywheel.DefToolCallRecord, []byte(edit(baseCall, "outcome", `"unknown"`, "status_code", "200")))
	var ve *flywheel.ValidationError
	if !asValidationError(err, &ve) || !strings.Contains(ve.First().Message, `when outcome is "unknown"`) {
		t.Errorf("message does not state the rule: %v", err)
	}
}

func TestToolCallRecord_StatusCodeIsAnHTTPStatus(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		valid("100", edit(baseCall, "status_code", "100")),
		valid("599", edit(baseCall, "status_code", "599")),
		valid("integral float", edit(baseCall, "status_code", "404.0")),
		invalid("99", edit(baseCall, "status_code", "99"), "/status_code"),
		invalid("600", edit(baseCall, "status_code", "600"), "/status_code"),
		invalid("fraction", edit(baseCall, "status_code", "200.5"), "/status_code"),
		invalid("string", edit(baseCall, "status_code", `"200"`), "/status_code"),
	})
}

func TestToolCallRecord_NameIsNonEmpty(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		invalid("empty", edit(baseCall, "name", `""`), "/name"),
		invalid("absent", edit(baseCall, "name", "-"), "/name"),
		valid("one character", edit(baseCall, "name", `"x"`)),
	})
}

func TestToolCallRecord_LatencyIsNonNegative(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		valid("zero", edit(baseCall, "latency_ms", "0")),
		valid("fraction", edit(baseCall, "latency_ms", "0.25")),
		valid("null", edit(baseCall, "latency_ms", "null")),
		invalid("negative", edit(baseCall, "latency_ms", "-1"), "/latency_ms"),
	})
}

func TestToolCallRecord_AgentNameNullMeansUnattributed(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		valid("null", edit(baseCall, "agent_name", "null")),
		valid("absent", baseCall),
		valid("named", edit(baseCall, "agent_name", `"billing"`)),
		invalid("not a string", edit(baseCall, "agent_name", `["a"]`), "/agent_name"),
	})
}

func TestToolCallRecord_ToolCallIDNullOrAbsentMeansNoID(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		valid("null", edit(baseCall, "tool_call_id", "null")),
		valid("absent", baseCall),
		valid("model id", edit(baseCall, "tool_call_id", `"call_abc"`)),
		invalid("number", edit(baseCall, "tool_call_id", "7"), "/tool_call_id"),
	})
}

func TestToolCallRecord_OutputIsAnyValue(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		valid("object", edit(baseCall, "output", `{"id":1}`)),
		valid("string", edit(baseCall, "output", `"done"`)),
		valid("null", edit(baseCall, "output", `null`)),
		valid("array", edit(baseCall, "output", `[1,"a",null]`)),
	})
}

func TestToolCallRecord_ArgumentsIsAnObject(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		valid("object", edit(baseCall, "arguments", `{"a":[1]}`)),
		invalid("array", edit(baseCall, "arguments", `[1]`), "/arguments"),
		invalid("null", edit(baseCall, "arguments", `null`), "/arguments"),
	})
}

func TestToolCallRecord_ErrorsAreStringsOrNull(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		valid("strings", edit(baseCall, "error", `"boom"`, "error_class", `"IOError"`)),
		valid("nulls", edit(baseCall, "error", `null`, "error_class", `null`)),
		invalid("error object", edit(baseCall, "error", `{"msg":"boom"}`), "/error"),
		invalid("error_class number", edit(baseCall, "error_class", `1`), "/error_class"),
	})
}

func TestEntityIDs_OnlyContractKeys(t *testing.T) {
	t.Parallel()
	cases := []ruleCase{}
	for _, k := range flywheel.EntityKeys {
		cases = append(cases, valid(string(k), edit(baseCall, "entity_ids", fmt.Sprintf(`{%q:"v"}`, k))))
	}
	cases = append(cases,
		valid("all keys", edit(baseCall, "entity_ids", `{"id":"1","key":"k","uuid":"u","sid":"s","gid":"g"}`)),
		invalid("name is low-entropy", edit(baseCall, "entity_ids", `{"name":"Bob"}`), "/entity_ids/name"),
		invalid("case matters", edit(baseCall, "entity_ids", `{"ID":"1"}`), "/entity_ids/ID"),
		invalid("bad key after good", edit(baseCall, "entity_ids", `{"id":"1","email":"a@b"}`), "/entity_ids/email"),
	)
	checkRule(t, flywheel.DefToolCallRecord, cases)
}

func TestEntityIDs_AbsentOrEmptyIsAbstention(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		valid("absent", baseCall),
		valid("empty", edit(baseCall, "entity_ids", `{}`)),
		invalid("null", edit(baseCall, "entity_ids", `null`), "/entity_ids"),
	})
}

func TestEntityIDs_ValuesAreNonEmptyStrings(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		invalid("empty", edit(baseCall, "entity_ids", `{"id":""}`), "/entity_ids/id"),
		invalid("number", edit(baseCall, "entity_ids", `{"id":42}`), "/entity_ids/id"),
	})
}

func TestToolCallRecord_RejectsUnknownMembers(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefToolCallRecord, []ruleCase{
		invalid("status", edit(baseCall, "status", `"ok"`), "/status"),
		invalid("result", edit(baseCall, "result", `{}`), "/result"),
	})
}

func TestProductionTurn_ToolCallsNullMeansNotReported(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefProductionTurn, []ruleCase{
		valid("null means not reported", edit(baseTurn, "tool_calls", "null")),
		valid("empty means zero calls observed", edit(baseTurn, "tool_calls", "[]")),
		valid("calls", edit(baseTurn, "tool_calls", "["+baseCall+"]")),
		invalid("absent, although required", edit(baseTurn, "tool_calls", "-"), "/tool_calls"),
		invalid("object", edit(baseTurn, "tool_calls", "{}"), "/tool_calls"),
		invalid("bad call", edit(baseTurn, "tool_calls", `[`+baseCall+`,{"name":"x","outcome":"unknown","status_code":204}]`), "/tool_calls/1/status_code"),
	})
}

func TestProductionTurn_RequiredMembersAreAlwaysSent(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefProductionTurn, []ruleCase{
		valid("null texts", edit(baseTurn, "input_text", "null", "final_text", "null")),
		invalid("no input_text", edit(baseTurn, "input_text", "-"), "/input_text"),
		invalid("no final_text", edit(baseTurn, "final_text", "-"), "/final_text"),
		invalid("no turn_id", edit(baseTurn, "turn_id", "-"), "/turn_id"),
		invalid("no tool_calls_omitted_count", edit(baseTurn, "tool_calls_omitted_count", "-"), "/tool_calls_omitted_count"),
		invalid("null tool_calls_omitted_count", edit(baseTurn, "tool_calls_omitted_count", "null"), "/tool_calls_omitted_count"),
		invalid("negative tool_calls_omitted_count", edit(baseTurn, "tool_calls_omitted_count", "-1"), "/tool_calls_omitted_count"),
	})
}

func TestProductionTurn_TurnIndexIsNonNegativeInteger(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefProductionTurn, []ruleCase{
		valid("zero", edit(baseTurn, "turn_index", "0")),
		invalid("negative", edit(baseTurn, "turn_index", "-1"), "/turn_index"),
		invalid("fraction", edit(baseTurn, "turn_index", "1.5"), "/turn_index"),
		invalid("beyond 2^53-1", edit(baseTurn, "turn_index", "9007199254740992"), "/turn_index"),
		valid("2^53-1", edit(baseTurn, "turn_index", "9007199254740991")),
	})
}

func TestProductionTurn_OccurredAtIsRFC3339(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefProductionTurn, []ruleCase{
		valid("UTC", edit(baseTurn, "occurred_at", `"2025-01-31T12:00:00Z"`)),
		valid("offset and fraction", edit(baseTurn, "occurred_at", `"2025-01-31T12:00:00.5-08:00"`)),
		invalid("date only", edit(baseTurn, "occurred_at", `"2025-01-31"`), "/occurred_at"),
		invalid("no offset", edit(baseTurn, "occurred_at", `"2025-01-31T12:00:00"`), "/occurred_at"),
		invalid("words", edit(baseTurn, "occurred_at", `"yesterday"`), "/occurred_at"),
		invalid("epoch number", edit(baseTurn, "occurred_at", `1738324800`), "/occurred_at"),
		invalid("month 13", edit(baseTurn, "occurred_at", `"2025-13-01T00:00:00Z"`), "/occurred_at"),
	})
}

func TestProductionTurn_ReceiptClocksAreServerAuthored(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefProductionTurn, []ruleCase{
		invalid("received_at", edit(baseTurn, "received_at", `"2025-01-31T12:00:00Z"`), "/received_at"),
		invalid("trainable", edit(baseTurn, "trainable", `true`), "/trainable"),
	})
}

func batchOf(n int) string {
	turns := make([]string, n)
	for i := range turns {
		turns[i] = edit(baseTurn, "turn_id", fmt.Sprintf(`"t%d"`, i))
	}
	return `{"agent_id":"bot","turns":[` + strings.Join(turns, ",") + `]}`
}

func TestProductionTurnBatch_OneToSixtyFourTurns(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefProductionTurnBatch, []ruleCase{
		invalid("zero", batchOf(0), "/turns"),
		valid("one", batchOf(1)),
		valid("sixty-four", batchOf(64)),
		invalid("sixty-five", batchOf(65), "/turns"),
		invalid("no turns", `{"agent_id":"bot"}`, "/turns"),
		invalid("no agent_id", `{"turns":[`+baseTurn+`]}`, "/agent_id"),
	})
}

func TestProductionTurnBatch_PointsIntoTheFaultyTurn(t *testing.T) {
	t.Parallel()
	turns := make([]string, 5)
	for i := range turns {
		turns[i] = edit(baseTurn, "turn_id", fmt.Sprintf(`"t%d"`, i))
	}
	turns[3] = edit(baseTurn, "tool_calls", `[{"name":"x","outcome":"unknown","status_code":200}]`)
	turns[4] = edit(baseTurn, "final_text", "-")
	checkRule(t, flywheel.DefProductionTurnBatch, []ruleCase{
		invalid("turn 3", `{"agent_id":"bot","turns":[`+strings.Join(turns, ",")+`]}`, "/turns/3/tool_calls/0/status_code"),
	})
}

func TestExclusion_ReasonIsTyped(t *testing.T) {
	t.Parallel()
	cases := []ruleCase{}
	for _, r := range flywheel.ExclusionReasons {
		cases = append(cases, valid(string(r), fmt.Sprintf(`{"reason":%q}`, r)))
	}
	cases = append(cases,
		invalid("low reward is not a reason", `{"reason":"low_reward"}`, "/reason"),
		invalid("absent", `{"detail":"x"}`, "/reason"),
		invalid("null", `{"reason":null}`, "/reason"),
		invalid("unknown member", `{"reason":"capacity","retry":true}`, "/retry"),
	)
	checkRule(t, flywheel.DefExclusion, cases)
}

func TestExclusion_DetailIsOptionalAndNullable(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefExclusion, []ruleCase{
		valid("absent", `{"reason":"capacity"}`),
		valid("null", `{"reason":"capacity","detail":null}`),
		valid("text", `{"reason":"capacity","detail":"pool full"}`),
		invalid("object", `{"reason":"capacity","detail":{}}`, "/detail"),
	})
}

func TestRolloutRequest_HasNoEnvironmentKey(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutRequest, []ruleCase{
		valid("base", baseReq),
		invalid("environment", edit(baseReq, "environment", `{"OPENAI_BASE_URL":"x"}`), "/environment"),
		invalid("env", edit(baseReq, "env", `{}`), "/env"),
	})
}

func TestRolloutRequest_LLMURLIsAURI(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutRequest, []ruleCase{
		valid("https", edit(baseReq, "llm_url", `"https://gyre.example.com/gw/tok/v1"`)),
		invalid("relative", edit(baseReq, "llm_url", `"/gw/tok/v1"`), "/llm_url"),
		invalid("spaces", edit(baseReq, "llm_url", `"not a url"`), "/llm_url"),
		invalid("empty", edit(baseReq, "llm_url", `""`), "/llm_url"),
	})
}

func TestRolloutRequest_RequiredMembers(t *testing.T) {
	t.Parallel()
	var cases []ruleCase
	for _, m := range []string{"rollout_id", "turn_input", "llm_url", "api_key", "artifacts_dir", "deadline_ts"} {
		cases = append(cases, invalid("no "+m, edit(baseReq, m, "-"), "/"+m))
	}
	cases = append(cases,
		invalid("empty rollout_id", edit(baseReq, "rollout_id", `""`), "/rollout_id"),
		invalid("empty api_key", edit(baseReq, "api_key", `""`), "/api_key"),
		valid("empty turn_input", edit(baseReq, "turn_input", `""`)),
	)
	checkRule(t, flywheel.DefRolloutRequest, cases)
}

func TestRolloutRequest_DeadlineIsAuthoritativeNumber(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutRequest, []ruleCase{
		valid("fraction", edit(baseReq, "deadline_ts", "1738324800.75")),
		invalid("string", edit(baseReq, "deadline_ts", `"1738324800"`), "/deadline_ts"),
		invalid("null", edit(baseReq, "deadline_ts", `null`), "/deadline_ts"),
	})
}

func TestRolloutRequest_LeaseIsOptionalAndNullable(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutRequest, []ruleCase{
		valid("absent", baseReq),
		valid("null", edit(baseReq, "lease_token", "null", "lease_expires_ts", "null")),
		valid("granted", edit(baseReq, "lease_token", `"lt"`, "lease_expires_ts", "1738324260.5")),
		invalid("expiry as string", edit(baseReq, "lease_expires_ts", `"soon"`), "/lease_expires_ts"),
		invalid("metadata array", edit(baseReq, "metadata", `[]`), "/metadata"),
	})
}

func TestRolloutOutput_RejectsServerAuthoredFields(t *testing.T) {
	t.Parallel()
	var cases []ruleCase
	for _, m := range []string{"score", "verdicts", "training_grade", "rollout_id", "state", "server_fingerprint", "reconciliation"} {
		cases = append(cases, invalid(m, edit(baseOutput, m, `null`), "/"+m))
	}
	checkRule(t, flywheel.DefRolloutOutput, cases)
}

func TestRolloutOutput_ToolCallsNullVersusEmpty(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutOutput, []ruleCase{
		valid("absent", baseOutput),
		valid("null: not reported", edit(baseOutput, "tool_calls", "null")),
		valid("empty: zero calls observed", edit(baseOutput, "tool_calls", "[]")),
		valid("unknown outcome is how to report an unclassified call", edit(baseOutput, "tool_calls", `[{"name":"x","outcome":"unknown","status_code":null}]`)),
		invalid("string", edit(baseOutput, "tool_calls", `"none"`), "/tool_calls"),
		invalid("call without status_code", edit(baseOutput, "tool_calls", `[{"name":"x","outcome":"ok"}]`), "/tool_calls/0/status_code"),
	})
}

func TestRolloutOutput_FinalTextIsRequired(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutOutput, []ruleCase{
		valid("empty", `{"final_text":""}`),
		invalid("absent", `{}`, "/final_text"),
		invalid("null", `{"final_text":null}`, "/final_text"),
	})
}

func TestRolloutOutput_OmittedCountIsNonNegative(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutOutput, []ruleCase{
		valid("zero", edit(baseOutput, "tool_calls_omitted_count", "0")),
		valid("some", edit(baseOutput, "tool_calls_omitted_count", "3")),
		invalid("negative", edit(baseOutput, "tool_calls_omitted_count", "-1"), "/tool_calls_omitted_count"),
		invalid("null", edit(baseOutput, "tool_calls_omitted_count", "null"), "/tool_calls_omitted_count"),
	})
}

func TestRolloutOutput_LLMCallCountIsNullableNonNegative(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutOutput, []ruleCase{
		valid("null", edit(baseOutput, "llm_call_count", "null")),
		valid("zero", edit(baseOutput, "llm_call_count", "0")),
		invalid("negative", edit(baseOutput, "llm_call_count", "-2"), "/llm_call_count"),
		invalid("fraction", edit(baseOutput, "llm_call_count", "2.5"), "/llm_call_count"),
	})
}

func TestRolloutOutput_ArtifactsAreDigestsOrInlineFiles(t *testing.T) {
	t.Parallel()
	inline := `{"sha256":"` + sha64 + `","size_bytes":1,"content":"4"}`
	checkRule(t, flywheel.DefRolloutOutput, []ruleCase{
		valid("digest", edit(baseOutput, "artifacts", `{"a.txt":"`+sha64+`"}`)),
		valid("skip marker", edit(baseOutput, "artifacts", `{"big.bin":"skipped:too_large:1048576"}`)),
		valid("inline", edit(baseOutput, "artifacts", `{"a.txt":`+inline+`}`)),
		valid("empty", edit(baseOutput, "artifacts", `{}`)),
		invalid("number", edit(baseOutput, "artifacts", `{"a.txt":1}`), "/artifacts/a.txt"),
		invalid("null value", edit(baseOutput, "artifacts", `{"a.txt":null}`), "/artifacts/a.txt"),
		invalid("inline without content", edit(baseOutput, "artifacts", `{"a.txt":{"sha256":"`+sha64+`","size_bytes":1}}`), "/artifacts/a.txt/content"),
		invalid("inline with extra member", edit(baseOutput, "artifacts", `{"a.txt":{"sha256":"`+sha64+`","size_bytes":1,"content":"4","encoding":"utf-8"}}`), "/artifacts/a.txt/encoding"),
		invalid("short sha256", edit(baseOutput, "artifacts", `{"a.txt":{"sha256":"abc","size_bytes":1,"content":"4"}}`), "/artifacts/a.txt/sha256"),
		invalid("negative size", edit(baseOutput, "artifacts", `{"a.txt":{"sha256":"`+sha64+`","size_bytes":-1,"content":"4"}}`), "/artifacts/a.txt/size_bytes"),
		invalid("name with slash is escaped", edit(baseOutput, "artifacts", `{"src/a~b.go":7}`), "/artifacts/src~1a~0b.go"),
		invalid("array", edit(baseOutput, "artifacts", `[]`), "/artifacts"),
	})
}

func TestRolloutOutput_RewardAndSuccessAreAdvisory(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutOutput, []ruleCase{
		valid("reward and success", edit(baseOutput, "reward", "-0.5", "success", "false")),
		valid("nulls", edit(baseOutput, "reward", "null", "success", "null")),
		invalid("reward string", edit(baseOutput, "reward", `"high"`), "/reward"),
		invalid("success string", edit(baseOutput, "success", `"yes"`), "/success"),
	})
}

func TestRolloutOutput_ExclusionIsTypedOrNull(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutOutput, []ruleCase{
		valid("null", edit(baseOutput, "exclusion", "null")),
		valid("typed", edit(baseOutput, "exclusion", `{"reason":"flywheel_crash","detail":"segfault"}`)),
		invalid("string", edit(baseOutput, "exclusion", `"capacity"`), "/exclusion"),
		invalid("no reason", edit(baseOutput, "exclusion", `{}`), "/exclusion/reason"),
		invalid("untyped reason", edit(baseOutput, "exclusion", `{"reason":"bad_answer"}`), "/exclusion/reason"),
	})
}

func TestRolloutOutput_EventsAreObjects(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutOutput, []ruleCase{
		valid("objects", edit(baseOutput, "events", `[{},{"a":1}]`)),
		invalid("string event", edit(baseOutput, "events", `[{},"x"]`), "/events/1"),
		invalid("null", edit(baseOutput, "events", `null`), "/events"),
		invalid("timing array", edit(baseOutput, "timing", `[]`), "/timing"),
	})
}

func TestRolloutOutput_AgentFingerprintIsAnAttestationObjectOrNull(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefRolloutOutput, []ruleCase{
		valid("object", edit(baseOutput, "agent_fingerprint", `{"sdk":"x"}`)),
		valid("null", edit(baseOutput, "agent_fingerprint", `null`)),
		invalid("string", edit(baseOutput, "agent_fingerprint", `"sha"`), "/agent_fingerprint"),
	})
}

func TestClaimResponse_EmptyClaimCarriesBackoff(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefClaimResponse, []ruleCase{
		valid("empty with hint", `{"rollouts":[],"poll_after_ms":1000}`),
		valid("work remains", `{"rollouts":[`+baseReq+`],"poll_after_ms":0}`),
		invalid("no hint", `{"rollouts":[]}`, "/poll_after_ms"),
		invalid("null rollouts", `{"rollouts":null,"poll_after_ms":1000}`, "/rollouts"),
		invalid("no rollouts", `{"poll_after_ms":1000}`, "/rollouts"),
		invalid("negative hint", `{"rollouts":[],"poll_after_ms":-1}`, "/poll_after_ms"),
		invalid("fractional hint", `{"rollouts":[],"poll_after_ms":0.5}`, "/poll_after_ms"),
		invalid("extra member", `{"rollouts":[],"poll_after_ms":0,"retry_after":1}`, "/retry_after"),
	})
}

func TestClaimResponse_RolloutsAreRolloutRequests(t *testing.T) {
	t.Parallel()
	checkRule(t, flywheel.DefClaimResponse, []ruleCase{
		invalid("bad url in second", `{"rollouts":[`+baseReq+`,`+edit(baseReq, "llm_url", `"nope"`)+`],"poll_after_ms":0}`, "/rollouts/1/llm_url"),
		invalid("environment", `{"rollouts":[`+edit(baseReq, "environment", `{}`)+`],"poll_after_ms":0}`, "/rollouts/0/environment"),
	})
}
