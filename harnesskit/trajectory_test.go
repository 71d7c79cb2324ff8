package harnesskit_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/clock"
)

// trajectory fetches a run's trajectory, checks it is valid ATIF, and
// decodes it.
func (k *kit) trajectory(id string) map[string]any {
	k.t.Helper()
	b := k.getJSON("/runs/"+id+"/trajectory", 200, nil)
	if r := atif.Check(b); !r.Valid() {
		k.t.Errorf("trajectory is not valid ATIF: %v\n%s", r.Violations, b)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		k.t.Fatal(err)
	}
	return doc
}

func TestTrajectory_Recorded(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC))
	agent := harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		must := func(err error) {
			if err != nil {
				panic(err)
			}
		}
		must(run.AddSystemMessage("You are a support agent."))
		must(run.AddUserMessage(run.Question()))
		cost := 0.0012
		_, err := run.AddAgentStep(harnesskit.AgentStep{
			Reasoning: "Look the order up first.",
			ToolCalls: []harnesskit.ToolCall{
				{ID: "call-a", Name: "lookup_order", Arguments: json.RawMessage(`{"order_id":"1042"}`)},
				{Name: "lookup_customer", Arguments: json.RawMessage(`"{\"email\":\"a@b.c\"}"`)},
			},
			Metrics: &harnesskit.Metrics{PromptTokens: 100, CompletionTokens: 20, CachedTokens: 40, CostUSD: &cost},
		})
		must(err)
		must(run.AddToolResult("call-a", `{"status":"delivered"}`))
		must(run.AddToolResult("call_3_2", `{"name":"Ada"}`))
		zero := 0
		_, err = run.AddAgentStep(harnesskit.AgentStep{Message: "Refund issued.", Model: "gpt-small", LLMCallCount: &zero})
		must(err)
		must(run.AddObservation("receipt written"))
		run.SetSessionID("chat-7")
		return harnesskit.Result{Answer: "Refund issued."}, nil
	})
	k := newKit(t, agent, harnesskit.Options{
		Agent: "desk", AgentVersion: "1.2.3", Model: "gpt-big", Now: clk.Now,
		ToolDefinitions: []harnesskit.ToolDefinition{{Name: "lookup_order", Description: "Find an order.", Parameters: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}}}`)}},
	})
	id := k.create(`{"input":{"question":"Refund order 1042"}}`)
	k.wait(id)
	got := k.trajectory(id)
	ts := "2026-05-04T03:02:01Z"
	want := map[string]any{
		"schema_version": "ATIF-v1.7",
		"session_id":     "chat-7",
		"agent": map[string]any{
			"name": "desk", "version": "1.2.3", "model_name": "gpt-big",
			"tool_definitions": []any{map[string]any{"type": "function", "function": map[string]any{
				"name": "lookup_order", "description": "Find an order.",
				"parameters": map[string]any{"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string"}}},
			}}},
		},
		"steps": []any{
			map[string]any{"step_id": 1.0, "timestamp": ts, "source": "system", "message": "You are a support agent."},
			map[string]any{"step_id": 2.0, "timestamp": ts, "source": "user", "message": "Refund order 1042"},
			map[string]any{
				"step_id": 3.0, "timestamp": ts, "source": "agent", "model_name": "gpt-big", "message": "",
				"reasoning_content": "Look the order up first.",
				"tool_calls": []any{
					map[string]any{"tool_call_id": "call-a", "function_name": "lookup_order", "arguments": map[string]any{"order_id": "1042"}},
					map[string]any{"tool_call_id": "call_3_2", "function_name": "lookup_customer", "arguments": map[string]any{"email": "a@b.c"}},
				},
				"observation": map[string]any{"results": []any{
					map[string]any{"source_call_id": "call-a", "content": `{"status":"delivered"}`},
					map[string]any{"source_call_id": "call_3_2", "content": `{"name":"Ada"}`},
				}},
				"metrics": map[string]any{"prompt_tokens": 100.0, "completion_tokens": 20.0, "cached_tokens": 40.0, "cost_usd": 0.0012},
			},
			map[string]any{
				"step_id": 4.0, "timestamp": ts, "source": "agent", "model_name": "gpt-small", "message": "Refund issued.",
				"llm_call_count": 0.0,
				"observation":    map[string]any{"results": []any{map[string]any{"content": "receipt written"}}},
			},
		},
		"final_metrics": map[string]any{
			"total_prompt_tokens": 100.0, "total_completion_tokens": 20.0, "total_cached_tokens": 40.0,
			"total_cost_usd": 0.0012, "total_steps": 4.0,
		},
		"extra": map[string]any{"run_id": id, "status": "completed"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("trajectory (-want +got):\n%s", diff)
	}
}

func TestTrajectory_RecorderRefusals(t *testing.T) {
	t.Parallel()
	errs := make(chan error, 16)
	var handle *harnesskit.Run
	agent := harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		handle = run
		_, err := run.AddAgentStep(harnesskit.AgentStep{ToolCalls: []harnesskit.ToolCall{{ID: "x", Name: "t"}, {ID: "x", Name: "t"}}})
		errs <- err
		_, err = run.AddAgentStep(harnesskit.AgentStep{ToolCalls: []harnesskit.ToolCall{{ID: "x"}}})
		errs <- err
		_, err = run.AddAgentStep(harnesskit.AgentStep{ToolCalls: []harnesskit.ToolCall{{ID: "x", Name: "t", Arguments: json.RawMessage(`[1]`)}}})
		errs <- err
		zero := 0
		_, err = run.AddAgentStep(harnesskit.AgentStep{LLMCallCount: &zero, Reasoning: "hmm"})
		errs <- err
		errs <- run.AddToolResult("nope", "x")
		errs <- run.AddToolResult("", "x")
		errs <- run.AddObservation("no agent step yet")
		errs <- run.AddArtifact(harnesskit.ArtifactRef{})
		errs <- run.WriteFile("../escape", []byte("x"))
		errs <- run.WriteFile("/abs", []byte("x"))
		return harnesskit.Result{Answer: "a"}, nil
	})
	k := newKit(t, agent, harnesskit.Options{})
	id := k.create(`{"input":{"question":"q"}}`)
	k.wait(id)
	for range 10 {
		if err := <-errs; err == nil {
			t.Error("a bad recording was accepted")
		}
	}
	// After the run is terminal the trajectory is frozen.
	if err := handle.AddUserMessage("late"); !errors.Is(err, harnesskit.ErrRunFinished) {
		t.Errorf("late AddUserMessage = %v", err)
	}
	if _, err := handle.AddAgentStep(harnesskit.AgentStep{Message: "late"}); !errors.Is(err, harnesskit.ErrRunFinished) {
		t.Errorf("late AddAgentStep = %v", err)
	}
	if err := handle.WriteFile("late.txt", nil); !errors.Is(err, harnesskit.ErrRunFinished) {
		t.Errorf("late WriteFile = %v", err)
	}
	// Nothing was recorded: the kit filled in the exchange.
	doc := k.trajectory(id)
	if n := len(doc["steps"].([]any)); n != 2 {
		t.Errorf("%d steps, want the kit's 2", n)
	}
}

func TestTrajectory_FilledInWhenEmpty(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		agent  harnesskit.AgentFunc
		input  string
		schema string
		steps  []string // source:message
	}{
		{"answer", func(context.Context, *harnesskit.Run) (harnesskit.Result, error) {
			return harnesskit.Result{Answer: "4"}, nil
		}, `{"question":"2+2?"}`, "", []string{"user:2+2?", "agent:4"}},
		{"output", func(context.Context, *harnesskit.Run) (harnesskit.Result, error) {
			return harnesskit.Result{Output: map[string]int{"n": 4}}, nil
		}, `{"question":"2+2?"}`, "", []string{"user:2+2?", `agent:{"n":4}`}},
		{"failed", func(context.Context, *harnesskit.Run) (harnesskit.Result, error) {
			return harnesskit.Result{}, errors.New("no")
		}, `{"question":"2+2?"}`, "", []string{"user:2+2?"}},
		{"input without a question", func(context.Context, *harnesskit.Run) (harnesskit.Result, error) {
			return harnesskit.Result{Answer: "ok"}, nil
		}, `{ "order_id": "1042" }`, `{"type":"object"}`, []string{`user:{"order_id":"1042"}`, "agent:ok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := harnesskit.Options{}
			if tt.schema != "" {
				opts.InputSchema = json.RawMessage(tt.schema)
			}
			k := newKit(t, tt.agent, opts)
			id := k.create(`{"input":` + tt.input + `}`)
			k.wait(id)
			doc := k.trajectory(id)
			var got []string
			for _, s := range doc["steps"].([]any) {
				st := s.(map[string]any)
				got = append(got, st["source"].(string)+":"+st["message"].(string))
			}
			if diff := cmp.Diff(tt.steps, got); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if doc["session_id"] != id {
				t.Errorf("session_id = %v, want the run id", doc["session_id"])
			}
		})
	}
}

func TestTrajectory_NotBeforeTerminal(t *testing.T) {
	t.Parallel()
	g := newGate()
	k := newKit(t, g, harnesskit.Options{})
	id := k.create(`{"input":{"question":"q"}}`)
	<-g.started
	resp, b := k.do("GET", "/runs/"+id+"/trajectory", nil, nil)
	if code, _ := errorCode(t, b); resp.StatusCode != 409 || code != "run_not_finished" {
		t.Errorf("trajectory while running = %d %s", resp.StatusCode, b)
	}
	close(g.release)
	k.wait(id)
	k.trajectory(id)
}

// Every trajectory the kit writes, whatever the agent recorded, is valid.
func TestTrajectory_ConcurrentRecording(t *testing.T) {
	t.Parallel()
	agent := harnesskit.AgentFunc(func(ctx context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		done := make(chan struct{})
		for i := range 4 {
			go func() {
				defer func() { done <- struct{}{} }()
				id, err := run.AddAgentStep(harnesskit.AgentStep{ToolCalls: []harnesskit.ToolCall{{Name: "t", Arguments: json.RawMessage(`{"i":` + strings.Repeat("1", i+1) + `}`)}}})
				if err == nil {
					_ = run.AddToolResult("call_"+itoa(id)+"_1", "r")
				}
			}()
		}
		for range 4 {
			<-done
		}
		return harnesskit.Result{Answer: "done"}, nil
	})
	k := newKit(t, agent, harnesskit.Options{})
	id := k.create(`{"input":{"question":"q"}}`)
	k.wait(id)
	doc := k.trajectory(id)
	if n := len(doc["steps"].([]any)); n != 4 {
		t.Errorf("%d steps, want 4", n)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
