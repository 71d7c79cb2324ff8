package grade

import (
	"encoding/json"
	"testing"
)

// setGraders are the set-reasoning graders of SPEC §8.
var setGraders = map[string]string{
	"tool_not_called":      `{"tool_not_called":"delete_account"}`,
	"tool_called with max": `{"tool_called":{"name":"lookup","max":3}}`,
	"tool_sequence":        `{"tool_sequence":["lookup","refund"]}`,
	"all_tools_ok":         `{"all_tools_ok":true}`,
	"max_steps":            `{"max_steps":10}`,
	"max_llm_calls":        `{"max_llm_calls":10}`,
}

// withBudgets sets llm_calls and steps so budget graders have evidence.
func withBudgets(it *Item) *Item {
	it.LLMCalls, it.Steps = ip(2), ip(2)
	return it
}

func TestSetGraders_AbstainWhenToolCallsNull(t *testing.T) {
	t.Parallel()
	var cases []gradeCase
	for name, decl := range setGraders {
		cases = append(cases, gradeCase{name, decl, withBudgets(rollout("x", nil)), "abstain:tool_calls_not_reported"})
	}
	runGradeCases(t, cases)
}

func TestSetGraders_AbstainWhenToolCallsOmitted(t *testing.T) {
	t.Parallel()
	var cases []gradeCase
	for name, decl := range setGraders {
		it := withBudgets(rollout("x", []ToolCall{okCall("lookup"), okCall("refund")}))
		it.ToolCallsOmittedCount = 1
		cases = append(cases, gradeCase{name, decl, it, "abstain:tool_calls_omitted"})
	}
	runGradeCases(t, cases)
}

func TestSetGraders_DecideOnCompleteList(t *testing.T) {
	t.Parallel()
	var cases []gradeCase
	for name, decl := range setGraders {
		cases = append(cases, gradeCase{name, decl, withBudgets(rollout("x", []ToolCall{okCall("lookup"), okCall("refund")})), "pass"})
	}
	runGradeCases(t, cases)
}

func TestSetGraders_RunsAbstainWithoutProvidesOrValidTrajectory(t *testing.T) {
	t.Parallel()
	calls := []ToolCall{okCall("lookup"), okCall("refund")}
	run := func(provides, valid *bool) *Item {
		return withBudgets(&Item{Kind: KindRun, Answer: sp("x"), ToolCalls: calls, ProvidesToolCalls: provides, TrajectoryValid: valid})
	}
	var cases []gradeCase
	for name, decl := range setGraders {
		cases = append(cases,
			gradeCase{name + " provides false", decl, run(boolp(false), boolp(true)), "abstain:tool_calls_not_provided"},
			gradeCase{name + " provides unknown", decl, run(nil, boolp(true)), "abstain:tool_calls_not_provided"},
			gradeCase{name + " invalid trajectory", decl, run(boolp(true), boolp(false)), "abstain:trajectory_invalid"},
			gradeCase{name + " no trajectory", decl, run(boolp(true), nil), "abstain:trajectory_invalid"},
			gradeCase{name + " valid", decl, run(boolp(true), boolp(true)), "pass"},
		)
	}
	runGradeCases(t, cases)
}

func TestToolCalled_WithoutMaxPassesOnPartialList(t *testing.T) {
	t.Parallel()
	partial := rollout("x", []ToolCall{okCall("issue_refund")})
	partial.ToolCallsOmittedCount = 3
	run := &Item{Kind: KindRun, ToolCalls: []ToolCall{okCall("issue_refund")}, ProvidesToolCalls: boolp(true)}
	runGradeCases(t, []gradeCase{
		{"omitted calls", `{"tool_called":"issue_refund"}`, partial, "pass"},
		{"run without valid trajectory", `{"tool_called":"issue_refund"}`, run, "pass"},
		{"with max it abstains", `{"tool_called":{"name":"issue_refund","max":1}}`, partial, "abstain:tool_calls_omitted"},
	})
}

