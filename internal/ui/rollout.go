package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// maxConversationCalls bounds the calls whose bodies the rollout page
// reads to draw the conversation; a longer rollout shows its first ones
// and says so.
const maxConversationCalls = 100

// outputView is what the page reads of a stored RolloutOutput. Fields
// the agent may leave out stay nil: null is not [] and unknown is not ok.
type outputView struct {
	FinalText             string          `json:"final_text"`
	ToolCalls             *[]toolCallView `json:"tool_calls"`
	ToolCallsOmittedCount int             `json:"tool_calls_omitted_count"`
	LLMCallCount          *int            `json:"llm_call_count"`
	Exclusion             *exclusionView  `json:"exclusion"`
	Artifacts             map[string]any  `json:"artifacts"`
	AgentFingerprint      json.RawMessage `json:"agent_fingerprint"`
}

type toolCallView struct {
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Outcome    string          `json:"outcome"`
	StatusCode *int            `json:"status_code"`
	Output     json.RawMessage `json:"output"`
	Error      *string         `json:"error"`
	LatencyMS  *float64        `json:"latency_ms"`
	ToolCallID *string         `json:"tool_call_id"`
	// JoinedSeq is the gateway call that emitted it (by tool_call_id).
	JoinedSeq *int `json:"-"`
	Ambiguous bool `json:"-"`
}

type exclusionView struct {
	Reason string  `json:"reason"`
	Detail *string `json:"detail"`
}

// artifactView is one reported artifact: a digest or skip marker, or an
// inlined small file.
type artifactView struct {
	Name    string
	Digest  string
	Size    *float64
	Content *string
}

type verdictView struct {
	grade.Verdict
}

// Abstained: an abstention is shown as one, never as a failure.
func (v verdictView) Abstained() bool { return v.Pass == nil }

type callView struct {
	store.GatewayCall
	Latency     *time.Duration
	FirstByte   *time.Duration
	Fingerprint json.RawMessage
}

type rolloutData struct {
	R                store.Rollout
	Output           *outputView
	Artifacts        []artifactView
	Exclusion        string
	ExclusionDetail  string
	Verdicts         []verdictView
	VerdictSets      int
	Calls            []callView
	Completions      int
	Failed           int
	Conversation     []chatTurn
	ConversationNote string
	AgentFingerprint json.RawMessage
	ServerFP         json.RawMessage
}

// rollout is GET /ui/rollouts/{id}.
func (u *UI) rollout(w http.ResponseWriter, r *http.Request, s session) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	ro, err := u.store.GetRollout(ctx, s.TenantID, id)
	if err != nil {
		return err
	}
	d := rolloutData{R: ro, ServerFP: ro.ServerFingerprint}
	if ro.State.ServerEnded() {
		d.Exclusion = "state:" + string(ro.State)
	}
	calls, err := u.store.GatewayCalls(ctx, s.TenantID, ro.ID)
	if err != nil {
		return err
	}
	for _, c := range calls {
		if c.Counted {
			d.Completions++
		} else {
			d.Failed++
		}
		v := callView{GatewayCall: c, Fingerprint: c.Fingerprint}
		if c.DoneAt != nil {
			l := c.DoneAt.Sub(c.ReceivedAt)
			v.Latency = &l
		}
		if c.FirstByteAt != nil {
			fb := c.FirstByteAt.Sub(c.ReceivedAt)
			v.FirstByte = &fb
		}
		d.Calls = append(d.Calls, v)
	}
	if len(d.ServerFP) == 0 && len(calls) > 0 {
		d.ServerFP = gateway.ServerFingerprint(calls)
	}
	if ro.Output != nil {
		var out outputView
		if err := json.Unmarshal(ro.Output, &out); err != nil {
			return fmt.Errorf("stored output of %s: %w", ro.ID, err)
		}
		d.Output = &out
		d.AgentFingerprint = out.AgentFingerprint
		if out.Exclusion != nil {
			d.Exclusion = out.Exclusion.Reason
			if out.Exclusion.Detail != nil {
				d.ExclusionDetail = *out.Exclusion.Detail
			}
		}
		d.Artifacts = artifactsOf(out.Artifacts)
		if out.ToolCalls != nil {
			refs := make([]gateway.ReportedToolCall, len(*out.ToolCalls))
			for i, c := range *out.ToolCalls {
				refs[i] = gateway.ReportedToolCall{Name: c.Name, ToolCallID: c.ToolCallID}
			}
			for i, j := range gateway.JoinToolCalls(refs, calls) {
				(*out.ToolCalls)[i].JoinedSeq = j.CompletionSeq
				(*out.ToolCalls)[i].Ambiguous = j.Ambiguous
			}
		}
	}
	sets, err := u.store.VerdictSets(ctx, s.TenantID, store.SubjectRollout, ro.ID)
	if err != nil {
		return err
	}
	d.VerdictSets = len(sets)
	if len(sets) > 0 {
		var vs []grade.Verdict
		if err := json.Unmarshal(sets[len(sets)-1].Verdicts, &vs); err != nil {
			return fmt.Errorf("verdicts of %s: %w", ro.ID, err)
		}
		for _, v := range vs {
			d.Verdicts = append(d.Verdicts, verdictView{v})
		}
	}
	if err := u.conversation(r, s, calls, &d); err != nil {
		return err
	}
	u.render(w, r, http.StatusOK, "rollout", view{Title: "Rollout " + short(ro.ID), Nav: "batches", Session: s, Data: d})
	return nil
}

// artifactsOf lists the reported artifacts by name.
func artifactsOf(m map[string]any) []artifactView {
	var out []artifactView
	for name, v := range m {
		a := artifactView{Name: name}
		switch x := v.(type) {
		case string:
			a.Digest = x
		case map[string]any:
			if s, ok := x["sha256"].(string); ok {
				a.Digest = s
			}
			if n, ok := x["size_bytes"].(float64); ok {
				a.Size = &n
			}
			if c, ok := x["content"].(string); ok {
				a.Content = &c
			}
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b artifactView) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}
