// Package desk is the example support-desk agent served over Harness API v1
// with harnesskit: a tool loop with two tools (lookup_order, issue_refund)
// over an in-memory order system. A Policy decides each turn: the offline,
// deterministic rules (the default) or a model (see package llm).
//
// New returns the harness as a *harnesskit.Server, an http.Handler to
// mount at the root of a listener. The command in examples/harness serves
// it on an address; gyre demo serves it in-process.
package desk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gyrehq/gyre/harnesskit"
)

// Agent is the harness's name for itself (capabilities.agent).
const Agent = "support-desk"

// Version is the agent's version in every trajectory.
const Version = "1.0.0"

// RulesModel is the model runs report under the rule-based policy.
const RulesModel = "rules-v1"

// InputSchema is the run input the desk accepts (capabilities.input_schema).
const InputSchema = `{
  "type": "object",
  "required": ["question"],
  "properties": {
    "question": {"type": "string", "minLength": 1, "description": "The customer's message."},
    "customer": {"type": "string", "description": "The customer's id, listed as the run's user_id."},
    "conversation_id": {"type": "string", "description": "Groups the runs of one conversation in GET /runs."}
  }
}`

// CheckInput is the input "gyre harness check" sends
// (capabilities.check_input).
const CheckInput = `{"question":"Order 1042 arrived broken. Can I get a refund?"}`

// maxTurns bounds the agent's turns in one run.
const maxTurns = 8

// maxInlineFile bounds a text fixture shown to the policy in full.
const maxInlineFile = 8 << 10

// SystemPrompt is the first message of every conversation.
const SystemPrompt = `You are the support desk of a small online shop.
Use lookup_order to find an order before you say anything about it.
Refund policy: a delivered order that has not been refunded yet is refunded in full with issue_refund
when the customer asks for it or reports it arrived damaged; orders still processing or shipped are
not refunded. Never refund an order twice. Be brief and polite, and quote the amount refunded.`

