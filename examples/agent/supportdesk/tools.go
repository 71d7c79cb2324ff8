package supportdesk

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

// toolResult is what a tool hands back: the JSON the model sees, the
// identity a write produced (for entity_ids) and the tool's own verdict.
type toolResult struct {
	Output   map[string]any
	EntityID string
	Err      error
}

// tool is one function the model may call.
type tool struct {
	def shared.FunctionDefinitionParam
	run func(o *Orders, args map[string]any) toolResult
}

func orderIDParam() map[string]any {
	return map[string]any{"type": "string", "description": "The order id, e.g. A1."}
}

// tools are the support desk's tools over the order system.
var tools = map[string]tool{
	"lookup_order": {
		def: shared.FunctionDefinitionParam{
			Name:        "lookup_order",
			Description: openai.String("Look up an order by id: item, total and status."),
			Parameters: shared.FunctionParameters{
				"type": "object", "properties": map[string]any{"order_id": orderIDParam()},
				"required": []string{"order_id"}, "additionalProperties": false,
			},
		},
		run: func(o *Orders, args map[string]any) toolResult {
			ord, err := o.Lookup(str(args, "order_id"))
			return result(ord, "", err)
		},
	},
	"cancel_order": {
		def: shared.FunctionDefinitionParam{
			Name:        "cancel_order",
			Description: openai.String("Cancel an order that has not shipped yet."),
			Parameters: shared.FunctionParameters{
				"type": "object", "properties": map[string]any{"order_id": orderIDParam()},
				"required": []string{"order_id"}, "additionalProperties": false,
			},
		},
		run: func(o *Orders, args map[string]any) toolResult {
			ord, err := o.Cancel(str(args, "order_id"))
			return result(ord, "", err)
		},
	},
	"issue_refund": {
		def: shared.FunctionDefinitionParam{
			Name:        "issue_refund",
			Description: openai.String("Refund a delivered order. Returns the refund id."),
			Parameters: shared.FunctionParameters{
				"type": "object",
				"properties": map[string]any{
					"order_id": orderIDParam(),
					"reason":   map[string]any{"type": "string", "description": "Why the customer wants a refund."},
				},
				"required": []string{"order_id", "reason"}, "additionalProperties": false,
			},
		},
		run: func(o *Orders, args map[string]any) toolResult {
			ord, err := o.Refund(str(args, "order_id"), str(args, "reason"))
			return result(ord, ord.RefundID, err)
		},
	},
}

func toolParams() []openai.ChatCompletionToolUnionParam {
	var out []openai.ChatCompletionToolUnionParam
	for _, name := range []string{"lookup_order", "cancel_order", "issue_refund"} {
		out = append(out, openai.ChatCompletionFunctionTool(tools[name].def))
	}
	return out
}

func str(args map[string]any, key string) string {
	s, _ := args[key].(string)
	return s
}

// result is a tool's result. The model sees the error of a failed call;
// infrastructure trouble is also said in words a model (and the scripted
// demo model) can act on: "unavailable" (nothing was read or changed,
// try later) and "refund": "unconfirmed" (sent, not confirmed).
func result(ord Order, entity string, err error) toolResult {
	if err != nil {
		out := map[string]any{"error": err.Error()}
		switch {
		case errors.Is(err, errBackendUnavailable):
			out["unavailable"] = true
		case errors.Is(err, errPaymentTimeout):
			out["refund"] = "unconfirmed"
		}
		return toolResult{Output: out, Err: err}
	}
	b, _ := json.Marshal(ord)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return toolResult{Output: m, EntityID: entity}
}

// runTool executes a call the model asked for. Arguments that do not
// decode are a failure the model can see and correct.
func runTool(o *Orders, name, arguments string) toolResult {
	t, ok := tools[name]
	if !ok {
		err := fmt.Errorf("unknown tool %q", name)
		return toolResult{Output: map[string]any{"error": err.Error()}, Err: err}
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		err = fmt.Errorf("arguments are not a JSON object: %w", err)
		return toolResult{Output: map[string]any{"error": err.Error()}, Err: err}
	}
	return t.run(o, args)
}