func TestToolCalled_WithoutMaxAbstainsInsteadOfFailingOnIncompleteList(t *testing.T) {
	t.Parallel()
	partial := rollout("x", []ToolCall{okCall("lookup")})
	partial.ToolCallsOmittedCount = 1
	runGradeCases(t, []gradeCase{
		{"null list", `{"tool_called":"issue_refund"}`, rollout("x", nil), "abstain:tool_calls_not_reported"},
		{"omitted calls", `{"tool_called":"issue_refund"}`, partial, "abstain:tool_calls_omitted"},
		{"min not reached on partial list", `{"tool_called":{"name":"lookup","min":2}}`, partial, "abstain:tool_calls_omitted"},
		{"complete list fails", `{"tool_called":"issue_refund"}`, rollout("x", []ToolCall{okCall("lookup")}), "fail"},
		{"observed zero fails", `{"tool_called":"issue_refund"}`, rollout("x", []ToolCall{}), "fail"},
	})
}

func TestToolCalled_ArgsSubsetMatch(t *testing.T) {
	t.Parallel()
	calls := []ToolCall{
		call("issue_refund", OutcomeOK, nil, `{"order_id":"1042","amount":12.5,"meta":{"reason":"broken","by":"agent"}}`),
	}
	runGradeCases(t, []gradeCase{
		{"subset matches", `{"tool_called":{"name":"issue_refund","args":{"order_id":"1042"}}}`, rollout("x", calls), "pass"},
		{"nested subset matches", `{"tool_called":{"name":"issue_refund","args":{"meta":{"reason":"broken"}}}}`, rollout("x", calls), "pass"},
		{"number equality", `{"tool_called":{"name":"issue_refund","args":{"amount":12.50}}}`, rollout("x", calls), "pass"},
		{"string vs number differ", `{"tool_called":{"name":"issue_refund","args":{"order_id":1042}}}`, rollout("x", calls), "fail"},
		{"wrong value", `{"tool_called":{"name":"issue_refund","args":{"order_id":"1043"}}}`, rollout("x", calls), "fail"},
		{"missing key", `{"tool_called":{"name":"issue_refund","args":{"currency":"EUR"}}}`, rollout("x", calls), "fail"},
		{"no arguments recorded", `{"tool_called":{"name":"issue_refund","args":{"order_id":"1042"}}}`, rollout("x", []ToolCall{okCall("issue_refund")}), "fail"},
		{"empty args match any", `{"tool_called":{"name":"issue_refund","args":{}}}`, rollout("x", calls), "pass"},
	})
}

func TestToolCalled_MinAndMax(t *testing.T) {
	t.Parallel()
	three := rollout("x", []ToolCall{okCall("lookup"), okCall("lookup"), okCall("refund"), okCall("lookup")})
	runGradeCases(t, []gradeCase{
		{"within max", `{"tool_called":{"name":"lookup","max":3}}`, three, "pass"},
		{"over max", `{"tool_called":{"name":"lookup","max":2}}`, three, "fail"},
		{"never called with max", `{"tool_called":{"name":"cancel","max":2}}`, three, "fail"},
		{"min reached", `{"tool_called":{"name":"lookup","min":3}}`, three, "pass"},
		{"min missed", `{"tool_called":{"name":"lookup","min":4}}`, three, "fail"},
	})
}

