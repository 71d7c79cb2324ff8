package flywheel

import (
	"encoding/json"
	"slices"
)

// This file holds one hand-written Go type per $defs entry of the contract.
// Field shapes follow the member's JSON Schema exactly, so that the wire keeps
// every distinction the contract draws:
//
//	required, non-nullable        T                    `json:"name"`
//	required, nullable            *T or []T            `json:"name"`            (nil encodes as null)
//	optional, non-nullable        *T                   `json:"name,omitempty"`  (nil is absent)
//	                              []T, map[K]V         `json:"name,omitzero"`   (nil is absent; empty is [] or {})
//	optional, nullable            Optional[T]          `json:"name,omitzero"`   (absent, null or a value)
//	any shape, kept byte for byte json.RawMessage      `json:"name,omitempty"`  (nil is absent; "null" is null)
//
// TestTypesAgreeWithSchema checks every field against the schema in both
// directions, so drift fails the build.

// Outcome is a tool call's verdict as the agent observed it. There is no
// default: OutcomeUnknown is a first-class, legal value and the honest answer
// whenever the framework exposed no real verdict; it must never be rounded up
// to OutcomeOK.
type Outcome string

// The outcomes of flywheel/1.
const (
	OutcomeOK      Outcome = "ok"
	OutcomeFailed  Outcome = "failed"
	OutcomeUnknown Outcome = "unknown"
)

// Outcomes lists every Outcome, in the contract's order.
var Outcomes = []Outcome{OutcomeOK, OutcomeFailed, OutcomeUnknown}

// Valid reports whether o is one of Outcomes.
func (o Outcome) Valid() bool { return slices.Contains(Outcomes, o) }

// Landed maps o to the server-side tri-state on which outcome-dependent
// verifiers abstain: ok is true, failed is false, unknown (or anything else)
// is nil.
func (o Outcome) Landed() *bool {
	var b bool
	switch o {
	case OutcomeOK:
		b = true
	case OutcomeFailed:
		b = false
	default:
		return nil
	}
	return &b
}

// EntityKey names the response field a write's identity came from. Only
// high-entropy fields are allowed: a low-entropy value that another entity
// shares by coincidence would identify the wrong resource.
type EntityKey string

// The entity id keys of flywheel/1.
const (
	EntityKeyID   EntityKey = "id"
	EntityKeyKey  EntityKey = "key"
	EntityKeyUUID EntityKey = "uuid"
	EntityKeySID  EntityKey = "sid"
	EntityKeyGID  EntityKey = "gid"
)

// EntityKeys lists every EntityKey, in the contract's order.
var EntityKeys = []EntityKey{EntityKeyID, EntityKeyKey, EntityKeyUUID, EntityKeySID, EntityKeyGID}

// Valid reports whether k is one of EntityKeys.
func (k EntityKey) Valid() bool { return slices.Contains(EntityKeys, k) }

// ToolCallRecord is one tool call the agent executed (flywheel-authored).
type ToolCallRecord struct {
	// Name is the tool's name; never empty.
	Name string `json:"name"`
	// Arguments is the call's argument object, kept as sent.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Outcome is required and has no default; see Outcome.
	Outcome Outcome `json:"outcome"`
	// StatusCode is the HTTP status observed on the wire (100–599), or nil
	// for null. The key is always sent. It must be nil when Outcome is
	// OutcomeUnknown: a status may confirm or contradict an observed outcome,
	// never manufacture one.
	StatusCode *int `json:"status_code"`
	// Output is the tool result, any JSON value (null included), kept as
	// sent. It is scrubbed of machine-readable status when Outcome is
	// OutcomeUnknown.
	Output json.RawMessage `json:"output,omitempty"`
	// Error is the call's error message, if any.
	Error Optional[string] `json:"error,omitzero"`
	// ErrorClass is the error's class or type name, if any.
	ErrorClass Optional[string] `json:"error_class,omitzero"`
	// LatencyMS is the call's duration in milliseconds (≥ 0).
	LatencyMS Optional[float64] `json:"latency_ms,omitzero"`
	// AgentName is which agent of a multi-agent system made the call. Null
	// means unattributed, which is not a claim that one agent made everything.
	AgentName Optional[string] `json:"agent_name,omitzero"`
	// ToolCallID is the id the model assigned to the call, the join key
	// that attributes it to the completion that emitted it. Null or absent
	// means the framework exposed no id: the call still counts.
	ToolCallID Optional[string] `json:"tool_call_id,omitzero"`
	// EntityIDs is the identity the write produced, filed under the field it
	// came from. Absent or empty means no identity evidence: an abstention,
	// never a failure. Values are never empty.
	EntityIDs map[EntityKey]string `json:"entity_ids,omitzero"`
}

