package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/store"
)

// rolloutSummary is one row of GET /api/v1/rollouts.
type rolloutSummary struct {
	RolloutID       string            `json:"rollout_id"`
	AgentID         string            `json:"agent_id"`
	TaskID          string            `json:"task_id"`
	BatchID         string            `json:"batch_id"`
	GroupID         string            `json:"group_id"`
	Attempt         int               `json:"attempt"`
	State           gyre.RolloutState `json:"state"`
	WorkerID        *string           `json:"worker_id"`
	CreatedAt       time.Time         `json:"created_at"`
	ClaimedAt       *time.Time        `json:"claimed_at"`
	SubmittedAt     *time.Time        `json:"submitted_at"`
	ExclusionReason *string           `json:"exclusion_reason"`
	Reconciliation  *string           `json:"reconciliation"`
	TrainingGrade   *bool             `json:"training_grade"`
}

// rolloutDetail is GET /api/v1/rollouts/{id}: every key always present,
// null when unknown (SPEC §4.8). No secret gyre issued ever appears here.
type rolloutDetail struct {
	RolloutID               string            `json:"rollout_id"`
	AgentID                 string            `json:"agent_id"`
	TaskID                  string            `json:"task_id"`
	BatchID                 string            `json:"batch_id"`
	GroupID                 string            `json:"group_id"`
	Attempt                 int               `json:"attempt"`
	State                   gyre.RolloutState `json:"state"`
	WorkerID                *string           `json:"worker_id"`
	CreatedAt               time.Time         `json:"created_at"`
	ClaimedAt               *time.Time        `json:"claimed_at"`
	SubmittedAt             *time.Time        `json:"submitted_at"`
	DeadlineTS              *float64          `json:"deadline_ts"`
	TurnInput               string            `json:"turn_input"`
	Output                  json.RawMessage   `json:"output"`
	Exclusion               json.RawMessage   `json:"exclusion"`
	Gateway                 gatewaySummary    `json:"gateway"`
	ToolCallJoins           []toolCallJoin    `json:"tool_call_joins"`
	Reconciliation          *string           `json:"reconciliation"`
	ReconciliationReason    *string           `json:"reconciliation_reason"`
	ServerFingerprint       json.RawMessage   `json:"server_fingerprint"`
	AgentFingerprint        json.RawMessage   `json:"agent_fingerprint"`
	Verdicts                json.RawMessage   `json:"verdicts"`
	TrainingGrade           *bool             `json:"training_grade"`
	NotTrainingGradeReasons []string          `json:"not_training_grade_reasons"`
	// Reward is the current verdict set's reward (SPEC §9), null before
	// grading or when every non-optional grader abstained.
	Reward *float64 `json:"reward"`
	// VerdictHistory is every verdict set, oldest first; the last is
	// current (Verdicts).
	VerdictHistory []verdictSetView `json:"verdict_history"`
}

// gatewaySummary is what the gateway recorded for a rollout (SPEC §6.3):
// counted completions, every other recorded call, and the calls in
// sequence order.
type gatewaySummary struct {
	Completions int               `json:"completions"`
	Failed      int               `json:"failed"`
	Calls       []gatewayCallView `json:"calls"`
}

// gatewayCallView is one recorded call of a rollout.
type gatewayCallView struct {
	Seq int `json:"seq"`
	// Protocol is the call's wire protocol: chat, responses or messages.
	Protocol string  `json:"protocol"`
	Status   int     `json:"status"`
	Counted  bool    `json:"counted"`
	Reason   *string `json:"reason"`
	// LatencyMS is from receipt to the end of the answer.
	LatencyMS           *float64        `json:"latency_ms"`
	Usage               json.RawMessage `json:"usage"`
	CostUSD             *float64        `json:"cost_usd"`
	Stream              bool            `json:"stream"`
	RequestedModel      *string         `json:"requested_model"`
	Model               *string         `json:"model"`
	EmittedToolCallIDs  []string        `json:"emitted_tool_call_ids"`
	ConsumedToolCallIDs []string        `json:"consumed_tool_call_ids"`
}

