package dataset

import (
	"encoding/json"
	"io"
	"iter"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/flywheel"
)

// WriteATIF writes one ATIF document (at atif.LatestVersion) per
// training-grade rollout, in rollout id order, built by atif.FromGateway
// from the rollout's counted completions and the tool calls the agent
// reported, with the rollout id as session and trajectory id. Every
// document is checked by gyre's ATIF validator; one it refuses is counted
// under format_invalid:atif and not written.
func WriteATIF(w io.Writer, sel Selection, rollouts iter.Seq2[*Rollout, error]) (Manifest, error) {
	return perRollout(w, sel, rollouts, func(r *Rollout, _ *tally) ([][]byte, string) {
		if r.NoChatForm != "" {
			return nil, r.NoChatForm
		}
		doc, err := atifDocument(r)
		if err != nil {
			return nil, ReasonFormatInvalid + RuleATIF
		}
		return [][]byte{doc}, ""
	})
}

// RuleATIF is the rule of a rollout whose ATIF document could not be built
// or is refused by gyre's validator.
const RuleATIF = "atif"

func atifDocument(r *Rollout) ([]byte, error) {
	recs := make([]atif.GatewayRecord, len(r.Completions))
	for i := range r.Completions {
		comp := &r.Completions[i]
		req, err := requestBody(comp.Request)
		if err != nil {
			return nil, err
		}
		resp, err := responseBody(comp)
		if err != nil {
			return nil, err
		}
		recs[i] = atif.GatewayRecord{
			Seq:                int64(comp.Seq),
			Counted:            true,
			Model:              comp.Model,
			Request:            req,
			Response:           resp,
			ReceivedAt:         comp.ReceivedAt,
			DoneAt:             comp.DoneAt,
			PromptTokenIDs:     comp.PromptTokenIDs,
			CompletionTokenIDs: comp.CompletionTokenIDs,
			Logprobs:           comp.Logprobs,
		}
	}
	// Only what a trajectory shows of the output: the executed tool calls
	// and the agent's fingerprint; never the advisory reward or success.
	out := &flywheel.RolloutOutput{ToolCalls: flywheel.Null[[]flywheel.ToolCallRecord](), AgentFingerprint: r.AgentFingerprint}
	if r.ToolCalls != nil {
		out.ToolCalls = flywheel.Some(r.ToolCalls)
	}
	tr, err := atif.FromGateway(recs, out, atif.GatewayOptions{
		SessionID: r.ID, TrajectoryID: r.ID, AgentName: r.AgentName, AgentVersion: r.AgentVersion,
	})
	if err != nil {
		return nil, err
	}
	doc, err := encode(tr)
	if err != nil {
		return nil, err
	}
	if err := atif.Validate(doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// requestBody rebuilds a chat request body from its stored parts.
func requestBody(req Request) (json.RawMessage, error) {
	body := map[string]json.RawMessage{}
	if !isNull(req.Rest) {
		if err := json.Unmarshal(req.Rest, &body); err != nil {
			return nil, errNotJSON
		}
	}
	msgs, err := json.Marshal(req.Messages)
	if err != nil {
		return nil, errNotJSON
	}
	body["messages"] = msgs
	if !isNull(req.Tools) {
		body["tools"] = req.Tools
	}
	return json.Marshal(body)
}

// responseBody rebuilds a chat.completion body around the response message.
func responseBody(comp *Completion) (json.RawMessage, error) {
	choice := map[string]any{"index": 0, "message": comp.Response, "finish_reason": nil}
	if comp.FinishReason != "" {
		choice["finish_reason"] = comp.FinishReason
	}
	body := map[string]any{"object": "chat.completion", "model": comp.Model, "choices": []any{choice}}
	if !isNull(comp.Usage) {
		body["usage"] = comp.Usage
	}
	return json.Marshal(body)
}
