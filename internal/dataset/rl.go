package dataset

import (
	"bytes"
	"encoding/json"
	"io"
	"iter"

	"github.com/gyrehq/gyre/internal/grade"
)

// WriteRL writes one row per training-grade rollout (SPEC §9), in rollout
// id order:
//
//	{"task_id", "group_id", "rollout_id", "policy", "turns": [{"seq", "protocol",
//	 "request_messages", "tools", "response_message", "sampling",
//	 "prompt_token_ids"?, "completion_token_ids"?, "logprobs"?}…],
//	 "reward", "reward_components", "verdicts", "server_fingerprint", "agent_fingerprint"}
//
// A turn is one counted completion in the protocol it was made on
// ("protocol": chat, responses or messages): its request messages and
// response message as recorded (canonical JSON) — for Responses and
// Messages their native items and answer (see Native) — tools and sampling null when
// absent, token ids and logprobs only when captured. policy and the
// fingerprints are null when unknown. min_reward does not apply. The
// manifest counts rows with a turn lacking prompt or completion token ids
// as retokenization_required.
func WriteRL(w io.Writer, sel Selection, rollouts iter.Seq2[*Rollout, error]) (Manifest, error) {
	var c canon
	return perRollout(w, sel, rollouts, func(r *Rollout, t *tally) ([][]byte, string) {
		row, retokenize, err := rlRow(&c, r)
		if err != nil {
			return nil, reasonOf(err)
		}
		if retokenize {
			*t.m.RetokenizationRequired++
		}
		return [][]byte{row}, ""
	})
}

// RLRow is one row of the rl format.
type RLRow struct {
	TaskID            string            `json:"task_id"`
	GroupID           string            `json:"group_id"`
	RolloutID         string            `json:"rollout_id"`
	Policy            *string           `json:"policy"`
	Turns             []RLTurn          `json:"turns"`
	Reward            *float64          `json:"reward"`
	RewardComponents  []RewardComponent `json:"reward_components"`
	Verdicts          []grade.Verdict   `json:"verdicts"`
	ServerFingerprint json.RawMessage   `json:"server_fingerprint"`
	AgentFingerprint  json.RawMessage   `json:"agent_fingerprint"`
}

// RLTurn is one counted completion of an rl row.
type RLTurn struct {
	Seq                int               `json:"seq"`
	Protocol           string            `json:"protocol"`
	RequestMessages    []json.RawMessage `json:"request_messages"`
	Tools              json.RawMessage   `json:"tools"`
	ResponseMessage    json.RawMessage   `json:"response_message"`
	Sampling           json.RawMessage   `json:"sampling"`
	PromptTokenIDs     []int             `json:"prompt_token_ids,omitempty"`
	CompletionTokenIDs []int             `json:"completion_token_ids,omitempty"`
	Logprobs           []float64         `json:"logprobs,omitempty"`
}

// rlRow renders a rollout's row and reports whether a trainer must
// retokenise it.
func rlRow(c *canon, r *Rollout) ([]byte, bool, error) {
	row := RLRow{
		TaskID:           r.TaskID,
		GroupID:          r.GroupID,
		RolloutID:        r.ID,
		Turns:            make([]RLTurn, len(r.Completions)),
		Reward:           r.Reward(),
		RewardComponents: r.RewardComponents(),
		Verdicts:         r.Verdicts.Verdicts,
	}
	if row.Verdicts == nil {
		row.Verdicts = []grade.Verdict{}
	}
	if r.Policy != "" {
		row.Policy = &r.Policy
	}
	var err error
	if row.ServerFingerprint, err = optional(c, r.ServerFingerprint); err != nil {
		return nil, false, err
	}
	if row.AgentFingerprint, err = optional(c, r.AgentFingerprint); err != nil {
		return nil, false, err
	}
	retokenize := false
	for i := range r.Completions {
		comp := &r.Completions[i]
		tn := RLTurn{
			Seq:                comp.Seq,
			Protocol:           comp.Protocol,
			RequestMessages:    make([]json.RawMessage, len(comp.Request.Messages)),
			PromptTokenIDs:     comp.PromptTokenIDs,
			CompletionTokenIDs: comp.CompletionTokenIDs,
			Logprobs:           comp.Logprobs,
		}
		msgs, tools, resp := comp.Request.Messages, comp.Request.Tools, comp.Response
		if comp.Native != nil {
			// Each turn keeps its own protocol's shape (SPEC §9).
			msgs, tools, resp = comp.Native.Items, comp.Native.Tools, comp.Native.Response
			tn.RequestMessages = make([]json.RawMessage, len(msgs))
		}
		for j, m := range msgs {
			if tn.RequestMessages[j], err = c.value(m); err != nil {
				return nil, false, err
			}
		}
		if tn.Tools, err = optional(c, tools); err != nil {
			return nil, false, err
		}
		if tn.ResponseMessage, err = optional(c, resp); err != nil {
			return nil, false, err
		}
		if tn.Sampling, err = optional(c, comp.Sampling); err != nil {
			return nil, false, err
		}
		if len(comp.PromptTokenIDs) == 0 || len(comp.CompletionTokenIDs) == 0 {
			retokenize = true
		}
		row.Turns[i] = tn
	}
	b, err := encode(row)
	return b, retokenize, err
}

// optional canonicalises a JSON value; nil (written null) when absent.
func optional(c *canon, raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	return c.value(raw)
}

// encode writes v as JSON without HTML escaping (the embedded canonical
// values have none either) and without a trailing newline.
func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, errNotJSON
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