func TestToolCalled_SourceEmitted(t *testing.T) {
	t.Parallel()
	it := rollout("x", nil) // the agent reported nothing
	it.EmittedToolCalls = []EmittedToolCall{
		{Name: "lookup", Arguments: json.RawMessage(`"{\"order_id\":\"1042\"}"`), CompletionSeq: 1},
		{Name: "issue_refund", Arguments: json.RawMessage(`{"order_id":"1042"}`), CompletionSeq: 2},
	}
	noGateway := rollout("x", []ToolCall{okCall("issue_refund")})
	runGradeCases(t, []gradeCase{
		{"emitted call found", `{"tool_called":{"name":"issue_refund","source":"emitted"}}`, it, "pass"},
		{"arguments string decoded", `{"tool_called":{"name":"lookup","args":{"order_id":"1042"},"source":"emitted"}}`, it, "pass"},
		{"executed list still null", `{"tool_called":{"name":"issue_refund"}}`, it, "abstain:tool_calls_not_reported"},
		{"emitted list is complete", `{"tool_not_called":{"name":"delete","source":"emitted"}}`, it, "pass"},
		{"emitted sequence", `{"tool_sequence":{"names":["lookup","issue_refund"],"source":"emitted"}}`, it, "pass"},
		{"emitted unknown", `{"tool_called":{"name":"issue_refund","source":"emitted"}}`, noGateway, "abstain:emitted_tool_calls_not_reported"},
		{"emitted unknown set", `{"tool_not_called":{"name":"x","source":"emitted"}}`, noGateway, "abstain:emitted_tool_calls_not_reported"},
	})
}

func TestToolNotCalled(t *testing.T) {
	t.Parallel()
	calls := []ToolCall{okCall("lookup"), call("delete_account", OutcomeFailed, nil, `{"user":"u1"}`)}
	runGradeCases(t, []gradeCase{
		{"called fails", `{"tool_not_called":"delete_account"}`, rollout("x", calls), "fail"},
		{"not called passes", `{"tool_not_called":"refund"}`, rollout("x", calls), "pass"},
		{"observed zero passes", `{"tool_not_called":"refund"}`, rollout("x", []ToolCall{}), "pass"},
		{"args filter excludes", `{"tool_not_called":{"name":"delete_account","args":{"user":"u2"}}}`, rollout("x", calls), "pass"},
		{"args filter matches", `{"tool_not_called":{"name":"delete_account","args":{"user":"u1"}}}`, rollout("x", calls), "fail"},
	})
}

func TestToolSequence_OrderedSubsequence(t *testing.T) {
	t.Parallel()
	calls := []ToolCall{okCall("auth"), okCall("lookup"), okCall("log"), okCall("refund"), okCall("notify")}
	runGradeCases(t, []gradeCase{
		{"gaps allowed", `{"tool_sequence":["lookup","refund","notify"]}`, rollout("x", calls), "pass"},
		{"wrong order", `{"tool_sequence":["refund","lookup"]}`, rollout("x", calls), "fail"},
		{"missing name", `{"tool_sequence":["lookup","cancel"]}`, rollout("x", calls), "fail"},
		{"repeats need repeats", `{"tool_sequence":["lookup","lookup"]}`, rollout("x", calls), "fail"},
		{"observed zero", `{"tool_sequence":["lookup"]}`, rollout("x", []ToolCall{}), "fail"},
		{"object form", `{"tool_sequence":{"names":["auth","notify"]}}`, rollout("x", calls), "pass"},
	})
}

func TestOutcome_OkTrueFailedFalseUnknownAbstains(t *testing.T) {
	t.Parallel()
	runGradeCases(t, []gradeCase{
		{"ok want ok", `{"tool_outcome":"refund"}`, rollout("x", []ToolCall{call("refund", OutcomeOK, ip(200), "")}), "pass"},
		{"failed want ok", `{"tool_outcome":"refund"}`, rollout("x", []ToolCall{call("refund", OutcomeFailed, ip(500), "")}), "fail"},
		{"unknown want ok", `{"tool_outcome":"refund"}`, rollout("x", []ToolCall{call("refund", OutcomeUnknown, nil, "")}), "abstain:outcome_unknown"},
		{"failed want failed", `{"tool_outcome":{"name":"refund","want":"failed"}}`, rollout("x", []ToolCall{call("refund", OutcomeFailed, nil, "")}), "pass"},
		{"ok want failed", `{"tool_outcome":{"name":"refund","want":"failed"}}`, rollout("x", []ToolCall{okCall("refund")}), "fail"},
		{"unknown want failed", `{"tool_outcome":{"name":"refund","want":"failed"}}`, rollout("x", []ToolCall{call("refund", OutcomeUnknown, nil, "")}), "abstain:outcome_unknown"},
	})
}

