package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"

	"github.com/gyrehq/gyre/internal/jcs"
)

// responsesSpec is the OpenAI Responses API (SPEC §6.1): input items (or
// a string), instructions, previous_response_id chaining, answers with a
// status, streams of typed events ended by response.completed or
// response.incomplete, usage in input_tokens/output_tokens.
type responsesSpec struct{}

func (responsesSpec) protocol() Protocol { return ProtocolResponses }

// responsesItems: the input, a string or an array of items, whose
// function_call_output items answer the function_call named by call_id.
var responsesItems = itemRules{key: "input", optional: true, value: true, watch: [2]string{"type", "call_id"},
	consumed: func(vals [2][]byte, _ []byte) []string {
		typ, callID := vals[0], vals[1]
		if (string(typ) == `"function_call_output"` || string(typ) == `"custom_tool_call_output"`) && isString(callID) {
			if id, err := jcs.NewWalker(callID).String(0, len(callID)); err == nil {
				return []string{id}
			}
		}
		return nil
	}}

func (responsesSpec) parse(body []byte) (*request, *apiError) {
	req, e := parseRequest(body, responsesItems)
	if e != nil {
		return nil, e
	}
	if v, ok := req.get("previous_response_id"); ok && !isNull(v) {
		if !isString(v) {
			return nil, errInvalid("previous_response_id", "'previous_response_id' must be a string.")
		}
		id, err := jcs.NewWalker(v).String(0, len(v))
		if err != nil || id == "" {
			return nil, errInvalid("previous_response_id", "'previous_response_id' must be a non-empty string.")
		}
		req.previous = id
	}
	if v, ok := req.get("instructions"); ok && !isNull(v) && !isString(v) {
		// Instructions are part of the fingerprint: only a string is
		// rendered the way the model sees it.
		return nil, errInvalid("instructions", "'instructions' must be a string.")
	}
	return req, nil
}

// forward sets the policy's model and its sampling overrides under their
// Responses names (max_tokens → max_output_tokens, …; a policy whose
// overrides do not map was refused when it was created). Usage comes
// with every answer and every stream's final event, so nothing else is
// added. capture_tokens applies to chat only.
func (responsesSpec) forward(r *request, p Policy) *forwarded {
	overrides, _, err := MapOverrides(ProtocolResponses, p.SamplingOverrides)
	if err != nil {
		overrides = nil // refused at creation; a stored policy maps
	}
	return r.rewrite(func(_ *forwarded, set func(key string, val []byte)) {
		model, _ := json.Marshal(p.Model)
		set("model", model)
		for _, k := range sortedKeys(overrides) {
			set(k, overrides[k])
		}
	})
}

// responseShape is what the gateway reads from a Responses answer.
type responseShape struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Output []struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
	} `json:"output"`
	Usage json.RawMessage `json:"usage"`
}

func (s responseShape) facts() answerFacts {
	f := answerFacts{usage: s.Usage, responseID: s.ID, notCounted: statusReason(s.Status)}
	for _, o := range s.Output {
		if (o.Type == "function_call" || o.Type == "custom_tool_call") && o.CallID != "" {
			f.emitted = append(f.emitted, o.CallID)
		}
	}
	return f
}

// statusReason is why an answer with that status does not count: it
// counts when completed, or incomplete (cut by max_output_tokens or a
// content filter, which clients count too) and delivered in full.
func statusReason(status string) string {
	switch status {
	case "completed", "incomplete":
		return ""
	case "failed":
		return ReasonUpstreamError
	}
	return ReasonNotCompleted
}

func (responsesSpec) readAnswer(body []byte) answerFacts {
	var shape responseShape
	if json.Unmarshal(body, &shape) != nil {
		return answerFacts{notCounted: ReasonNotCompleted}
	}
	return shape.facts()
}

func (responsesSpec) relay(c *call, resp *http.Response) { c.relayResponses(resp) }

