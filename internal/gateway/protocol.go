package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Protocol is an LLM wire protocol the gateway serves and an upstream may
// speak (SPEC §6.1). There is no translation between protocols: a call is
// forwarded in the protocol it arrived in, to an upstream that speaks it.
type Protocol string

// The protocols, by the names gyre.yaml's protocols: and the recorded
// calls' protocol use.
const (
	// ProtocolChat is OpenAI Chat Completions: POST /v1/chat/completions.
	ProtocolChat Protocol = "chat"
	// ProtocolResponses is the OpenAI Responses API: POST /v1/responses.
	ProtocolResponses Protocol = "responses"
	// ProtocolMessages is the Anthropic Messages API: POST /v1/messages.
	ProtocolMessages Protocol = "messages"
)

// Protocols lists every protocol, in the order the docs name them.
var Protocols = []Protocol{ProtocolChat, ProtocolResponses, ProtocolMessages}

// DefaultProtocols are what an upstream that declares none speaks.
var DefaultProtocols = []Protocol{ProtocolChat}

// ParseProtocol returns the protocol named s, or an error naming the
// known ones.
func ParseProtocol(s string) (Protocol, error) {
	for _, p := range Protocols {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown protocol %q (known: %s)", s, protocolList(Protocols))
}

// Path is the protocol's endpoint under an upstream's base URL (and under
// a rollout's /gw/{token}/v1).
func (p Protocol) Path() string {
	switch p {
	case ProtocolResponses:
		return "/responses"
	case ProtocolMessages:
		return "/messages"
	}
	return "/chat/completions"
}

func protocolList(ps []Protocol) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// protocolSpec is what differs between the gateway's protocols (SPEC
// §6.1); everything else — authentication, budgets, policies, recording,
// counting, reconciliation — is the same code for all of them. Chat
// Completions is one implementation (chatSpec), the Responses API another
// (responsesSpec).
type protocolSpec interface {
	// protocol names it.
	protocol() Protocol
	// parse reads and checks a request body: its members, its item array
	// (messages, input) in canonical form, the tool-call ids the items
	// consume, the model asked for and whether it streams.
	parse(body []byte) (*request, *apiError)
	// forward builds the upstream request for policy p: the policy's
	// model, its sampling overrides under this protocol's parameter
	// names, token capture and the stream options usage needs.
	forward(r *request, p Policy) *forwarded
	// readAnswer reads a whole 2xx answer: the tool-call ids it emitted,
	// its usage and, if it cannot count although delivered (an answer the
	// protocol marks unfinished), why.
	readAnswer(body []byte) answerFacts
	// relay relays a streamed 2xx answer event by event and finishes the
	// call: it counts when the protocol's final event was delivered.
	relay(c *call, resp *http.Response)
	// tokens reads a usage object: input tokens (cached ones included),
	// cached input tokens, output tokens and the total.
	tokens(usage json.RawMessage) (tokenCounts, bool)
	// fingerprint derives the call's fingerprint from what was forwarded.
	fingerprint(b *bodyParts) CallFingerprint
	// writeError answers an error in the protocol's error shape.
	writeError(w http.ResponseWriter, e *apiError)
}

// answerFacts are what the gateway reads from a whole answer.
type answerFacts struct {
	emitted []string
	usage   json.RawMessage
	// notCounted is why a delivered answer does not count; "" counts.
	notCounted string
	// responseID is the answer's id when the protocol lets later
	// requests refer to it (Responses' previous_response_id).
	responseID string
}

// tokenCounts are a usage object's token counts, as cost and budgets read
// them. written counts the input tokens written to a prompt cache
// (Messages' cache_creation_input_tokens), priced apart; like cached ones
// they are part of input.
type tokenCounts struct {
	input, cached, written, output, total int64
}

// specFor returns the implementation of a protocol, nil for one the
// gateway does not serve yet (its routes answer 404
// unsupported_endpoint).
func specFor(p Protocol) protocolSpec {
	switch p {
	case ProtocolChat:
		return chatSpec{}
	case ProtocolResponses:
		return responsesSpec{}
	case ProtocolMessages:
		return messagesSpec{}
	}
	return nil
}

// errUnsupportedProtocol refuses a call on a protocol the policy's
// upstream does not speak: there is no silent translation (SPEC §6.1).
func errUnsupportedProtocol(p Protocol, up *upstream) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: CodeUnsupportedProtocol,
		Message: fmt.Sprintf("The policy routes to upstream %q, which speaks %s, not %s; the gateway does not translate between protocols.",
			up.Name, protocolList(up.speaks()), p)}
}

// overrideNames map a policy's sampling_overrides keys (SamplingKeys,
// chat's names) to each protocol's own parameter names. A protocol
// without an entry takes every key as it is (chat). A key missing from a
// protocol's map cannot be applied there, and a policy whose upstream
// speaks that protocol is refused when it is created (MapOverrides).
var overrideNames = map[Protocol]map[string]string{
	ProtocolResponses: {
		"temperature":           "temperature",
		"top_p":                 "top_p",
		"max_tokens":            "max_output_tokens",
		"max_completion_tokens": "max_output_tokens",
		"tool_choice":           "tool_choice",
		"parallel_tool_calls":   "parallel_tool_calls",
		"top_logprobs":          "top_logprobs",
	},
	ProtocolMessages: {
		"temperature":           "temperature",
		"top_p":                 "top_p",
		"top_k":                 "top_k",
		"max_tokens":            "max_tokens",
		"max_completion_tokens": "max_tokens",
		"stop":                  "stop_sequences",
	},
}

// MapOverrides returns a policy's sampling overrides under protocol p's
// parameter names, or the key that cannot be applied on p and why.
func MapOverrides(p Protocol, overrides map[string]json.RawMessage) (map[string]json.RawMessage, string, error) {
	names, ok := overrideNames[p]
	if !ok || len(overrides) == 0 {
		return overrides, "", nil
	}
	out := make(map[string]json.RawMessage, len(overrides))
	from := map[string]string{}
	for _, k := range sortedKeys(overrides) {
		name, ok := names[k]
		if !ok {
			return nil, k, fmt.Errorf("%q has no equivalent on the %s protocol", k, p)
		}
		if k == "tool_choice" && p == ProtocolResponses && !isString(overrides[k]) {
			// Chat's {"type":"function","function":{"name"}} is shaped
			// differently from Responses' {"type":"function","name"}.
			return nil, k, fmt.Errorf("%q maps to the %s protocol only as a string (auto, none, required)", k, p)
		}
		if prev, dup := from[name]; dup {
			return nil, k, fmt.Errorf("%q and %q both map to %q on the %s protocol", prev, k, name, p)
		}
		from[name] = k
		v := overrides[k]
		if k == "stop" && p == ProtocolMessages {
			// Chat's stop is a string or an array; stop_sequences is an
			// array.
			var err error
			if v, err = stopSequences(v); err != nil {
				return nil, k, err
			}
		}
		out[name] = v
	}
	return out, "", nil
}

func isString(v json.RawMessage) bool {
	return len(v) > 0 && v[0] == '"'
}