func TestToolOutcome_UnknownAbstains(t *testing.T) {
	t.Parallel()
	// Even a status a buggy agent attached to an unknown outcome never
	// manufactures a verdict.
	v := gradeOne(t, `{"tool_outcome":"refund"}`, rollout("x", []ToolCall{call("refund", OutcomeUnknown, ip(200), "")}), Env{})
	if outcomeOf(v) != "abstain:outcome_unknown" {
		t.Errorf("got %s", outcomeOf(v))
	}
}

func TestToolOutcome_JudgesLastCallWithThatName(t *testing.T) {
	t.Parallel()
	retried := []ToolCall{call("refund", OutcomeFailed, ip(503), ""), okCall("lookup"), call("refund", OutcomeOK, ip(201), ""), call("lookup", OutcomeFailed, nil, "")}
	reversed := []ToolCall{okCall("refund"), call("refund", OutcomeFailed, nil, "")}
	runGradeCases(t, []gradeCase{
		{"retry succeeded", `{"tool_outcome":"refund"}`, rollout("x", retried), "pass"},
		{"last failed", `{"tool_outcome":"refund"}`, rollout("x", reversed), "fail"},
	})
}

func TestToolOutcome_FailsOnEmptyListAbstainsOnNull(t *testing.T) {
	t.Parallel()
	partial := rollout("x", []ToolCall{okCall("lookup")})
	partial.ToolCallsOmittedCount = 2
	runGradeCases(t, []gradeCase{
		{"empty list fails", `{"tool_outcome":"refund"}`, rollout("x", []ToolCall{}), "fail"},
		{"no such call fails", `{"tool_outcome":"refund"}`, rollout("x", []ToolCall{okCall("lookup")}), "fail"},
		{"null abstains", `{"tool_outcome":"refund"}`, rollout("x", nil), "abstain:tool_calls_not_reported"},
		{"missing from partial list abstains", `{"tool_outcome":"refund"}`, partial, "abstain:tool_calls_omitted"},
		{"run not provided abstains", `{"tool_outcome":"refund"}`, &Item{Kind: KindRun}, "abstain:tool_calls_not_provided"},
	})
}

func TestOutcome_StatusContradictsOutcomeAbstains(t *testing.T) {
	t.Parallel()
	okWith := func(code int) []ToolCall { return []ToolCall{call("refund", OutcomeOK, ip(code), "")} }
	failedWith := func(code int) []ToolCall { return []ToolCall{call("refund", OutcomeFailed, ip(code), "")} }
	entity := func(c []ToolCall) []ToolCall { c[0].EntityIDs = map[string]string{"id": "r1"}; return c }
	runGradeCases(t, []gradeCase{
		{"ok with 400", `{"tool_outcome":"refund"}`, rollout("x", okWith(400)), "abstain:outcome_contradicted"},
		{"ok with 503", `{"tool_outcome":"refund"}`, rollout("x", okWith(503)), "abstain:outcome_contradicted"},
		{"ok with 399 is fine", `{"tool_outcome":"refund"}`, rollout("x", okWith(399)), "pass"},
		{"failed with 200", `{"tool_outcome":{"name":"refund","want":"failed"}}`, rollout("x", failedWith(200)), "abstain:outcome_contradicted"},
		{"failed with 299", `{"tool_outcome":"refund"}`, rollout("x", failedWith(299)), "abstain:outcome_contradicted"},
		{"failed with 300 is fine", `{"tool_outcome":"refund"}`, rollout("x", failedWith(300)), "fail"},
		{"failed with 404 is fine", `{"tool_outcome":"refund"}`, rollout("x", failedWith(404)), "fail"},
		{"all_tools_ok ok with 500", `{"all_tools_ok":true}`, rollout("x", okWith(500)), "abstain:outcome_contradicted"},
		{"all_tools_ok failed with 201", `{"all_tools_ok":true}`, rollout("x", failedWith(201)), "abstain:outcome_contradicted"},
		{"entity_written ok with 409", `{"entity_written":{"tool":"refund","key":"id"}}`, rollout("x", entity(okWith(409))), "abstain:outcome_contradicted"},
	})
}

