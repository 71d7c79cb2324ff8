package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/gyrehq/gyre/internal/jcs"
)

// Errors on the Messages routes are Anthropic-shaped (SPEC §6.1), since
// their clients are Anthropic clients:
//
//	{"type":"error","error":{"type":"authentication_error","message":"…","code":"invalid_api_key"},"request_id":"…"}
//
// with the request id also in the request-id header, as Anthropic's API
// answers. error.type is the Anthropic type the SDKs branch on; error.code
// is gyre's code (the same as on the OpenAI-shaped routes), and
// error.pointer the JSON pointer of the request member at fault, if any.

// anthropicErrorType is the Anthropic error type of an answer.
func anthropicErrorType(e *apiError) string {
	switch {
	case e.Code == CodeOverloaded:
		return "overloaded_error"
	case e.Status == http.StatusUnauthorized:
		return "authentication_error"
	case e.Status == http.StatusForbidden:
		return "permission_error"
	case e.Status == http.StatusNotFound:
		return "not_found_error"
	case e.Status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case e.Status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case e.Status == http.StatusGatewayTimeout:
		return "timeout_error"
	case e.Status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

type anthropicErrorEnvelope struct {
	Type      string             `json:"type"`
	Error     anthropicErrorJSON `json:"error"`
	RequestID string             `json:"request_id,omitempty"`
}

type anthropicErrorJSON struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Code    string `json:"code"`
	Pointer string `json:"pointer,omitempty"`
}

// pointer is the JSON pointer of the member at fault: Param names a
// top-level member, or an element of one as "messages[2]".
func (e *apiError) pointer() string {
	if e.Param == "" {
		return ""
	}
	key, rest, _ := strings.Cut(e.Param, "[")
	ptr := "/" + jcs.EscapePointerToken(key)
	for rest != "" {
		var idx string
		idx, rest, _ = strings.Cut(rest, "]")
		ptr += "/" + idx
		rest = strings.TrimPrefix(rest, "[")
	}
	return ptr
}

// anthropicBody is e in the Anthropic error shape.
func (e *apiError) anthropicBody(requestID string) []byte {
	b, _ := json.Marshal(anthropicErrorEnvelope{Type: "error", RequestID: requestID, Error: anthropicErrorJSON{
		Type: anthropicErrorType(e), Message: e.Message, Code: e.Code, Pointer: e.pointer()}})
	return b
}

// writeAnthropicError answers e in the Anthropic error shape, with the
// same retry advice as the OpenAI shape (x-should-retry, which Anthropic
// SDKs obey too, and Retry-After).
func writeAnthropicError(w http.ResponseWriter, e *apiError, requestID string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if requestID != "" {
		h.Set("Request-Id", requestID)
	}
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
		h.Set("X-Should-Retry", "true")
	} else {
		h.Set("X-Should-Retry", "false")
	}
	if e.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="gyre-gateway"`)
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(e.anthropicBody(requestID), '\n'))
}

// anthropicErrorEvent is a Messages stream's error event, which Anthropic
// SDKs raise as an error.
func anthropicErrorEvent(e *apiError) []byte {
	b := append([]byte("event: error\ndata: "), e.anthropicBody("")...)
	return append(b, '\n', '\n')
}

// requestID is the id an Anthropic-shaped error names: the API server's
// X-Request-Id of the request, already set on the answer, so that the id
// an agent logs finds the server's log lines.
func requestID(w http.ResponseWriter) string {
	return w.Header().Get("X-Request-Id")
}

// WriteProtocolError answers an error in protocol p's shape: Anthropic's
// for Messages, OpenAI's otherwise. It is exported for the API server,
// which checks gateway routes and authenticates the policy endpoint.
func WriteProtocolError(w http.ResponseWriter, p Protocol, status int, code, message string) {
	writeProtocolError(w, p, &apiError{Status: status, Code: code, Message: message})
}

// WriteProtocolRateLimited is WriteRateLimited in protocol p's shape.
func WriteProtocolRateLimited(w http.ResponseWriter, p Protocol, retryAfterSeconds int) {
	writeProtocolError(w, p, rateLimited(retryAfterSeconds))
}

func writeProtocolError(w http.ResponseWriter, p Protocol, e *apiError) {
	if p == ProtocolMessages {
		writeAnthropicError(w, e, requestID(w))
		return
	}
	writeAPIError(w, e)
}
