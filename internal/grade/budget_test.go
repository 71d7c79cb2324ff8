package grade

import (
	"strings"
	"testing"
)

func TestBudgets_CountsNeedEvidence(t *testing.T) {
	t.Parallel()
	complete := func(llm, steps *int) *Item {
		it := rollout("x", []ToolCall{})
		it.LLMCalls, it.Steps = llm, steps
		return it
	}
	runGradeCases(t, []gradeCase{
		{"llm calls within", `{"max_llm_calls":3}`, complete(ip(3), nil), "pass"},
		{"llm calls over", `{"max_llm_calls":3}`, complete(ip(4), nil), "fail"},
		{"llm calls unknown", `{"max_llm_calls":3}`, complete(nil, nil), "abstain:llm_calls_not_reported"},
		{"zero budget", `{"max_llm_calls":{"max":0}}`, complete(ip(0), nil), "pass"},
		{"steps within", `{"max_steps":{"max":5}}`, complete(nil, ip(5)), "pass"},
		{"steps over", `{"max_steps":5}`, complete(nil, ip(6)), "fail"},
		{"steps unknown", `{"max_steps":5}`, complete(nil, nil), "abstain:steps_not_reported"},
	})
}

func TestBudgets_TokensAndCostAbstainWithoutUsage(t *testing.T) {
	t.Parallel()
	with := func(u *Usage) *Item { it := rollout("x", nil); it.Usage = u; return it }
	runGradeCases(t, []gradeCase{
		{"tokens within", `{"max_tokens":1000}`, with(&Usage{PromptTokens: i64(800), CompletionTokens: i64(200)}), "pass"},
		{"tokens over", `{"max_tokens":1000}`, with(&Usage{PromptTokens: i64(800), CompletionTokens: i64(201)}), "fail"},
		{"no usage", `{"max_tokens":1000}`, with(nil), "abstain:usage_not_reported"},
		{"partial usage", `{"max_tokens":1000}`, with(&Usage{PromptTokens: i64(1)}), "abstain:usage_not_reported"},
		{"cost within", `{"max_cost_usd":0.5}`, with(&Usage{CostUSD: fp(0.5)}), "pass"},
		{"cost over", `{"max_cost_usd":{"max":0.5}}`, with(&Usage{CostUSD: fp(0.51)}), "fail"},
		{"no cost", `{"max_cost_usd":0.5}`, with(&Usage{PromptTokens: i64(1), CompletionTokens: i64(1)}), "abstain:cost_not_reported"},
		{"no usage for cost", `{"max_cost_usd":0.5}`, with(nil), "abstain:cost_not_reported"},
		// Token and cost budgets do not reason about the call list.
		{"tokens with null tool_calls", `{"max_tokens":10}`, with(&Usage{PromptTokens: i64(1), CompletionTokens: i64(1)}), "pass"},
	})
}

func TestArtifactGrader(t *testing.T) {
	t.Parallel()
	digest := strings.Repeat("0a", 32)
	other := strings.Repeat("ff", 32)
	with := func(arts map[string]Artifact) *Item { it := rollout("x", nil); it.Artifacts = arts; return it }
	arts := map[string]Artifact{
		"report.md": {SHA256: digest, SizeBytes: i64(13), Content: sp("total: 12 EUR")},
		"data.json": {SHA256: digest, SizeBytes: i64(9), Content: sp(`{"n": 12}`)},
		"notes.txt": {SHA256: digest, SizeBytes: i64(3), Content: sp("abc")},
		"image.png": {SHA256: digest},
		"huge.bin":  {Skipped: "skipped:too_large:2000000000"},
		"link":      {Skipped: "skipped:symlink"},
	}
	runGradeCases(t, []gradeCase{
		{"exists shorthand", `{"artifact":"report.md"}`, with(arts), "pass"},
		{"exists missing", `{"artifact":"nope.md"}`, with(arts), "fail"},
		{"exists skipped", `{"artifact":"huge.bin"}`, with(arts), "pass"},
		{"exists false", `{"artifact":{"name":"nope.md","exists":false}}`, with(arts), "pass"},
		{"exists false present", `{"artifact":{"name":"report.md","exists":false}}`, with(arts), "fail"},
		{"no artifacts reported", `{"artifact":"report.md"}`, with(nil), "abstain:artifacts_not_reported"},
		{"empty artifacts", `{"artifact":"report.md"}`, with(map[string]Artifact{}), "fail"},
		{"sha256 match digest-only", `{"artifact":{"name":"image.png","sha256":"` + digest + `"}}`, with(arts), "pass"},
		{"sha256 differs", `{"artifact":{"name":"image.png","sha256":"` + other + `"}}`, with(arts), "fail"},
		{"sha256 skipped", `{"artifact":{"name":"huge.bin","sha256":"` + digest + `"}}`, with(arts), "abstain:artifact_skipped"},
		{"sha256 missing", `{"artifact":{"name":"nope","sha256":"` + digest + `"}}`, with(arts), "fail"},
		{"contains inline", `{"artifact":{"name":"report.md","contains":"12 EUR"}}`, with(arts), "pass"},
		{"contains inline fails", `{"artifact":{"name":"report.md","contains":"13 EUR"}}`, with(arts), "fail"},
		{"contains digest-only abstains", `{"artifact":{"name":"image.png","contains":"x"}}`, with(arts), "abstain:digest_only"},
		{"contains skipped abstains", `{"artifact":{"name":"link","contains":"x"}}`, with(arts), "abstain:artifact_skipped"},
		{"json_schema inline", `{"artifact":{"name":"data.json","json_schema":{"type":"object","required":["n"]}}}`, with(arts), "pass"},
		{"json_schema inline fails", `{"artifact":{"name":"data.json","json_schema":{"required":["m"]}}}`, with(arts), "fail"},
		{"json_schema not JSON", `{"artifact":{"name":"notes.txt","json_schema":{}}}`, with(arts), "fail"},
		{"json_schema digest-only abstains", `{"artifact":{"name":"image.png","json_schema":{}}}`, with(arts), "abstain:digest_only"},
	})
}
