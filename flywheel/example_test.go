package flywheel_test

import (
	"errors"
	"fmt"

	"github.com/gyrehq/gyre/flywheel"
)

// A body that breaks the contract yields a *ValidationError whose first
// violation is the first offending field in the JSON text: what a 422
// invalid_body answer points at.
func ExampleValidate() {
	body := []byte(`{
	  "agent_id": "support-bot",
	  "turns": [{
	    "turn_id": "t1",
	    "input_text": "Cancel my order",
	    "final_text": "Done.",
	    "tool_calls": [{"name": "cancel_order", "outcome": "unknown", "status_code": 200}],
	    "tool_calls_omitted_count": 0
	  }]
	}`)
	err := flywheel.Validate(flywheel.DefProductionTurnBatch, body)
	var ve *flywheel.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.First().Pointer)
		fmt.Println(ve.First().Message)
	}
	// Output:
	// /turns/0/tool_calls/0/status_code
	// status_code must be null when outcome is "unknown" (got integer)
}

// RolloutOutput.ToolCalls keeps the contract's three states apart: absent,
// null (not reported) and [] (observed zero calls).
func ExampleRolloutOutput_toolCalls() {
	notReported := flywheel.RolloutOutput{FinalText: "done", ToolCalls: flywheel.Null[[]flywheel.ToolCallRecord]()}
	zeroCalls := flywheel.RolloutOutput{FinalText: "done", ToolCalls: flywheel.Some([]flywheel.ToolCallRecord{})}
	absent := flywheel.RolloutOutput{FinalText: "done"}
	for _, out := range []flywheel.RolloutOutput{notReported, zeroCalls, absent} {
		b, err := flywheel.Marshal(flywheel.DefRolloutOutput, out)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(string(b))
	}
	// Output:
	// {"final_text":"done","tool_calls":null}
	// {"final_text":"done","tool_calls":[]}
	// {"final_text":"done"}
}

// A ToolCallRecord always carries status_code, as null when no status was
// observed.
func ExampleToolCallRecord() {
	b, err := flywheel.Marshal(flywheel.DefToolCallRecord, flywheel.ToolCallRecord{
		Name:    "lookup",
		Outcome: flywheel.OutcomeUnknown,
	})
	fmt.Println(string(b), err)
	// Output:
	// {"name":"lookup","outcome":"unknown","status_code":null} <nil>
}

// Path parameters are checked against the contract's grammar after
// percent-decoding.
func ExampleValidateAgentID() {
	for _, id := range []string{"support-bot", "a/b", ".."} {
		fmt.Println(id, flywheel.ValidateAgentID(id) == nil)
	}
	// Output:
	// support-bot true
	// a/b false
	// .. false
}
