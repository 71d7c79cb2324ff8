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

// pointer is the JSON pointer of the member at fault: Params of the
// Messages parser are pointers already; the shared checks name a
// top-level member.
func (e *apiError) pointer() string {
	switch {
	case e.Param == "":
		return ""
	case strings.HasPrefix(e.Param, "/"):
		return e.Param
	}
	return "/" + jcs.EscapePointerToken(e.Param)
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

// WriteAnthropicError answers an Anthropic-shaped error, for the API
// server, which authenticates the Messages policy endpoint.
func WriteAnthropicError(w http.ResponseWriter, status int, code, message, requestID string) {
	writeAnthropicError(w, &apiError{Status: status, Code: code, Message: message}, requestID)
}

// anthropicErrorEvent is a Messages stream's error event, which Anthropic
// SDKs raise as an error.
func anthropicErrorEvent(code, message string) []byte {
	e := &apiError{Status: http.StatusBadGateway, Code: code, Message: message}
	b := append([]byte("event: error\ndata: "), e.anthropicBody("")...)
	return append(b, '\n', '\n')
}