// toolCallJoin places one reported tool call at the completion that
// emitted it (by tool_call_id); CompletionSeq is null when it cannot be
// joined.
type toolCallJoin = gateway.ToolCallJoin

// gatewaySummaryOf summarises a rollout's recorded calls.
func gatewaySummaryOf(calls []store.GatewayCall) gatewaySummary {
	g := gatewaySummary{Calls: make([]gatewayCallView, 0, len(calls))}
	for _, c := range calls {
		if c.Counted {
			g.Completions++
		} else {
			g.Failed++
		}
		v := gatewayCallView{Seq: c.Seq, Protocol: callProtocol(c.Protocol), Status: c.Status, Counted: c.Counted, Reason: c.Reason, Usage: rawOrNull(c.Usage),
			CostUSD: c.CostUSD, Stream: c.Stream, RequestedModel: c.RequestedModel, Model: c.Model,
			EmittedToolCallIDs: nonNilStrings(c.EmittedIDs), ConsumedToolCallIDs: nonNilStrings(c.ConsumedIDs)}
		if c.DoneAt != nil {
			ms := float64(c.DoneAt.Sub(c.ReceivedAt).Microseconds()) / 1000
			v.LatencyMS = &ms
		}
		g.Calls = append(g.Calls, v)
	}
	return g
}

func toRolloutSummary(r store.Rollout) rolloutSummary {
	return rolloutSummary{
		RolloutID: r.ID, AgentID: r.AgentID, TaskID: r.TaskID, BatchID: r.BatchID, GroupID: r.GroupID,
		Attempt: r.Attempt, State: r.State, WorkerID: r.WorkerID, CreatedAt: r.CreatedAt, ClaimedAt: r.ClaimedAt,
		SubmittedAt: r.SubmittedAt, ExclusionReason: exclusionReason(r), Reconciliation: r.Reconciliation,
		TrainingGrade: r.TrainingGrade,
	}
}

// exclusionReason is the output's exclusion reason, or "state:<name>" for
// a rollout the server ended.
func exclusionReason(r store.Rollout) *string {
	if r.State.ServerEnded() {
		s := "state:" + string(r.State)
		return &s
	}
	return r.ExclusionReason
}

// rolloutDetailOf builds the detail view of a rollout.
func (s *Server) rolloutDetailOf(ctx context.Context, r store.Rollout) (rolloutDetail, error) {
	d := rolloutDetail{
		RolloutID: r.ID, AgentID: r.AgentID, TaskID: r.TaskID, BatchID: r.BatchID, GroupID: r.GroupID,
		Attempt: r.Attempt, State: r.State, WorkerID: r.WorkerID, CreatedAt: r.CreatedAt, ClaimedAt: r.ClaimedAt,
		SubmittedAt: r.SubmittedAt, TurnInput: r.TurnInput, Output: rawOrNull(r.Output),
		Exclusion: json.RawMessage("null"), Gateway: gatewaySummary{Calls: []gatewayCallView{}},
		ToolCallJoins: []toolCallJoin{}, Reconciliation: r.Reconciliation, ReconciliationReason: r.ReconciliationReason,
		ServerFingerprint: rawOrNull(r.ServerFingerprint), AgentFingerprint: json.RawMessage("null"),
		Verdicts: json.RawMessage("null"), TrainingGrade: r.TrainingGrade,
		NotTrainingGradeReasons: nonNilStrings(r.NotTrainingGradeReasons),
		VerdictHistory:          []verdictSetView{},
	}
	if r.Deadline != nil {
		ts := float64(r.Deadline.UnixMicro()) / 1e6
		d.DeadlineTS = &ts
	}
	if r.State.ServerEnded() {
		d.Exclusion = json.RawMessage(fmt.Sprintf(`{"reason":"state:%s","detail":null}`, r.State))
	}
	calls, err := s.store.GatewayCalls(ctx, r.TenantID, r.ID)
	if err != nil {
		return d, err
	}
	d.Gateway = gatewaySummaryOf(calls)
	if len(r.ServerFingerprint) == 0 {
		// Until reconciliation stores it, the fingerprint of what is
		// recorded so far; never merged with the agent's.
		d.ServerFingerprint = rawOrNull(gateway.ServerFingerprint(calls))
	}
	if r.Output != nil {
		var out flywheel.RolloutOutput
		if err := json.Unmarshal(r.Output, &out); err != nil {
			return d, fmt.Errorf("stored output: %w", err)
		}
		if ex, ok := out.Exclusion.Get(); ok {
			b, err := json.Marshal(ex)
			if err != nil {
				return d, err
			}
			d.Exclusion = b
		}
		d.AgentFingerprint = rawOrNull(out.AgentFingerprint)
		if reported, ok := out.ToolCalls.Get(); ok {
			refs := make([]gateway.ReportedToolCall, len(reported))
			for i, c := range reported {
				refs[i].Name = c.Name
				if id, ok := c.ToolCallID.Get(); ok {
					refs[i].ToolCallID = &id
				}
			}
			d.ToolCallJoins = gateway.JoinToolCalls(refs, calls)
		}
	}
	sets, err := s.store.VerdictSets(ctx, r.TenantID, "rollout", r.ID)
	if err != nil {
		return d, err
	}
	d.VerdictHistory = make([]verdictSetView, len(sets))
	for i, v := range sets {
		d.VerdictHistory[i] = verdictSetViewOf(v)
	}
	if len(sets) > 0 {
		d.Verdicts = sets[len(sets)-1].Verdicts
		d.Reward = d.VerdictHistory[len(sets)-1].Reward
	}
	return d, nil
}