// Tools are the agent's tools, as offered to a model and written into
// every trajectory.
var Tools = []harnesskit.ToolDefinition{
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

// Message is one message of the conversation a Policy sees.
type Message struct {
	// Role is system, user, assistant or tool.
	Role    string
	Content string
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []ToolCall
	// ToolCallID is the call a tool message answers.
	ToolCallID string
}

// ToolCall is one tool call a Policy asks for.
type ToolCall struct {
	ID, Name string
	// Args is the arguments object.
	Args json.RawMessage
}

// Turn is one decision of a Policy: text, tool calls, or both. A turn
// without calls ends the run with its text as the answer.
type Turn struct {
	Text, Reasoning string
	Calls           []ToolCall
	// Model is the model that decided, when one did.
	Model string
	// Usage is the token usage of the turn, when a model decided.
	Usage *harnesskit.Metrics
	// Deterministic marks a turn decided by rules, not a model (ATIF
	// llm_call_count 0).
	Deterministic bool
}

// Policy decides the agent's next turn from the conversation so far.
// model is the run's model (the request's, with a model override).
type Policy interface {
	Next(ctx context.Context, model string, history []Message) (Turn, error)
}

// Config configures the desk harness.
type Config struct {
	// Policy, when set, is a model policy (see package llm): the desk then
	// declares accepts.model_override and provides.token_usage, and runs
	// execute on Model unless a request names another. Nil: the offline
	// rule-based policy, whose runs report RulesModel.
	Policy Policy
	// Model is the default model of a model policy. Required with Policy.
	Model string
	// MaxConcurrentRuns is the worker pool size
	// (limits.max_concurrent_runs); 0 is harnesskit's default.
	MaxConcurrentRuns int
	// APIKey, when set, is required in the x-api-key header of every
	// request.
	APIKey string
	// WorkspaceDir is where per-run workspaces are created; empty: the
	// system temp dir.
	WorkspaceDir string
	// Logger receives the kit's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock of receipts and trajectories; nil is time.Now.
	Now func() time.Time
}

// New returns the desk harness for c. Its workers start at once: call
// Close (or Shutdown) when done.
func New(c Config) (*harnesskit.Server, error) {
	opts, err := Options(c)
	if err != nil {
		return nil, err
	}
	policy := c.Policy
	if policy == nil {
		policy = Rules{}
	}
	return harnesskit.New(&desk{policy: policy, now: opts.Now}, opts)
}

// Options returns the harnesskit options New serves the desk with: its
// capabilities (trajectory, tool calls, artifacts, workspace, run listing,
// files and file urls, stop; model override and token usage with a model
// policy), InputSchema and CheckInput.
func Options(c Config) (harnesskit.Options, error) {
	now := c.Now
	if now == nil {
		now = time.Now
	}
	opts := harnesskit.Options{
		Agent:             Agent,
		AgentVersion:      Version,
		Model:             RulesModel,
		InputSchema:       json.RawMessage(InputSchema),
		CheckInput:        json.RawMessage(CheckInput),
		ToolCalls:         true,
		Artifacts:         true,
		ToolDefinitions:   Tools,
		MaxConcurrentRuns: c.MaxConcurrentRuns,
		APIKey:            c.APIKey,
		WorkspaceDir:      c.WorkspaceDir,
		Logger:            c.Logger,
		Now:               now,
	}
	if c.Policy != nil {
		if c.Model == "" {
			return opts, errors.New("desk: a model policy needs a default model")
		}
		opts.Model = c.Model
		opts.ModelOverride = true
		opts.TokenUsage = true
	}
	return opts, nil
}

// desk is the support-desk agent: a tool loop around a policy over a fresh
// order book per run.
type desk struct {
	policy Policy
	now    func() time.Time
}

// Outcome is a run's structured output (RunStatus.output).
type Outcome struct {
	// OrderID is the order the run was about, once it was looked up.
	OrderID string `json:"order_id,omitempty"`
	// Action is "refunded" or "answered".
	Action   string `json:"action"`
	RefundID string `json:"refund_id,omitempty"`
	Amount   string `json:"amount,omitempty"`
	// Turns counts the policy's turns.
	Turns int `json:"turns"`
}

// input is the run input (see InputSchema).
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
	if err := run.AddSystemMessage(SystemPrompt); err != nil {
		return harnesskit.Result{}, err
	}
	if err := run.AddUserMessage(user); err != nil {
		return harnesskit.Result{}, err
	}
	history := []Message{{Role: "system", Content: SystemPrompt}, {Role: "user", Content: user}}
	book := newOrderBook()
	out := Outcome{Action: "answered"}
	// Ask for the run's model on every turn; the model that answers may
	// name itself more precisely, and the run reports that name.
	model := run.Model()
	for n := 1; n <= maxTurns; n++ {
		if err := ctx.Err(); err != nil {
			return harnesskit.Result{}, err
		}
		t, err := d.policy.Next(ctx, model, history)
		if err != nil {
			return harnesskit.Result{}, fmt.Errorf("turn %d: %w", n, err)
		}
		if t.Model != "" {
			run.SetModel(t.Model)
		}
		step := harnesskit.AgentStep{Message: t.Text, Reasoning: t.Reasoning, Model: t.Model, Metrics: t.Usage}
		calls := 1
		if t.Deterministic {
			calls = 0
		}
		step.LLMCallCount = &calls
		for _, c := range t.Calls {
			step.ToolCalls = append(step.ToolCalls, harnesskit.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Args})
		}
		if _, err := run.AddAgentStep(step); err != nil {
			return harnesskit.Result{}, err
		}
		history = append(history, Message{Role: "assistant", Content: t.Text, ToolCalls: t.Calls})
		out.Turns = n
		if len(t.Calls) == 0 {
			return harnesskit.Result{Answer: t.Text, Output: out}, nil
		}
		for _, c := range t.Calls {
			result := d.call(run, book, c, &out)
			if err := run.AddToolResult(c.ID, result); err != nil {
				return harnesskit.Result{}, err
			}
			history = append(history, Message{Role: "tool", Content: result, ToolCallID: c.ID})
		}
	}
	return harnesskit.Result{}, fmt.Errorf("no answer after %d turns", maxTurns)
}

// call runs one tool and returns its result as JSON text. Tool errors are
// results the policy sees, not run failures.
func (d *desk) call(run *harnesskit.Run, book *orderBook, c ToolCall, out *Outcome) string {
	var args struct {
		OrderID string `json:"order_id"`
		Reason  string `json:"reason"`
	}
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return toJSON(map[string]string{"error": "arguments must be a JSON object"})
	}
	args.OrderID = strings.TrimPrefix(strings.TrimSpace(args.OrderID), "#")
	switch c.Name {
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
		*out = Outcome{OrderID: o.ID, Action: "refunded", RefundID: r.RefundID, Amount: r.Amount, Turns: out.Turns}
		return toJSON(r)
	default:
		return toJSON(map[string]string{"error": "unknown tool " + c.Name})
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
