package dataset

import (
	"encoding/json"
	"time"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/grade"
)

// Rollout is what the writers read of one selected rollout: its identity,
// its counted completions with their recorded bodies, the verdict set
// frozen when the dataset was created, and the training-grade decision
// that came with it. The agent's advisory reward and success have no field
// here on purpose: nothing a writer reads can carry them into a row.
type Rollout struct {
	ID      string
	TaskID  string
	GroupID string
	BatchID string
	// Policy is the gateway policy the rollout ran on, "" when none.
	Policy string
	// Suite and SuiteVersion name the suite version whose graders gave
	// Verdicts; both "" when the task has none.
	Suite        string
	SuiteVersion string
	// Completions are the rollout's counted completions in sequence order.
	Completions []Completion
	// Verdicts is the verdict set frozen at creation; the reward and its
	// components come from it alone.
	Verdicts grade.VerdictSet
	// TrainingGrade is the frozen decision: nil while the rollout was not
	// yet graded or reconciled when the dataset was created (pending).
	TrainingGrade *bool
	// NotTrainingGradeReasons are the stable reason codes when
	// TrainingGrade is false.
	NotTrainingGradeReasons []string
	// Unavailable, when set, is the reason the source could not read the
	// rollout's recorded traffic (say, "bodies_missing" when a blob was
	// deleted); the rollout is counted under it and not exported.
	Unavailable string
	// NoChatForm, when set, is why the rollout's traffic has no chat form
	// (protocol_item_not_exportable:<type>, SPEC §6.1): a Responses or
	// Messages item that chat cannot carry. The chat formats (sft, dpo,
	// atif) count the rollout under it; rl keeps its native turns.
	NoChatForm string
	// ServerFingerprint and AgentFingerprint are stored side by side and
	// never merged (SPEC §6.3); nil when unknown.
	ServerFingerprint json.RawMessage
	AgentFingerprint  json.RawMessage
	// ToolCalls are the executed tool calls the agent reported, used by
	// the atif format to join observations; nil when not reported.
	ToolCalls []flywheel.ToolCallRecord
	// AgentName and AgentVersion describe the agent in an ATIF document;
	// when empty they are read from AgentFingerprint.
	AgentName    string
	AgentVersion string
}

// Completion is one counted completion of a rollout, rebuilt from the
// gateway's records and the content-addressed message blobs (SPEC §6.2).
type Completion struct {
	// Seq is the completion's sequence number within the rollout.
	Seq int
	// Protocol is the wire protocol the call was made on: chat,
	// responses or messages.
	Protocol string
	// Model is the model the completion ran on.
	Model string
	// Request is what the agent sent, in chat form (a Responses or
	// Messages call converted; empty when the rollout has NoChatForm).
	Request Request
	// Response is the response's assistant message (its first choice's
	// "message"), as recorded or converted.
	Response json.RawMessage
	// Native is a Responses or Messages call in its own protocol's terms,
	// which rl rows keep; nil for chat.
	Native *Native
	// FinishReason is the first choice's finish_reason, "" when none.
	FinishReason string
	// Usage is the recorded usage object, nil when none.
	Usage json.RawMessage
	// Sampling holds the sampling params after overrides, as the server
	// fingerprint records them (a JSON object), nil when unknown.
	Sampling json.RawMessage
	// PromptTokenIDs, CompletionTokenIDs and Logprobs are captured with a
	// policy's capture_tokens; nil otherwise.
	PromptTokenIDs     []int
	CompletionTokenIDs []int
	Logprobs           []float64
	// ReceivedAt and DoneAt are the gateway's timings.
	ReceivedAt time.Time
	DoneAt     time.Time
}

// Native is a turn in its own protocol's terms (gateway.NativeTurn).
type Native struct {
	// Items are the prompt's items (Responses) or messages (Messages),
	// the instructions or system prompt first as a system entry.
	Items []json.RawMessage
	// Tools is the request's tools array as sent, nil when absent.
	Tools json.RawMessage
	// Response is Responses' output item array or Messages' message.
	Response json.RawMessage
}

// Request is a chat request split the way the gateway stores it: its
// messages, its tools, and the remaining members.
type Request struct {
	// Messages are the request's messages, each one JSON object.
	Messages []json.RawMessage
	// Tools is the request's "tools" array, nil when absent.
	Tools json.RawMessage
	// Rest is a JSON object of the remaining members (model, sampling,
	// parallel_tool_calls…), nil when none.
	Rest json.RawMessage
}

// Reward is the rollout's reward: the weighted mean score of the frozen
// set's non-abstaining, non-optional verdicts, nil when there is none.
func (r *Rollout) Reward() *float64 { return r.Verdicts.Reward() }

// RewardComponent is one verdict's part in the reward.
type RewardComponent struct {
	Grader string  `json:"grader"`
	Score  float64 `json:"score"`
	Weight float64 `json:"weight"`
}

// RewardComponents lists, in suite order, each verdict that counts in the
// reward with its score and weight; empty (not nil) when none counts.
func (r *Rollout) RewardComponents() []RewardComponent {
	out := []RewardComponent{}
	for i, v := range r.Verdicts.Verdicts {
		var f grade.Flags
		if i < len(r.Verdicts.Graders) {
			f = r.Verdicts.Graders[i].Flags
		}
		s := grade.Score(v)
		if f.Optional || s == nil {
			continue
		}
		w := f.Weight
		if w <= 0 {
			w = 1
		}
		out = append(out, RewardComponent{Grader: v.Grader, Score: *s, Weight: w})
	}
	return out
}