// responsesUsage is the Responses usage object.
type responsesUsage struct {
	InputTokens        *int64 `json:"input_tokens"`
	OutputTokens       *int64 `json:"output_tokens"`
	TotalTokens        *int64 `json:"total_tokens"`
	InputTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// tokens reads Responses usage: input_tokens (cached ones included, in
// input_tokens_details.cached_tokens), output_tokens (reasoning included),
// total_tokens.
func (responsesSpec) tokens(raw json.RawMessage) (tokenCounts, bool) {
	var u responsesUsage
	if json.Unmarshal(raw, &u) != nil {
		return tokenCounts{}, false
	}
	var t tokenCounts
	if u.InputTokens != nil {
		t.input = *u.InputTokens
	}
	if u.OutputTokens != nil {
		t.output = *u.OutputTokens
	}
	if u.InputTokensDetails != nil && u.InputTokensDetails.CachedTokens != nil {
		t.cached = *u.InputTokensDetails.CachedTokens
	}
	t.total = t.input + t.output
	if u.TotalTokens != nil {
		t.total = *u.TotalTokens
	}
	return t, true
}

// ResponsesFingerprintSamplingKeys are the Responses parameters the
// server fingerprint records, after overrides.
var ResponsesFingerprintSamplingKeys = []string{
	"temperature", "top_p", "max_output_tokens", "tool_choice", "text", "reasoning", "truncation",
}

// fingerprint: the prompt is the canonical {"input": [the resolved
// input], "instructions": …}: the items previous_response_id stood for,
// then the request's own items (a string input rendered as the user
// message it stands for), and the request's instructions when it has
// them (they are not inherited through previous_response_id).
func (responsesSpec) fingerprint(b *bodyParts) CallFingerprint {
	h := sha256.New()
	h.Write([]byte(`{"input":[`))
	n := 0
	for _, it := range b.resolved {
		if n > 0 {
			h.Write([]byte{','})
		}
		n++
		h.Write(it)
	}
	for _, it := range renderedInput(b.messages, b.fwd.shape) {
		if n > 0 {
			h.Write([]byte{','})
		}
		n++
		h.Write(it)
	}
	h.Write([]byte{']'})
	if v, ok := memberValue(b.fwd.members, "instructions"); ok && !isNull(v) {
		if c, err := jcs.Canonicalize(v); err == nil {
			h.Write([]byte(`,"instructions":`))
			h.Write(c)
		}
	}
	h.Write([]byte{'}'})
	return CallFingerprint{PromptSHA256: hex.EncodeToString(h.Sum(nil)), Tokenizer: b.tokenizer,
		Sampling: samplingOf(b.fwd.members, ResponsesFingerprintSamplingKeys), ToolsSHA256: toolsHash(b.fwd.members)}
}

// renderedInput is a request's own input as canonical items: a string
// input is the user message {"content": s, "role": "user"} it stands for.
func renderedInput(items [][]byte, shape itemsShape) [][]byte {
	if shape != itemsValue || len(items) != 1 || !isString(items[0]) {
		return items
	}
	var b bytes.Buffer
	b.WriteString(`{"content":`)
	b.Write(items[0])
	b.WriteString(`,"role":"user"}`)
	return [][]byte{b.Bytes()}
}

func (responsesSpec) writeError(w http.ResponseWriter, e *apiError) { writeAPIError(w, e) }

// responsesErrorEvent is the event a Responses stream the gateway cuts
// ends with: an "error" event, which clients raise (openai-go on its
// top-level error member, the others on its type).
func responsesErrorEvent(code, message string) []byte {
	b, _ := json.Marshal(struct {
		Type    string    `json:"type"`
		Code    string    `json:"code"`
		Message string    `json:"message"`
		Param   *string   `json:"param"`
		Error   errorJSON `json:"error"`
	}{Type: "error", Code: code, Message: message,
		Error: errorJSON{Message: message, Type: errorType(http.StatusBadGateway), Code: code}})
	return append(append([]byte("event: error\ndata: "), b...), '\n', '\n')
}