func TestAllToolsOK_FailedBeatsUnknown(t *testing.T) {
	t.Parallel()
	runGradeCases(t, []gradeCase{
		{"unknown then failed", `{"all_tools_ok":true}`, rollout("x", []ToolCall{call("a", OutcomeUnknown, nil, ""), call("b", OutcomeFailed, nil, "")}), "fail"},
		{"failed then unknown", `{"all_tools_ok":true}`, rollout("x", []ToolCall{call("b", OutcomeFailed, nil, ""), call("a", OutcomeUnknown, nil, "")}), "fail"},
		{"contradicted then failed", `{"all_tools_ok":true}`, rollout("x", []ToolCall{call("a", OutcomeOK, ip(500), ""), call("b", OutcomeFailed, nil, "")}), "fail"},
	})
}

func TestAllToolsOK_UnknownAbstainsAllOKPasses(t *testing.T) {
	t.Parallel()
	runGradeCases(t, []gradeCase{
		{"one unknown", `{"all_tools_ok":true}`, rollout("x", []ToolCall{okCall("a"), call("b", OutcomeUnknown, nil, "")}), "abstain:outcome_unknown"},
		{"unknown wins over contradicted", `{"all_tools_ok":true}`, rollout("x", []ToolCall{call("a", OutcomeOK, ip(500), ""), call("b", OutcomeUnknown, nil, "")}), "abstain:outcome_unknown"},
		{"all ok", `{"all_tools_ok":true}`, rollout("x", []ToolCall{okCall("a"), call("b", OutcomeOK, ip(204), "")}), "pass"},
		{"observed zero", `{"all_tools_ok":null}`, rollout("x", []ToolCall{}), "pass"},
		{"object form", `{"all_tools_ok":{}}`, rollout("x", []ToolCall{okCall("a")}), "pass"},
	})
}

func TestEntityWritten(t *testing.T) {
	t.Parallel()
	with := func(o Outcome, ids map[string]string) []ToolCall {
		c := call("create_ticket", o, nil, "")
		c.EntityIDs = ids
		return []ToolCall{okCall("lookup"), c}
	}
	partial := rollout("x", []ToolCall{okCall("lookup")})
	partial.ToolCallsOmittedCount = 1
	decl := `{"entity_written":{"tool":"create_ticket","key":"id"}}`
	runGradeCases(t, []gradeCase{
		{"ok with id passes", decl, rollout("x", with(OutcomeOK, map[string]string{"id": "T-99"})), "pass"},
		{"entity_ids absent abstains", decl, rollout("x", with(OutcomeOK, nil)), "abstain:no_entity_ids"},
		{"entity_ids empty abstains", decl, rollout("x", with(OutcomeOK, map[string]string{})), "abstain:no_entity_ids"},
		{"outcome unknown abstains", decl, rollout("x", with(OutcomeUnknown, map[string]string{"id": "T-99"})), "abstain:outcome_unknown"},
		{"failed without ids abstains", decl, rollout("x", with(OutcomeFailed, nil)), "abstain:no_entity_ids"},
		{"failed with ids fails", decl, rollout("x", with(OutcomeFailed, map[string]string{"id": "T-99"})), "fail"},
		{"other key abstains", decl, rollout("x", with(OutcomeOK, map[string]string{"uuid": "u"})), "abstain:entity_key_missing"},
		{"no such call fails", decl, rollout("x", []ToolCall{okCall("lookup")}), "fail"},
		{"observed zero fails", decl, rollout("x", []ToolCall{}), "fail"},
		{"null abstains", decl, rollout("x", nil), "abstain:tool_calls_not_reported"},
		{"missing from partial list abstains", decl, partial, "abstain:tool_calls_omitted"},
	})
}
