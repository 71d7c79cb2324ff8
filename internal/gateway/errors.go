package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gyrehq/gyre/internal/hangup"
)

// Error codes the gateway answers with, in the OpenAI error shape
// {"error":{"message","type","code"}} because its clients are OpenAI
// clients (SPEC §2, §6.1).
const (
	CodeInvalidAPIKey       = "invalid_api_key"
	CodeCredentialExpired   = "credential_expired"
	CodeUnsupportedEndpoint = "unsupported_endpoint"
	// CodeUnsupportedProtocol: the policy's upstream does not speak the
	// call's protocol.
	CodeUnsupportedProtocol = "unsupported_protocol"
	// CodeUnknownPreviousResponse: a Responses previous_response_id that
	// names no response recorded in the same rollout.
	CodeUnknownPreviousResponse = "unknown_previous_response"
	CodeNoPolicy                = "no_policy"
	CodeBudgetExhausted         = "rollout_budget_exhausted"
	CodeInvalidRequest          = "invalid_request"
	CodeBodyTooLarge            = "body_too_large"
	CodeUpstreamUnavailable     = "upstream_unavailable"
	CodeUpstreamError           = "upstream_error"
	CodeForbidden               = "forbidden"
	CodeOverloaded              = "gateway_overloaded"
	CodeRateLimited             = "rate_limited"
	CodeInternal                = "internal"
)

// apiError is one OpenAI-shaped error answer.
type apiError struct {
	Status  int
	Code    string
	Message string
	// Param names the request field at fault, when one is.
	Param string
	// RetryAfter, when positive, is sent as Retry-After (seconds), and the
	// client is told it may retry: the answer changes once it has waited.
	RetryAfter int
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

type errorEnvelope struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func (e *apiError) body() []byte {
	ej := errorJSON{Message: e.Message, Type: errorType(e.Status), Code: e.Code}
	if e.Param != "" {
		ej.Param = &e.Param
	}
	b, _ := json.Marshal(errorEnvelope{Error: ej}) // plain strings always marshal
	return b
}

// WriteError answers an OpenAI-shaped error. Errors the gateway makes up
// itself tell OpenAI SDKs not to retry (x-should-retry: false): a retry
// cannot change the answer, and each retry would be another record. It is
// exported for the API server, which authenticates the policy endpoint.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	writeAPIError(w, &apiError{Status: status, Code: code, Message: message})
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
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
	_, _ = w.Write(append(e.body(), '\n'))
}

var (
	errInvalidKey = &apiError{Status: http.StatusUnauthorized, Code: CodeInvalidAPIKey,
		Message: "Incorrect API key provided: use the api_key of the rollout this llm_url belongs to."}
	errExpired = &apiError{Status: http.StatusUnauthorized, Code: CodeCredentialExpired,
		Message: "This rollout's credential has expired: the rollout is no longer leased (submitted, released, cancelled, abandoned or past its deadline)."}
	errNoPolicy = &apiError{Status: http.StatusServiceUnavailable, Code: CodeNoPolicy,
		Message: "No policy applies: the batch names none, the agent has no promoted policy and the tenant has no default policy."}
	errUnsupported = &apiError{Status: http.StatusNotFound, Code: CodeUnsupportedEndpoint,
		Message: "The gateway serves only POST /v1/chat/completions, POST /v1/responses, POST /v1/messages and GET /v1/models."}
	errOverloaded = &apiError{Status: http.StatusServiceUnavailable, Code: CodeOverloaded,
		Message: "The gateway cannot record more calls right now; try again shortly."}
)

// errLimitsUnreadable refuses a request whose batch limits cannot be read:
// the gateway never runs a rollout without the budget its batch set.
var errLimitsUnreadable = &apiError{Status: http.StatusInternalServerError, Code: CodeInternal,
	Message: "This rollout's batch limits cannot be read, so the gateway refuses the request rather than run it without a budget."}

func errBudget(what string) *apiError {
	return &apiError{Status: http.StatusTooManyRequests, Code: CodeBudgetExhausted,
		Message: "This rollout's budget is exhausted: " + what + "."}
}

func errInvalid(param, message string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: message, Param: param}
}

// WriteRateLimited answers 429 rate_limited with Retry-After (SPEC §2) in
// the OpenAI error shape; OpenAI SDKs wait that long and retry.
func WriteRateLimited(w http.ResponseWriter, retryAfterSeconds int) {
	writeAPIError(w, rateLimited(retryAfterSeconds))
}

func rateLimited(retryAfterSeconds int) *apiError {
	return &apiError{Status: http.StatusTooManyRequests, Code: CodeRateLimited, RetryAfter: max(1, retryAfterSeconds),
		Message: "Too many requests: retry after " + strconv.Itoa(max(1, retryAfterSeconds)) + " s."}
}

// errClientGone answers a request whose client hung up before the gateway
// could answer (its context cancelled during a store read): nobody reads
// it; its status, nginx's 499, is what the access log, the metrics and,
// for a recorded call, the record show.
var errClientGone = &apiError{Status: hangup.Status, Code: ReasonClientDisconnected, Message: "The client closed the request."}

// failed is the answer to a store or limiter read that failed with err
// under ctx, a request's context, and logs it. A client that hung up
// (hangup.ClientGone) is no failure of the gateway's: it is logged at
// debug level and answered errClientGone, or errExpired when the rollout's
// credential was revoked meanwhile. Anything else is logged as an error,
// with attrs, and answered e.
func (g *Gateway) failed(ctx context.Context, msg string, err error, e *apiError, attrs ...slog.Attr) *apiError {
	attrs = append(attrs, slog.Any("error", err))
	if hangup.ClientGone(ctx, err) {
		g.log.LogAttrs(ctx, slog.LevelDebug, msg+": client went away", attrs...)
		if errors.Is(context.Cause(ctx), errRevoked) {
			return errExpired
		}
		return errClientGone
	}
	g.log.LogAttrs(ctx, slog.LevelError, msg, attrs...)
	return e
}
