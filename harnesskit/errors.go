package harnesskit

import (
	"errors"
	"fmt"
	"net/http"
)

// The error codes a Server answers with. The contract defines no error
// responses; the kit uses gyre's error shape (SPEC §2),
// {"error":{"code","message","pointer"}}, so that a client can tell what went
// wrong without reading prose.
const (
	// CodeInvalidBody is a POST /runs body that is not a valid RunRequest
	// (422), or a multipart body that does not deliver the files it names.
	CodeInvalidBody = "invalid_body"
	// CodeInvalidInput is a RunRequest whose input does not match the
	// declared input_schema, or the default question schema (422).
	CodeInvalidInput = "invalid_input"
	// CodeInvalidQuery is a GET /runs query parameter that does not parse
	// (400).
	CodeInvalidQuery = "invalid_query"
	// CodeInvalidPathParam is a path with an empty, "." or ".." segment, or
	// a workspace path that is not workspace-relative (400).
	CodeInvalidPathParam = "invalid_path_param"
	// CodeUnauthorized is a missing or wrong x-api-key (401).
	CodeUnauthorized = "unauthorized"
	// CodeNotFound is an unknown run, workspace file or endpoint (404).
	CodeNotFound = "not_found"
	// CodeMethodNotAllowed is a known path with the wrong method (405).
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeRunNotFinished is a trajectory asked for before the run reached a
	// terminal status (409).
	CodeRunNotFinished = "run_not_finished"
	// CodeBodyTooLarge is a request body, or one fixture file, over its
	// limit (413).
	CodeBodyTooLarge = "body_too_large"
	// CodeUnsupportedMedia is a POST /runs body that is neither JSON nor
	// multipart, or a delivery the harness does not accept (415).
	CodeUnsupportedMedia = "unsupported_media_type"
	// CodeUnavailable is a full run queue or a server shutting down (503,
	// with Retry-After).
	CodeUnavailable = "unavailable"
	// CodeInternal is anything else; the details go to the log only (500).
	CodeInternal = "internal"
)

var statusByCode = map[string]int{
	CodeInvalidBody:      http.StatusUnprocessableEntity,
	CodeInvalidInput:     http.StatusUnprocessableEntity,
	CodeInvalidQuery:     http.StatusBadRequest,
	CodeInvalidPathParam: http.StatusBadRequest,
	CodeUnauthorized:     http.StatusUnauthorized,
	CodeNotFound:         http.StatusNotFound,
	CodeMethodNotAllowed: http.StatusMethodNotAllowed,
	CodeRunNotFinished:   http.StatusConflict,
	CodeBodyTooLarge:     http.StatusRequestEntityTooLarge,
	CodeUnsupportedMedia: http.StatusUnsupportedMediaType,
	CodeUnavailable:      http.StatusServiceUnavailable,
	CodeInternal:         http.StatusInternalServerError,
}

// Error is the body of every error a Server answers with, under the key
// "error".
type Error struct {
	// Code is a stable snake_case code, one of the Code constants.
	Code string `json:"code"`
	// Message is a human sentence saying what was wrong.
	Message string `json:"message"`
	// Pointer is an RFC 6901 JSON Pointer into the request body, when a
	// member of it is at fault.
	Pointer string `json:"pointer,omitempty"`
}

// Error returns the code and message.
func (e *Error) Error() string {
	if e.Pointer != "" {
		return fmt.Sprintf("%s: %s (at %s)", e.Code, e.Message, e.Pointer)
	}
	return e.Code + ": " + e.Message
}

// Status returns the HTTP status of e's code (500 for an unknown one).
func (e *Error) Status() int {
	if s, ok := statusByCode[e.Code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) at(pointer string) *Error {
	e.Pointer = pointer
	return e
}

// errorBody is the JSON envelope of an Error.
type errorBody struct {
	Error *Error `json:"error"`
}

// writeError answers err: an *Error as itself, an oversized body as 413, and
// anything else as a 500 whose cause is logged, never shown.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &e):
	case errors.As(err, &tooLarge):
		e = errorf(CodeBodyTooLarge, "the request body is over the limit of %d bytes", tooLarge.Limit)
	default:
		s.log.ErrorContext(r.Context(), "harness request failed",
			"method", r.Method, "path", r.URL.Path, "error", err)
		e = errorf(CodeInternal, "internal error")
	}
	switch e.Code {
	case CodeUnavailable:
		w.Header().Set("Retry-After", "1")
	case CodeUnauthorized:
		w.Header().Set("WWW-Authenticate", `ApiKey header="x-api-key"`)
	}
	writeJSON(w, e.Status(), errorBody{Error: e})
}

// writeJSON writes v as the JSON body of a status response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
