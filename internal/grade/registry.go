package grade

// def describes one grader name: its implementation version (recorded with
// every verdict set, so regrading history says which logic judged), the key
// a scalar shorthand fills, and its config parser.
type def struct {
	version   string
	shorthand string
	parse     func(c *config) (grader, error)
}

// registry holds every grader of SPEC §8. Bump a version whenever a change
// could turn a stored verdict into a different one.
var registry map[string]def

func init() {
	registry = map[string]def{
		"exact":           {"1", "value", parseText("exact")},
		"contains":        {"1", "value", parseText("contains")},
		"icontains":       {"1", "value", parseText("icontains")},
		"not_contains":    {"1", "value", parseText("not_contains")},
		"regex":           {"1", "value", parseText("regex")},
		"json_schema":     {"1", "", parseJSONSchema},
		"equals_json":     {"1", "value", parseEqualsJSON},
		"tool_called":     {"1", "name", parseToolCalled},
		"tool_not_called": {"1", "name", parseToolNotCalled},
		"tool_sequence":   {"1", "names", parseToolSequence},
		"tool_outcome":    {"1", "name", parseToolOutcome},
		"all_tools_ok":    {"1", "_", parseAllToolsOK},
		"entity_written":  {"1", "", parseEntityWritten},
		"max_steps": {"1", "max", parseCountBudget("steps", ReasonStepsNotReported,
			func(it *Item) *int { return it.Steps })},
		"max_llm_calls": {"1", "max", parseCountBudget("LLM calls", ReasonLLMCallsNotReported,
			func(it *Item) *int { return it.LLMCalls })},
		"max_tokens":   {"1", "max", parseMaxTokens},
		"max_cost_usd": {"1", "max", parseMaxCost},
		"artifact":     {"1", "name", parseArtifact},
		"judge":        {"1", "rubric", parseJudge},
		"command":      {"1", "run", parseCommand},
	}
}
