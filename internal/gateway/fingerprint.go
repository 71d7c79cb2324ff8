package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

// CallFingerprint is the server-derived fingerprint of one call (SPEC
// §6.2): the SHA-256 of the JCS of the rendered prompt (the messages
// array) and of the tools array, the sampling params after overrides, and
// the policy's tokenizer.
type CallFingerprint struct {
	PromptSHA256 string          `json:"prompt_sha256"`
	ToolsSHA256  *string         `json:"tools_sha256"`
	Sampling     json.RawMessage `json:"sampling"`
	Tokenizer    *string         `json:"tokenizer"`
}

// callFingerprint derives a chat call's fingerprint from what was
// forwarded. messages are already canonical, so the array's canonical
// form is their concatenation.
func callFingerprint(messages [][]byte, members []member, tokenizer *string) CallFingerprint {
	h := sha256.New()
	h.Write([]byte{'['})
	for i, m := range messages {
		if i > 0 {
			h.Write([]byte{','})
		}
		h.Write(m)
	}
	h.Write([]byte{']'})
	return CallFingerprint{PromptSHA256: hex.EncodeToString(h.Sum(nil)), Tokenizer: tokenizer,
		Sampling: samplingOf(members, FingerprintSamplingKeys), ToolsSHA256: toolsHash(members)}
}

// samplingOf is the canonical object of the members named by keys that
// were forwarded with a non-null value.
func samplingOf(members []member, keys []string) json.RawMessage {
	var sampling bytes.Buffer
	sampling.WriteByte('{')
	n := 0
	keys = slices.Clone(keys)
	slices.SortFunc(keys, jcs.CompareKeys)
	for _, k := range keys {
		v, ok := memberValue(members, k)
		if !ok || isNull(v) {
			continue
		}
		c, err := jcs.Canonicalize(v)
		if err != nil {
			continue // not I-JSON; the stored request keeps it
		}
		if n > 0 {
			sampling.WriteByte(',')
		}
		n++
		writeKey(&sampling, k)
		sampling.WriteByte(':')
		sampling.Write(c)
	}
	sampling.WriteByte('}')
	return sampling.Bytes()
}

// toolsHash is the SHA-256 of the canonical tools member, nil when none.
func toolsHash(members []member) *string {
	if v, ok := memberValue(members, "tools"); ok && !isNull(v) {
		if s, err := jcs.Hash(v); err == nil {
			return &s
		}
	}
	return nil
}

func memberValue(ms []member, key string) ([]byte, bool) {
	for _, m := range ms {
		if m.key == key {
			return m.val, true
		}
	}
	return nil, false
}

// ServerFingerprint is a rollout's server fingerprint (SPEC §6.3):
// {"prompt_sha256": [per counted completion, in sequence order],
// "tools_sha256": [distinct values], "sampling": [distinct values],
// "tokenizer": the policy's tokenizer (an array when calls differ)}. It is
// nil when the rollout has no counted completion.
func ServerFingerprint(calls []store.GatewayCall) json.RawMessage {
	var (
		prompts   = []string{}
		tools     = []string{}
		sampling  = []json.RawMessage{}
		seenSamp  = map[string]bool{}
		tokenizer []string
		found     bool
	)
	for _, c := range calls {
		if !c.Counted || len(c.Fingerprint) == 0 {
			continue
		}
		var fp CallFingerprint
		if err := json.Unmarshal(c.Fingerprint, &fp); err != nil {
			continue
		}
		found = true
		prompts = append(prompts, fp.PromptSHA256)
		if fp.ToolsSHA256 != nil && !slices.Contains(tools, *fp.ToolsSHA256) {
			tools = append(tools, *fp.ToolsSHA256)
		}
		if len(fp.Sampling) > 0 && !seenSamp[string(fp.Sampling)] {
			seenSamp[string(fp.Sampling)] = true
			sampling = append(sampling, fp.Sampling)
		}
		if fp.Tokenizer != nil && !slices.Contains(tokenizer, *fp.Tokenizer) {
			tokenizer = append(tokenizer, *fp.Tokenizer)
		}
	}
	if !found {
		return nil
	}
	out := map[string]any{"prompt_sha256": prompts, "tools_sha256": tools, "sampling": sampling, "tokenizer": nil}
	switch len(tokenizer) {
	case 0:
	case 1:
		out["tokenizer"] = tokenizer[0]
	default:
		out["tokenizer"] = tokenizer
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil
	}
	return b
}

// ReportedToolCall is one ToolCallRecord an agent reported, as far as the
// join needs it.
type ReportedToolCall struct {
	ToolCallID *string
	Name       string
}

// ToolCallJoin places a reported tool call at the completion that emitted
// its tool_call_id; CompletionSeq is nil when none did (or the call has no
// id).
type ToolCallJoin struct {
	ToolCallID    *string `json:"tool_call_id"`
	Name          string  `json:"name"`
	CompletionSeq *int    `json:"completion_seq"`
	Ambiguous     bool    `json:"ambiguous"`
}

// JoinToolCalls joins each reported tool call to the completion that
// emitted its tool_call_id (SPEC §6.2). An id emitted by several
// completions joins to the latest one before the first request that
// consumed it (a role "tool" message answering it), else to the latest
// one, and is marked ambiguous.
func JoinToolCalls(reported []ReportedToolCall, calls []store.GatewayCall) []ToolCallJoin {
	emitters := map[string][]int{}
	consumer := map[string]int{}
	for _, c := range calls {
		for _, id := range c.EmittedIDs {
			if s := emitters[id]; len(s) == 0 || s[len(s)-1] != c.Seq {
				emitters[id] = append(emitters[id], c.Seq)
			}
		}
		for _, id := range c.ConsumedIDs {
			if seq, ok := consumer[id]; !ok || c.Seq < seq {
				consumer[id] = c.Seq
			}
		}
	}
	out := make([]ToolCallJoin, 0, len(reported))
	for _, r := range reported {
		j := ToolCallJoin{ToolCallID: r.ToolCallID, Name: r.Name}
		if r.ToolCallID == nil {
			out = append(out, j)
			continue
		}
		seqs := emitters[*r.ToolCallID]
		switch len(seqs) {
		case 0:
		case 1:
			j.CompletionSeq = &seqs[0]
		default:
			j.Ambiguous = true
			pick := seqs[len(seqs)-1]
			if cons, ok := consumer[*r.ToolCallID]; ok {
				for _, s := range seqs {
					if s < cons {
						pick = s
					}
				}
			}
			j.CompletionSeq = &pick
		}
		out = append(out, j)
	}
	return out
}
