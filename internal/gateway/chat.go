package gateway

import (
	"encoding/json"
	"net/http"
)

// chatSpec is OpenAI Chat Completions (SPEC §6.1–6.3): messages, a
// stream of chat.completion.chunk events ended by [DONE], usage in
// prompt_tokens/completion_tokens.
type chatSpec struct{}

func (chatSpec) protocol() Protocol { return ProtocolChat }

func (chatSpec) parse(body []byte) (*request, *apiError) { return parseChatRequest(body) }

func (chatSpec) forward(r *request, p Policy) *forwarded { return r.forward(p) }

// readAnswer reads the tool call ids a chat.completion emitted and its
// usage. A delivered 2xx answer always counts.
func (chatSpec) readAnswer(body []byte) answerFacts {
	var (
		shape answerShape
		f     answerFacts
	)
	if json.Unmarshal(body, &shape) != nil {
		return f
	}
	for _, ch := range shape.Choices {
		for _, tc := range ch.Message.ToolCalls {
			if tc.ID != "" {
				f.emitted = append(f.emitted, tc.ID)
			}
		}
	}
	f.usage = shape.Usage
	return f
}

func (chatSpec) relay(c *call, resp *http.Response) { c.stream(resp) }

// tokens reads chat usage: prompt_tokens (cached ones included, in
// prompt_tokens_details.cached_tokens), completion_tokens, total_tokens.
func (chatSpec) tokens(raw json.RawMessage) (tokenCounts, bool) {
	var u usageShape
	if json.Unmarshal(raw, &u) != nil {
		return tokenCounts{}, false
	}
	var t tokenCounts
	if u.PromptTokens != nil {
		t.input = *u.PromptTokens
	}
	if u.CompletionTokens != nil {
		t.output = *u.CompletionTokens
	}
	if u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens != nil {
		t.cached = *u.PromptTokensDetails.CachedTokens
	}
	t.total = t.input + t.output
	if u.TotalTokens != nil {
		t.total = *u.TotalTokens
	}
	return t, true
}

func (chatSpec) fingerprint(b *bodyParts) CallFingerprint {
	return callFingerprint(b.messages, b.fwd.members, b.tokenizer)
}

func (chatSpec) writeError(w http.ResponseWriter, e *apiError) { writeAPIError(w, e) }
