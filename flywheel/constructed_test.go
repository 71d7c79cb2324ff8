package flywheel_test

import (
	"encoding/json"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

func ptr[T any](v T) *T { return &v }

// Values built in Go, minimal and maximal, encode to schema-valid bodies.
func TestTypes_ConstructedValuesAreValid(t *testing.T) {
	t.Parallel()
	call := flywheel.ToolCallRecord{
		Name:       "create_ticket",
		Arguments:  json.RawMessage(`{"title":"x"}`),
		Outcome:    flywheel.OutcomeOK,
		StatusCode: ptr(201),
		Output:     json.RawMessage(`null`),
		Error:      flywheel.Null[string](),
		ErrorClass: flywheel.Some("None"),
		LatencyMS:  flywheel.Some(12.5),
		AgentName:  flywheel.Null[string](),
		ToolCallID: flywheel.Some("call_1"),
		EntityIDs:  map[flywheel.EntityKey]string{flywheel.EntityKeyID: "T-1", flywheel.EntityKeyGID: "g"},
	}
	turn := flywheel.ProductionTurn{
		TurnID:                "t1",
		TaskID:                ptr("task"),
		ConversationID:        ptr("conv"),
		TurnIndex:             ptr(0),
		InputText:             ptr("hi"),
		FinalText:             ptr("hello"),
		ToolCalls:             []flywheel.ToolCallRecord{call, {Name: "x", Outcome: flywheel.OutcomeUnknown}},
		ToolCallsOmittedCount: 1,
		AgentFingerprint:      json.RawMessage(`{"sdk":"gyre-go"}`),
		OccurredAt:            ptr("2025-01-31T12:00:00Z"),
	}
	req := flywheel.RolloutRequest{
		RolloutID: "r", TurnInput: "q", LLMURL: "http://127.0.0.1:7070/gw/t/v1", APIKey: "k",
		ArtifactsDir: "rollouts/r", DeadlineTS: 1738324800.5,
		LeaseToken: flywheel.Some("lt"), LeaseExpiresTS: flywheel.Null[float64](), Metadata: json.RawMessage(`{"attempt":1}`),
	}
	tests := []struct {
		name string
		def  flywheel.Def
		v    any
		want string // exact encoding, when given
	}{
		{"minimal call", flywheel.DefToolCallRecord, flywheel.ToolCallRecord{Name: "x", Outcome: flywheel.OutcomeUnknown},
			`{"name":"x","outcome":"unknown","status_code":null}`},
		{"maximal call", flywheel.DefToolCallRecord, call, ""},
		{"minimal turn", flywheel.DefProductionTurn, flywheel.ProductionTurn{TurnID: "t"},
			`{"turn_id":"t","input_text":null,"final_text":null,"tool_calls":null,"tool_calls_omitted_count":0}`},
		{"maximal turn", flywheel.DefProductionTurn, turn, ""},
		{"batch", flywheel.DefProductionTurnBatch, flywheel.ProductionTurnBatch{AgentID: "bot", Turns: []flywheel.ProductionTurn{turn, {TurnID: "t2", ToolCalls: []flywheel.ToolCallRecord{}}}}, ""},
		{"minimal exclusion", flywheel.DefExclusion, flywheel.Exclusion{Reason: flywheel.ExclusionCapacity}, `{"reason":"capacity"}`},
		{"maximal exclusion", flywheel.DefExclusion, flywheel.Exclusion{Reason: flywheel.ExclusionCancelled, Detail: flywheel.Some("admin")}, ""},
		{"minimal request", flywheel.DefRolloutRequest, flywheel.RolloutRequest{RolloutID: "r", LLMURL: "https://x/v1", APIKey: "k"},
			`{"rollout_id":"r","turn_input":"","llm_url":"https://x/v1","api_key":"k","artifacts_dir":"","deadline_ts":0}`},
		{"maximal request", flywheel.DefRolloutRequest, req, ""},
		{"zero output", flywheel.DefRolloutOutput, flywheel.RolloutOutput{}, `{"final_text":""}`},
		{"maximal output", flywheel.DefRolloutOutput, flywheel.RolloutOutput{
			FinalText:             "4",
			ToolCalls:             flywheel.Some([]flywheel.ToolCallRecord{call}),
			ToolCallsOmittedCount: ptr(0),
			LLMCallCount:          flywheel.Some(2),
			Artifacts: map[string]flywheel.Artifact{
				"answer.txt": flywheel.InlineArtifactOf("4"),
				"big.bin":    flywheel.DigestArtifact("skipped:too_large:1048576"),
			},
			Reward:           flywheel.Some(0.5),
			Success:          flywheel.Some(true),
			Exclusion:        flywheel.Some(flywheel.Exclusion{Reason: flywheel.ExclusionFlywheelCrash}),
			Events:           []json.RawMessage{json.RawMessage(`{"type":"start"}`)},
			Timing:           json.RawMessage(`{"wall_ms":3}`),
			AgentFingerprint: json.RawMessage(`null`),
		}, ""},
		{"zero claim", flywheel.DefClaimResponse, flywheel.ClaimResponse{}, `{"rollouts":[],"poll_after_ms":0}`},
		{"claim", flywheel.DefClaimResponse, flywheel.ClaimResponse{Rollouts: []flywheel.RolloutRequest{req}, PollAfterMS: 1000}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := flywheel.Marshal(tt.def, tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != "" && string(b) != tt.want {
				t.Errorf("encoded %s\n   want %s", b, tt.want)
			}
		})
	}
}
