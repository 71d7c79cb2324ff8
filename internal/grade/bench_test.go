package grade

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkGrade_50Calls10Graders grades a rollout with 50 tool calls with
// ten graders of the kinds suites use most.
func BenchmarkGrade_50Calls10Graders(b *testing.B) {
	calls := make([]ToolCall, 50)
	for i := range calls {
		calls[i] = call(fmt.Sprintf("tool_%d", i%10), OutcomeOK, ip(200),
			fmt.Sprintf(`{"order_id":"%d","amount":%d.5,"meta":{"attempt":%d,"tags":["a","b"]}}`, 1000+i, i, i%3))
	}
	it := rollout("Your refund for order 1042 has been issued. Sorry for the trouble.", calls)
	it.LLMCalls, it.Steps = ip(12), ip(12)
	it.Usage = &Usage{PromptTokens: i64(12000), CompletionTokens: i64(800), CostUSD: fp(0.03)}
	specs, err := ParseSpecs([]byte(`[
		{"contains":"refund"},
		{"regex":"order \\d{4}"},
		{"not_contains":"cannot"},
		{"tool_called":{"name":"tool_3","args":{"order_id":"1043"}}},
		{"tool_called":{"name":"tool_4","max":10}},
		{"tool_not_called":"delete_account"},
		{"tool_sequence":["tool_1","tool_5","tool_9"]},
		{"tool_outcome":"tool_7"},
		{"all_tools_ok":true},
		{"max_llm_calls":20}
	]`))
	if err != nil {
		b.Fatal(err)
	}
	s, _ := Compile(specs)
	// Round-trip the item through JSON first, as the server will.
	raw, _ := json.Marshal(it)
	var item Item
	if err := json.Unmarshal(raw, &item); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		set, err := s.Grade(ctx, &item, Env{})
		if err != nil || set.Classify() != Passed {
			b.Fatalf("classify %s: %v %+v", set.Classify(), err, set.Verdicts)
		}
	}
}
