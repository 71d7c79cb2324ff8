package gateway

import (
	"net/http"
	"strings"
)

// DefaultAnthropicVersion is the anthropic-version header sent upstream
// on a Messages call whose agent sent none: the Messages API requires one.
const DefaultAnthropicVersion = "2023-06-01"

// setMessagesHeaders sets the headers of a Messages request upstream: the
// upstream's key as x-api-key (Anthropic's credential header, never
// Authorization), the agent's anthropic-version or the default, and the
// agent's anthropic-beta flags, which change what the request means. No
// other header of the agent's is passed.
func setMessagesHeaders(h http.Header, agent http.Header, apiKey string) {
	h.Del("Authorization")
	if apiKey != "" {
		h.Set("X-Api-Key", apiKey)
	}
	version := DefaultAnthropicVersion
	if v := strings.TrimSpace(agent.Get("Anthropic-Version")); v != "" {
		version = v
	}
	h.Set("Anthropic-Version", version)
	for _, b := range agent.Values("Anthropic-Beta") {
		if b = strings.TrimSpace(b); b != "" {
			h.Add("Anthropic-Beta", b)
		}
	}
}
