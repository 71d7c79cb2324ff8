package atif_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/atif"
)

func parseFile(t *testing.T, name string) *atif.Trajectory {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "valid", name))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := atif.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// The expectations were computed independently (with Python) from the
// samples.
func TestStatsTestdata(t *testing.T) {
	t.Parallel()
	n := func(v int) *int { return &v }
	tests := []struct {
		file                 string
		agentSteps, llmCalls int
		usage                atif.Usage
		cost                 float64 // -1: none reported
		toolUses, answered   int
	}{
		{"daydream-fixtures__deep_mode_parent.json", 2, 2, atif.Usage{PromptTokens: n(9000), CompletionTokens: n(1700), CachedTokens: n(4800)}, 0.12, 2, 2},
		// llm_call_count 0 on three delegation steps.
		{"daydream-rundir-golden__trajectory.json", 10, 7, atif.Usage{PromptTokens: n(230977), CompletionTokens: n(17), CachedTokens: n(209744)}, 0.8825803, 0, 0},
		// The finish call has no result.
		{"harbor-golden-v15-openhands__hello-world.trajectory.json", 2, 2, atif.Usage{PromptTokens: n(220), CompletionTokens: n(80)}, 0.00135, 2, 1},
		// Four copied steps are not counted again.
		{"harbor-golden-v15-terminus2__hello-world-context-summarization-linear-history.trajectory.cont-1.json", 4, 4, atif.Usage{PromptTokens: n(4250), CompletionTokens: n(530)}, 0.015925, 0, 0},
		{"nat-atof-to-atif__exmp01_atif.json", 1, 1, atif.Usage{}, -1, 0, 0},
		{"nat-harbor-openclaw-smoke__native-openclaw-trajectory.json", 61, 61, atif.Usage{PromptTokens: n(2700686), CompletionTokens: n(8199), CachedTokens: n(919172)}, -1, 60, 60},
		{"openagents-qa-runner-login-trace__trajectory.json", 6, 6, atif.Usage{}, 0, 6, 6},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			tr := parseFile(t, tt.file)
			if got := tr.AgentSteps(); got != tt.agentSteps {
				t.Errorf("AgentSteps() = %d, want %d", got, tt.agentSteps)
			}
			if got := tr.LLMCalls(); got != tt.llmCalls {
				t.Errorf("LLMCalls() = %d, want %d", got, tt.llmCalls)
			}
			u := tr.TotalUsage()
			cost := u.CostUSD
			u.CostUSD = nil
			if diff := cmp.Diff(tt.usage, u); diff != "" {
				t.Errorf("TotalUsage() tokens (-want +got):\n%s", diff)
			}
			switch {
			case tt.cost < 0 && cost != nil:
				t.Errorf("TotalUsage().CostUSD = %v, want nil", *cost)
			case tt.cost >= 0 && (cost == nil || math.Abs(*cost-tt.cost) > 1e-9):
				t.Errorf("TotalUsage().CostUSD = %v, want %v", cost, tt.cost)
			}
			uses := tr.ToolUses()
			answered := 0
			for _, u := range uses {
				if len(u.Results) > 0 {
					answered++
				}
			}
			if len(uses) != tt.toolUses || answered != tt.answered {
				t.Errorf("ToolUses() = %d calls, %d answered; want %d, %d", len(uses), answered, tt.toolUses, tt.answered)
			}
		})
	}
}

func TestStatsSubagentsAndCopies(t *testing.T) {
	t.Parallel()
	tr, err := atif.Parse([]byte(`{
	  "schema_version": "ATIF-v1.7", "agent": {"name": "p", "version": "1"},
	  "steps": [
	    {"step_id": 1, "source": "user", "message": "go"},
	    {"step_id": 2, "source": "agent", "message": "", "is_copied_context": true, "metrics": {"prompt_tokens": 1000}},
	    {"step_id": 3, "source": "agent", "message": "", "llm_call_count": 3, "metrics": {"prompt_tokens": 10, "cost_usd": 0.5},
	     "tool_calls": [{"tool_call_id": "t1", "function_name": "search", "arguments": {"q": "x"}}],
	     "observation": {"results": [{"source_call_id": "t1", "content": "a"}, {"source_call_id": "t1", "content": [{"type": "text", "text": "b"}]}, {"content": "other"}]}},
	    {"step_id": 4, "source": "system", "message": "", "llm_call_count": 1}
	  ],
	  "subagent_trajectories": [{
	    "schema_version": "ATIF-v1.7", "trajectory_id": "s1", "agent": {"name": "s", "version": "1"},
	    "steps": [{"step_id": 1, "source": "agent", "message": "", "metrics": {"prompt_tokens": 5, "completion_tokens": 2},
	      "tool_calls": [{"tool_call_id": "t1", "function_name": "fetch", "arguments": {}}]}]
	  }]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.AgentSteps(); got != 2 {
		t.Errorf("AgentSteps() = %d, want 2", got)
	}
	if got := tr.LLMCalls(); got != 3+1+1 {
		t.Errorf("LLMCalls() = %d, want 5", got)
	}
	u := tr.TotalUsage()
	if u.PromptTokens == nil || *u.PromptTokens != 15 || u.CompletionTokens == nil || *u.CompletionTokens != 2 || u.CachedTokens != nil || u.CostUSD == nil || *u.CostUSD != 0.5 {
		t.Errorf("TotalUsage() = %s", mustJSON(t, u))
	}
	uses := tr.ToolUses()
	if len(uses) != 2 {
		t.Fatalf("ToolUses() = %d calls, want 2", len(uses))
	}
	if uses[0].FunctionName != "search" || uses[0].Output() != "a\nb" || uses[0].Step.StepID != 3 || uses[0].Trajectory != tr || string(uses[0].Arguments) != `{"q": "x"}` {
		t.Errorf("first use = %+v, output %q", uses[0], uses[0].Output())
	}
	if uses[1].FunctionName != "fetch" || uses[1].Trajectory != &tr.SubagentTrajectories[0] || len(uses[1].Results) != 0 || uses[1].Output() != "" {
		t.Errorf("second use = %+v", uses[1])
	}
	var ids []string
	for sub := range tr.All() {
		ids = append(ids, sub.Agent.Name)
	}
	if diff := cmp.Diff([]string{"p", "s"}, ids); diff != "" {
		t.Errorf("All() (-want +got):\n%s", diff)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
