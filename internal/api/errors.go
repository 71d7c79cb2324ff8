package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/hangup"
	"github.com/gyrehq/gyre/internal/store"
)

// errorBody is the JSON error shape of SPEC §2.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Pointer string `json:"pointer,omitempty"`
}

// writeError is the one adapter from a handler's error to a response. A
// *gyre.Error answers its own status and message; store.ErrNotFound is 404;
// store.ErrInvalidCursor is 400 invalid_query; an oversized body is 413; a
// client that went away (the request's context cancelled) is no error of
// the server's and gets no answer; anything else is logged with the
// request id and answered as a generic 500 that shows no internals.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	info := infoFrom(ctx)
	if clientGone(ctx, err) {
		// The client hung up (a worker stopping during a long-poll
		// claim, a closed tab): nothing went wrong in the server, and
		// nobody reads an answer. The access log records nginx's 499.
		s.log.LogAttrs(ctx, slog.LevelDebug, "client went away",
			slog.String("request_id", info.id),
			slog.String("route", info.route),
			slog.Any("error", err))
		if !info.wroteHeader() {
			w.WriteHeader(statusClientClosedRequest)
		}
		return
	}
	ge := s.classify(ctx, err)
	status := ge.Status()
	if status >= 500 {
		s.log.LogAttrs(ctx, slog.LevelError, "request failed",
			slog.String("request_id", info.id),
			slog.String("route", info.route),
			slog.String("code", ge.Code),
			slog.Any("error", err))
	}
	if info.wroteHeader() {
		// Too late to answer with an error: the status line is gone.
		return
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gyre"`)
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Code: ge.Code, Message: ge.Message, Pointer: ge.Pointer}})
}

// statusClientClosedRequest is nginx's status for a request whose client
// closed the connection before the answer: never sent, only recorded.
const statusClientClosedRequest = hangup.Status

// clientGone says err is the request's own context being cancelled: the
// client closed the connection (see package hangup).
func clientGone(ctx context.Context, err error) bool { return hangup.ClientGone(ctx, err) }

// classify maps err to the *gyre.Error a client may see.
func (s *Server) classify(ctx context.Context, err error) *gyre.Error {
	var ge *gyre.Error
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &ge):
		if ge.Message == "" {
			c := *ge
			c.Message = http.StatusText(ge.Status())
			ge = &c
		}
		if ge.Status() == http.StatusInternalServerError {
			// A 500 never shows what went wrong inside; the codes mapped
			// to 502, 503 and 504 (unavailable, a harness that failed)
			// carry messages written for the client.
			return internalError(ctx)
		}
		return ge
	case errors.Is(err, store.ErrNotFound):
		return gyre.Errorf(gyre.CodeNotFound, "not found")
	case errors.Is(err, store.ErrNUL):
		// The API refuses U+0000 in gyre's own fields before the store;
		// this answers a field it did not check the same way.
		var fe *store.FieldError
		if errors.As(err, &fe) && strings.HasPrefix(fe.Pointer, "/") {
			return errNUL(fe.Pointer)
		}
		return gyre.Errorf(gyre.CodeInvalidBody, "a text field must not contain U+0000")
	case errors.Is(err, store.ErrInvalidCursor):
		return gyre.Errorf(gyre.CodeInvalidQuery, "cursor must be a next_cursor value from a previous page of this list")
	case errors.As(err, &tooLarge):
		return errBodyTooLarge(tooLarge.Limit)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return gyre.Errorf(gyre.CodeUnavailable, "the request took too long and was stopped; request id %s", infoFrom(ctx).id)
	}
	return internalError(ctx)
}

func internalError(ctx context.Context) *gyre.Error {
	return gyre.Errorf(gyre.CodeInternal, "internal server error; the server log has details under request id %s", infoFrom(ctx).id)
}

func errBodyTooLarge(limit int64) *gyre.Error {
	return gyre.Errorf(gyre.CodeBodyTooLarge, "request body is larger than the limit of %d bytes", limit)
}

// writeJSON answers v as JSON with status. API answers are never cached:
// some of them carry a secret shown once.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only a programming error gets here (an unmarshalable type).
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"internal server error"}}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