// UnmarshalJSON decodes r, accepting any integral number for StatusCode.
func (r *ToolCallRecord) UnmarshalJSON(b []byte) error {
	type plain ToolCallRecord
	aux := struct {
		*plain
		StatusCode *jsonInt `json:"status_code"`
	}{plain: (*plain)(r), StatusCode: (*jsonInt)(r.StatusCode)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	r.StatusCode = (*int)(aux.StatusCode)
	return nil
}

// ProductionTurn is one customer production turn captured by attach():
// turn-native evidence, never a training row.
type ProductionTurn struct {
	// TurnID is the caller's exact turn id: the shared production identifier
	// grammar (1–255 characters, no leading or trailing whitespace, no C0 or
	// C1 controls) and one storage-safe path segment (no slash, no
	// backslash, not "." or "..").
	TurnID string `json:"turn_id"`
	// TaskID is an optional opaque task, case or work-item id: correlation
	// evidence only, never a success label, hint, policy identity or
	// permission to train.
	TaskID *string `json:"task_id,omitempty"`
	// ConversationID is an optional opaque correlation id (shared production
	// identifier grammar).
	ConversationID *string `json:"conversation_id,omitempty"`
	// TurnIndex is the turn's position in its conversation (≥ 0).
	TurnIndex *int `json:"turn_index,omitempty"`
	// InputText is the turn's input, or nil for null. Always sent.
	InputText *string `json:"input_text"`
	// FinalText is the turn's final answer, or nil for null. Always sent.
	FinalText *string `json:"final_text"`
	// ToolCalls is always sent: nil encodes as null, which means not
	// reported; an empty non-nil slice encodes as [], which asserts that
	// zero calls were observed.
	ToolCalls []ToolCallRecord `json:"tool_calls"`
	// ToolCallsOmittedCount counts executed calls deliberately not reported
	// (≥ 0). Always sent.
	ToolCallsOmittedCount int `json:"tool_calls_omitted_count"`
	// AgentFingerprint is the customer-declared scaffold identity object,
	// kept as sent.
	AgentFingerprint json.RawMessage `json:"agent_fingerprint,omitempty"`
	// OccurredAt is the customer's RFC 3339 claim of when the turn happened,
	// kept as sent; receipt and retention clocks are the control plane's.
	OccurredAt *string `json:"occurred_at,omitempty"`
}

// UnmarshalJSON decodes t, accepting any integral number for the integer
// members.
func (t *ProductionTurn) UnmarshalJSON(b []byte) error {
	type plain ProductionTurn
	aux := struct {
		*plain
		TurnIndex             *jsonInt `json:"turn_index"`
		ToolCallsOmittedCount *jsonInt `json:"tool_calls_omitted_count"`
	}{
		plain:                 (*plain)(t),
		TurnIndex:             (*jsonInt)(t.TurnIndex),
		ToolCallsOmittedCount: (*jsonInt)(&t.ToolCallsOmittedCount),
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	t.TurnIndex = (*int)(aux.TurnIndex)
	return nil
}

// ProductionTurnBatch is the body of POST /turns.
type ProductionTurnBatch struct {
	// AgentID is the customer's opaque agent id. It is also a URL path
	// segment, so besides the shared identifier grammar it has no slash or
	// backslash and is not "." or "..".
	AgentID string `json:"agent_id"`
	// Turns holds 1 to 64 turns. A nil slice encodes as [] (never null).
	Turns []ProductionTurn `json:"turns"`
}

// MarshalJSON encodes b; a nil Turns encodes as [].
func (b ProductionTurnBatch) MarshalJSON() ([]byte, error) {
	type plain ProductionTurnBatch
	p := plain(b)
	if p.Turns == nil {
		p.Turns = []ProductionTurn{}
	}
	return marshal(p)
}

// ExclusionReason is why a rollout must not be trained on.
type ExclusionReason string

// The exclusion reasons of flywheel/1.
const (
	ExclusionFlywheelCrash        ExclusionReason = "flywheel_crash"
	ExclusionSubstrateUnavailable ExclusionReason = "substrate_unavailable"
	ExclusionCredentialExpired    ExclusionReason = "credential_expired"
	ExclusionDeadlineExceeded     ExclusionReason = "deadline_exceeded"
	ExclusionEntrypointError      ExclusionReason = "entrypoint_error"
	ExclusionAgentExitNonzero     ExclusionReason = "agent_exit_nonzero"
	ExclusionCancelled            ExclusionReason = "cancelled"
	ExclusionCapacity             ExclusionReason = "capacity"
)

// ExclusionReasons lists every ExclusionReason, in the contract's order.
var ExclusionReasons = []ExclusionReason{
	ExclusionFlywheelCrash,
	ExclusionSubstrateUnavailable,
	ExclusionCredentialExpired,
	ExclusionDeadlineExceeded,
	ExclusionEntrypointError,
	ExclusionAgentExitNonzero,
	ExclusionCancelled,
	ExclusionCapacity,
}

// Valid reports whether r is one of ExclusionReasons.
func (r ExclusionReason) Valid() bool { return slices.Contains(ExclusionReasons, r) }

// Exclusion is the flywheel's typed "do not train on this" signal. It is not
// a low reward: a substrate fault is not a policy failure.
type Exclusion struct {
	// Reason is why the rollout is excluded.
	Reason ExclusionReason `json:"reason"`
	// Detail is an optional human explanation.
	Detail Optional[string] `json:"detail,omitzero"`
}

// RolloutRequest is what the control plane hands the agent for one rollout
// (control-plane-authored). There is deliberately no environment: the only
// configuration channel into the agent is the subprocess environment at spawn.
type RolloutRequest struct {
	// RolloutID is minted by the control plane before the agent runs
	// anything; it is the attribution unit, never a per-process session id.
	RolloutID string `json:"rollout_id"`
	// TurnInput is the input the agent runs on.
	TurnInput string `json:"turn_input"`
	// LLMURL is the rollout's own gateway base URL: unguessable,
	// single-use, expiring. A shared URL is never an acceptable fallback.
	LLMURL string `json:"llm_url"`
	// APIKey is the secret for LLMURL; never empty.
	APIKey string `json:"api_key"`
	// ArtifactsDir is where the agent writes artifacts, relative to the
	// worker's own root.
	ArtifactsDir string `json:"artifacts_dir"`
	// DeadlineTS is the rollout's authoritative deadline in epoch seconds;
	// the agent computes its timeout from it, never from its environment.
	DeadlineTS float64 `json:"deadline_ts"`
	// LeaseToken is the secret that proves this claim in heartbeats and
	// output.
	LeaseToken Optional[string] `json:"lease_token,omitzero"`
	// LeaseExpiresTS is when the lease the server granted expires (epoch
	// seconds, as of the claim). The agent reads it once and beats every
	// third of the remaining grant. Absent means the server does not report
	// its grant.
	LeaseExpiresTS Optional[float64] `json:"lease_expires_ts,omitzero"`
	// Metadata is an object of correlation data, kept as sent.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// RolloutOutput is everything a customer-run flywheel may assert about a
// rollout, and the complete set: whatever the control plane authors while
// scoring or training (a score, verdicts, a training grade) is absent by
// construction and rejected at intake.
type RolloutOutput struct {
	// FinalText is the agent's final answer.
	FinalText string `json:"final_text"`
	// ToolCalls has three states. Null (the default) means not reported;
	// Some of an empty slice means zero calls were observed, a positive
	// assertion; absent is read as null. If any executed call cannot be
	// classified, emit it with OutcomeUnknown or send Null for the whole
	// rollout: never a partial list.
	ToolCalls Optional[[]ToolCallRecord] `json:"tool_calls,omitzero"`
	// ToolCallsOmittedCount counts executed calls deliberately not reported
	// (≥ 0; absent means 0). Non-zero forbids training grade.
	ToolCallsOmittedCount *int `json:"tool_calls_omitted_count,omitempty"`
	// LLMCallCount is how many completions the agent believes it issued,
	// reconciled against the gateway's own count.
	LLMCallCount Optional[int] `json:"llm_call_count,omitzero"`
	// Artifacts maps a name to a digest or an inlined small UTF-8 file.
	Artifacts map[string]Artifact `json:"artifacts,omitzero"`
	// Reward is advisory only: recorded, never scored, never exported.
	Reward Optional[float64] `json:"reward,omitzero"`
	// Success is the agent's own view of whether it succeeded.
	Success Optional[bool] `json:"success,omitzero"`
	// Exclusion, when set, marks the rollout as not trainable.
	Exclusion Optional[Exclusion] `json:"exclusion,omitzero"`
	// Events is a list of event objects, each kept as sent.
	Events []json.RawMessage `json:"events,omitzero"`
	// Timing is an object of timing data, kept as sent.
	Timing json.RawMessage `json:"timing,omitempty"`
	// AgentFingerprint is the customer-declared half of the scaffold
	// identity (an attestation, not an authenticated identity): an object,
	// or null. The server derives the other half from the wire.
	AgentFingerprint json.RawMessage `json:"agent_fingerprint,omitempty"`
}

// OmittedCount returns ToolCallsOmittedCount, or its default 0 when absent.
func (o RolloutOutput) OmittedCount() int {
	if o.ToolCallsOmittedCount == nil {
		return 0
	}
	return *o.ToolCallsOmittedCount
}

// UnmarshalJSON decodes o, accepting any integral number for the integer
// members.
func (o *RolloutOutput) UnmarshalJSON(b []byte) error {
	type plain RolloutOutput
	aux := struct {
		*plain
		ToolCallsOmittedCount *jsonInt `json:"tool_calls_omitted_count"`
	}{plain: (*plain)(o), ToolCallsOmittedCount: (*jsonInt)(o.ToolCallsOmittedCount)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	o.ToolCallsOmittedCount = (*int)(aux.ToolCallsOmittedCount)
	return nil
}

// ClaimResponse answers a claim. An empty claim is still a ClaimResponse,
// with no rollouts and a backoff hint, never a bare 204.
type ClaimResponse struct {
	// Rollouts are the claimed rollouts. A nil slice encodes as [].
	Rollouts []RolloutRequest `json:"rollouts"`
	// PollAfterMS is the server-directed backoff before the next claim (≥ 0).
	PollAfterMS int `json:"poll_after_ms"`
}

// MarshalJSON encodes c; a nil Rollouts encodes as [].
func (c ClaimResponse) MarshalJSON() ([]byte, error) {
	type plain ClaimResponse
	p := plain(c)
	if p.Rollouts == nil {
		p.Rollouts = []RolloutRequest{}
	}
	return marshal(p)
}

// UnmarshalJSON decodes c, accepting any integral number for PollAfterMS.
func (c *ClaimResponse) UnmarshalJSON(b []byte) error {
	type plain ClaimResponse
	aux := struct {
		*plain
		PollAfterMS *jsonInt `json:"poll_after_ms"`
	}{plain: (*plain)(c), PollAfterMS: (*jsonInt)(&c.PollAfterMS)}
	return json.Unmarshal(b, &aux)
}