// getRollout is GET /api/v1/rollouts/{id}.
func (s *Server) getRollout(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	ro, err := s.store.GetRollout(r.Context(), p.TenantID, id)
	if err != nil {
		return err
	}
	d, err := s.rolloutDetailOf(r.Context(), ro)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// listRollouts is GET /api/v1/rollouts?agent_id&state&batch_id.
func (s *Server) listRollouts(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	q, err := queryParams(r, "agent_id", "state", "batch_id", "limit", "cursor")
	if err != nil {
		return err
	}
	pg, err := page(q)
	if err != nil {
		return err
	}
	f := store.RolloutFilter{AgentID: q["agent_id"], State: gyre.RolloutState(q["state"])}
	if f.State != "" && !f.State.Valid() {
		return gyre.Errorf(gyre.CodeInvalidQuery, "state must be one of %v", gyre.RolloutStates)
	}
	if v, ok := q["batch_id"]; ok {
		if !isUUID(v) {
			return gyre.Errorf(gyre.CodeInvalidQuery, "batch_id must be a UUID")
		}
		f.BatchID = v
	}
	rs, next, err := s.store.ListRollouts(r.Context(), p.TenantID, f, pg)
	if err != nil {
		return err
	}
	items := make([]rolloutSummary, len(rs))
	for i, ro := range rs {
		items[i] = toRolloutSummary(ro)
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// cancelRollout is POST /api/v1/rollouts/{id}/cancel.
func (s *Server) cancelRollout(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.rollouts()
	if err != nil {
		return err
	}
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	ro, err := svc.CancelRollout(r.Context(), p.TenantID, id)
	s.forgetCredentials(id)
	if err != nil {
		return err
	}
	d, err := s.rolloutDetailOf(r.Context(), ro)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// agentJSON is one agent of GET /api/v1/agents.
type agentJSON struct {
	AgentID     string                    `json:"agent_id"`
	FirstSeenAt time.Time                 `json:"first_seen_at"`
	Rollouts    map[gyre.RolloutState]int `json:"rollouts"`
	Exclusions  map[string]int            `json:"exclusions"`
}

// listAgents is GET /api/v1/agents.
func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	as, err := s.store.ListAgents(r.Context(), p.TenantID)
	if err != nil {
		return err
	}
	items := make([]agentJSON, len(as))
	for i, a := range as {
		items[i] = agentJSON{AgentID: a.AgentID, FirstSeenAt: a.FirstSeenAt, Rollouts: a.Counts, Exclusions: a.Exclusions}
	}
	writeJSON(w, http.StatusOK, newList(items, ""))
	return nil
}

// isUUID reports whether s is a UUID in canonical lowercase form.
func isUUID(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && len(s) == 36 && u.String() == s
}
