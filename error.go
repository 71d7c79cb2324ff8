package gyre

import (
	"errors"
	"fmt"
	"net/http"
)

// Error codes gyre's own APIs answer with (SPEC §2). Each code has exactly
// one HTTP status, kept in statusByCode.
const (
	CodeInvalidBody          = "invalid_body"
	CodeInvalidPathParam     = "invalid_path_param"
	CodeInvalidQuery         = "invalid_query"
	CodeUnauthorized         = "unauthorized"
	CodeForbidden            = "forbidden"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeConflict             = "conflict"
	CodeBodyTooLarge         = "body_too_large"
	CodeUnsupportedMedia     = "unsupported_media_type"
	CodeRateLimited          = "rate_limited"
	CodeInternal             = "internal"
	CodeUnavailable          = "unavailable"
	CodeTurnConflict         = "turn_conflict"
	CodeOutputConflict       = "output_conflict"
	CodeLeaseLost            = "lease_lost"
	CodeRolloutFinished      = "rollout_finished"
	CodeDeadlineExceeded     = "deadline_exceeded"
	CodeAlreadyStarted       = "already_started"
	CodeSuiteVersionConflict = "suite_version_conflict"
	CodeFixtureMissing       = "fixture_missing"
	CodeFilesUnsupported     = "files_unsupported"
	CodeGraderNotAllowed     = "grader_not_allowed"
	CodePolicyNotFound       = "policy_not_found"
	CodePolicyExists         = "policy_exists"
	CodeUpstreamNotAllowed   = "upstream_not_allowed"
	CodeTenantExists         = "tenant_exists"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeNoPreviousPolicy     = "no_previous_policy"
	// CodePromotionRunning: the agent already has a running promotion.
	CodePromotionRunning = "promotion_running"
	// CodePromotionDecided: the promotion already ended.
	CodePromotionDecided = "promotion_decided"
	// CodeNotGraded: a regrade of a rollout or run that has nothing graded
	// to grade again (no output, not graded yet, or a run that errored).
	CodeNotGraded = "not_graded"
	// CodeHarnessExists: a harness name is registered with another base
	// URL or key.
	CodeHarnessExists = "harness_exists"
	// CodeHarnessNotAllowed: a harness at a loopback, private or
	// link-local address the operator does not allow.
	CodeHarnessNotAllowed = "harness_not_allowed"
	// CodeSecretKeyUnset: a harness API key to store, and no
	// GYRE_SECRET_KEY to encrypt it with.
	CodeSecretKeyUnset = "secret_key_unset"
	// CodeHarnessKeyUnavailable: a registered harness's key was sealed
	// under a GYRE_SECRET_KEY this server does not have.
	CodeHarnessKeyUnavailable = "harness_key_unavailable"
	// Calls to a registered harness that failed (the harness is a peer:
	// 502, never 500).
	CodeHarnessTimeout         = "harness_timeout"
	CodeHarnessUnreachable     = "harness_unreachable"
	CodeHarnessInvalidResponse = "harness_invalid_response"
	CodeHarnessError           = "harness_error"
)

var statusByCode = map[string]int{
	CodeInvalidBody:          http.StatusUnprocessableEntity,
	CodeInvalidPathParam:     http.StatusBadRequest,
	CodeInvalidQuery:         http.StatusBadRequest,
	CodeUnauthorized:         http.StatusUnauthorized,
	CodeForbidden:            http.StatusForbidden,
	CodeNotFound:             http.StatusNotFound,
	CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	CodeConflict:             http.StatusConflict,
	CodeBodyTooLarge:         http.StatusRequestEntityTooLarge,
	CodeUnsupportedMedia:     http.StatusUnsupportedMediaType,
	CodeRateLimited:          http.StatusTooManyRequests,
	CodeInternal:             http.StatusInternalServerError,
	CodeUnavailable:          http.StatusServiceUnavailable,
	CodeTurnConflict:         http.StatusConflict,
	CodeOutputConflict:       http.StatusConflict,
	CodeLeaseLost:            http.StatusConflict,
	CodeRolloutFinished:      http.StatusGone,
	CodeDeadlineExceeded:     http.StatusGone,
	CodeAlreadyStarted:       http.StatusConflict,
	CodeSuiteVersionConflict: http.StatusConflict,
	CodeFixtureMissing:       http.StatusUnprocessableEntity,
	CodeFilesUnsupported:     http.StatusUnprocessableEntity,
	CodeGraderNotAllowed:     http.StatusUnprocessableEntity,
	CodePolicyNotFound:       http.StatusUnprocessableEntity,
	CodePolicyExists:         http.StatusConflict,
	CodeUpstreamNotAllowed:   http.StatusUnprocessableEntity,
	CodeTenantExists:         http.StatusConflict,
	CodeIdempotencyKeyReused: http.StatusConflict,
	CodeNoPreviousPolicy:     http.StatusConflict,
	CodePromotionRunning:     http.StatusConflict,
	CodePromotionDecided:     http.StatusConflict,
	CodeNotGraded:            http.StatusConflict,

	CodeHarnessExists:          http.StatusConflict,
	CodeHarnessNotAllowed:      http.StatusUnprocessableEntity,
	CodeSecretKeyUnset:         http.StatusUnprocessableEntity,
	CodeHarnessKeyUnavailable:  http.StatusServiceUnavailable,
	CodeHarnessTimeout:         http.StatusBadGateway,
	CodeHarnessUnreachable:     http.StatusBadGateway,
	CodeHarnessInvalidResponse: http.StatusBadGateway,
	CodeHarnessError:           http.StatusBadGateway,
}

// Error is the one error type that crosses from the domain to a client.
// Code is a stable snake_case string; Message is a human sentence; Pointer
// is an RFC 6901 JSON Pointer into the request body when a field is at fault.
type Error struct {
	Code    string
	Message string
	Pointer string
	// Err is an underlying cause, logged but never shown to a client.
	Err error
}

// Errorf returns an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// AtPointer returns a copy of e that points at a body field.
func (e *Error) AtPointer(p string) *Error {
	c := *e
	c.Pointer = p
	return &c
}

func (e *Error) Error() string {
	if e.Pointer != "" {
		return fmt.Sprintf("%s: %s (at %s)", e.Code, e.Message, e.Pointer)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Status is the HTTP status for e's code; unknown codes are 500.
func (e *Error) Status() int { return StatusOf(e.Code) }

// StatusOf maps an error code to its HTTP status; unknown codes are 500.
func StatusOf(code string) int {
	if s, ok := statusByCode[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// ErrorCode returns the code of the first *Error in err's chain, or
// CodeInternal when there is none.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
