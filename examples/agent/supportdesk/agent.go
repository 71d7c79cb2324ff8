package supportdesk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/gyrehq/gyre/flywheel"
)

const systemPrompt = `You are the support desk of an online shop. Use the tools to look up,
cancel or refund orders; never guess an order's status. Cancel only orders
that have not shipped; refund only delivered orders. Answer the customer in
one or two sentences.`

// agent is one support-desk conversation turn.
type agent struct {
	llm      openai.Client
	model    string
	orders   *Orders
	rec      *flywheel.Recorder
	maxSteps int
	// transcript is what the agent saw and did, written as an artifact.
	transcript []map[string]any
}

// newAgent builds the agent. The OpenAI client reads OPENAI_BASE_URL and
// OPENAI_API_KEY itself: under gyre worker they are the rollout's own
// gateway URL and key. Its transport counts completions for llm_call_count.
func newAgent(model string, rec *flywheel.Recorder, opts ...option.RequestOption) *agent {
	opts = append([]option.RequestOption{option.WithHTTPClient(&http.Client{Transport: rec.LLMTransport(nil)})}, opts...)
	return &agent{llm: openai.NewClient(opts...), model: model, orders: NewOrders(), rec: rec, maxSteps: 8}
}

// errTooManySteps ends a turn whose model keeps calling tools.
var errTooManySteps = errors.New("the model kept calling tools")

// run answers one customer message, calling tools as the model asks.
func (a *agent) run(ctx context.Context, input string) (string, error) {
	params := openai.ChatCompletionNewParams{
		Model:    a.model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(systemPrompt), openai.UserMessage(input)},
		Tools:    toolParams(),
	}
	a.note("user", input)
	for range a.maxSteps {
		completion, err := a.llm.Chat.Completions.New(ctx, params)
		if err != nil {
			return "", fmt.Errorf("chat completion: %w", err)
		}
		if len(completion.Choices) == 0 {
			return "", errors.New("chat completion without choices")
		}
		msg := completion.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			a.note("assistant", msg.Content)
			return msg.Content, nil
		}
		params.Messages = append(params.Messages, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			content := a.call(ctx, tc.ID, tc.Function.Name, tc.Function.Arguments)
			params.Messages = append(params.Messages, openai.ToolMessage(content, tc.ID))
		}
	}
	return "", errTooManySteps
}

// call runs one tool call and records it. The tools report their own
// verdict, so the outcome is observed, never guessed: ok, failed, or
// unknown when the tool itself cannot tell (a refund the payment provider
// did not confirm: it may have been issued). A backend that cannot be
// reached fails the call and excludes the turn (substrate_unavailable):
// the trouble is the infrastructure's, not the model's, so the turn is
// neither a model failure nor something to train on. The order system is
// in memory, so no HTTP status exists to report.
func (a *agent) call(ctx context.Context, id, name, arguments string) string {
	_, rc := a.rec.Start(ctx, flywheel.ToolCallStart{Name: name, ToolCallID: id, Arguments: arguments})
	res := runTool(a.orders, name, arguments)
	if res.EntityID != "" {
		rc.EntityID(flywheel.EntityKeyID, res.EntityID)
	}
	switch {
	case errors.Is(res.Err, errPaymentTimeout):
		rc.Finish(flywheel.OutcomeUnknown, res.Output, res.Err)
	case errors.Is(res.Err, errBackendUnavailable):
		rc.Failed(res.Err, res.Output)
		a.rec.Exclude(flywheel.ExclusionSubstrateUnavailable, res.Err.Error())
	case res.Err != nil:
		rc.Failed(res.Err, res.Output)
	default:
		rc.OK(res.Output)
	}
	b, _ := json.Marshal(res.Output)
	a.transcript = append(a.transcript, map[string]any{"tool": name, "tool_call_id": id, "arguments": json.RawMessage(validJSON(arguments)),
		"result": res.Output, "ok": res.Err == nil})
	return string(b)
}

func (a *agent) note(role, content string) {
	a.transcript = append(a.transcript, map[string]any{"role": role, "content": content})
}

func validJSON(s string) string {
	if json.Valid([]byte(s)) {
		return s
	}
	b, _ := json.Marshal(s)
	return string(b)
}
