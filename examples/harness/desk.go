package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gyrehq/gyre/harnesskit"
)

// maxTurns bounds the agent's model turns in one run.
const maxTurns = 8

// maxInlineFile bounds a text fixture shown to the model in full.
const maxInlineFile = 8 << 10

const systemPrompt = `You are the support desk of a small online shop.
Use lookup_order to find an order before you say anything about it.
Refund policy: a delivered order that has not been refunded yet is refunded in full with issue_refund
when the customer asks for it or reports it arrived damaged; orders still processing or shipped are
not refunded. Never refund an order twice. Be brief and polite, and quote the amount refunded.`

// tools are the agent's tools, as offered to the model and written into
// every trajectory.
var tools = []harnesskit.ToolDefinition{
	{
		Name:        "lookup_order",
		Description: "Look up an order by its number: customer, item, amount, status and whether it was refunded.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string","description":"The order number, e.g. 1042."}},"required":["order_id"],"additionalProperties":false}`),
	},
	{
		Name:        "issue_refund",
		Description: "Refund a delivered order in full to the original payment method. Writes a receipt.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"reason":{"type":"string","description":"Why the order is refunded, in a few words."}},"required":["order_id","reason"],"additionalProperties":false}`),
	},
}

// message is one message of the conversation a policy sees.
type message struct {
	role       string // system, user, assistant, tool
	content    string
	toolCalls  []toolCall // assistant
	toolCallID string     // tool
}

// toolCall is one tool call a policy asks for.
type toolCall struct {
	id, name string
	args     json.RawMessage
}

// turn is one decision of a policy: text, tool calls, or both.
type turn struct {
	text, reasoning string
	calls           []toolCall
	model           string              // the model that decided, when one did
	usage           *harnesskit.Metrics // token usage, when a model decided
	deterministic   bool                // decided by rules, not a model
}

// policy decides the agent's next turn from the conversation so far.
type policy interface {
	next(ctx context.Context, model string, history []message) (turn, error)
}

// desk is the support-desk agent: a tool loop around a policy over a fresh
// order book per run.
type desk struct {
	policy policy
	now    func() time.Time
}

// outcome is the run's structured output.
type outcome struct {
	OrderID  string `json:"order_id,omitempty"`
	Action   string `json:"action"` // refunded, answered
	RefundID string `json:"refund_id,omitempty"`
	Amount   string `json:"amount,omitempty"`
	Turns    int    `json:"turns"`
}

// input is the run input (see inputSchema).
type input struct {
	Question       string `json:"question"`
	Customer       string `json:"customer"`
	ConversationID string `json:"conversation_id"`
}

// Run answers one support request.
func (d *desk) Run(ctx context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
	var in input
	if err := run.DecodeInput(&in); err != nil {
		return harnesskit.Result{}, err
	}
	run.SetUserID(in.Customer)
	run.SetSessionID(in.ConversationID)
	user := userMessage(in.Question, run.Files())
	if err := run.AddSystemMessage(systemPrompt); err != nil {
		return harnesskit.Result{}, err
	}
	if err := run.AddUserMessage(user); err != nil {
		return harnesskit.Result{}, err
	}
	history := []message{{role: "system", content: systemPrompt}, {role: "user", content: user}}
	book := newOrderBook()
	out := outcome{Action: "answered"}
	// Ask for the run's model on every turn; the model that answers may
	// name itself more precisely, and the run reports that name.
	model := run.Model()
	for n := 1; n <= maxTurns; n++ {
		if err := ctx.Err(); err != nil {
			return harnesskit.Result{}, err
		}
		t, err := d.policy.next(ctx, model, history)
		if err != nil {
			return harnesskit.Result{}, fmt.Errorf("turn %d: %w", n, err)
		}
		if t.model != "" {
			run.SetModel(t.model)
		}
		step := harnesskit.AgentStep{Message: t.text, Reasoning: t.reasoning, Model: t.model, Metrics: t.usage}
		calls := 1
		if t.deterministic {
			calls = 0
		}
		step.LLMCallCount = &calls
		for _, c := range t.calls {
			step.ToolCalls = append(step.ToolCalls, harnesskit.ToolCall{ID: c.id, Name: c.name, Arguments: c.args})
		}
		if _, err := run.AddAgentStep(step); err != nil {
			return harnesskit.Result{}, err
		}
		history = append(history, message{role: "assistant", content: t.text, toolCalls: t.calls})
		out.Turns = n
		if len(t.calls) == 0 {
			return harnesskit.Result{Answer: t.text, Output: out}, nil
		}
		for _, c := range t.calls {
			result := d.call(run, book, c, &out)
			if err := run.AddToolResult(c.id, result); err != nil {
				return harnesskit.Result{}, err
			}
			history = append(history, message{role: "tool", content: result, toolCallID: c.id})
		}
	}
	return harnesskit.Result{}, fmt.Errorf("no answer after %d turns", maxTurns)
}

// call runs one tool and returns its result as JSON text. Tool errors are
// results the policy sees, not run failures.
func (d *desk) call(run *harnesskit.Run, book *orderBook, c toolCall, out *outcome) string {
	var args struct {
		OrderID string `json:"order_id"`
		Reason  string `json:"reason"`
	}
	if err := json.Unmarshal(c.args, &args); err != nil {
		return toJSON(map[string]string{"error": "arguments must be a JSON object"})
	}
	args.OrderID = strings.TrimPrefix(strings.TrimSpace(args.OrderID), "#")
	switch c.name {
	case "lookup_order":
		o, ok := book.orders[args.OrderID]
		if !ok {
			return toJSON(map[string]string{"error": "no order " + args.OrderID})
		}
		out.OrderID = o.ID
		return toJSON(o)
	case "issue_refund":
		o, err := book.issueRefund(args.OrderID)
		if err != nil {
			return toJSON(map[string]string{"error": err.Error()})
		}
		r := refund{RefundID: "R-" + o.ID, OrderID: o.ID, Amount: o.Amount, Receipt: "receipts/refund-" + o.ID + ".txt"}
		if err := run.WriteArtifact(r.Receipt, receipt(r, o, args.Reason, d.now()), "text/plain"); err != nil {
			run.Logger().Warn("write receipt", "error", err)
			r.Receipt = ""
		}
		*out = outcome{OrderID: o.ID, Action: "refunded", RefundID: r.RefundID, Amount: r.Amount, Turns: out.Turns}
		return toJSON(r)
	default:
		return toJSON(map[string]string{"error": "unknown tool " + c.name})
	}
}

// userMessage is the question followed by each fixture file: its name and
// context, and its text when it is short UTF-8.
func userMessage(question string, files []harnesskit.File) string {
	var b strings.Builder
	b.WriteString(question)
	for _, f := range files {
		fmt.Fprintf(&b, "\n\nAttached file %q", f.Name)
		if f.Context != "" {
			fmt.Fprintf(&b, " (%s)", f.Context)
		}
		if len(f.Data) <= maxInlineFile && utf8.Valid(f.Data) && !strings.ContainsRune(string(f.Data), 0) {
			fmt.Fprintf(&b, ":\n%s", strings.TrimSpace(string(f.Data)))
		} else {
			fmt.Fprintf(&b, ": %d bytes of binary data", len(f.Data))
		}
	}
	return b.String()
}

// errNoChoice is a model answer without a choice.
var errNoChoice = errors.New("the model returned no choice")
