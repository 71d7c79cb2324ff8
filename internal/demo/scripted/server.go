package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// created is the fixed creation time of every completion: the model is
// deterministic, its answers carry no clock.
const created = 1767225600 // 2026-01-01T00:00:00Z

// maxBody bounds a request body.
const maxBody = 8 << 20

// Handler serves the scripted model's OpenAI-compatible API under /v1:
// GET /v1/models, GET /v1/models/{id} and POST /v1/chat/completions.
type Handler struct {
	n atomic.Int64
}

// NewHandler returns the scripted model's HTTP handler.
func NewHandler() *Handler { return &Handler{} }

// ServeHTTP routes a request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case p == "/v1/chat/completions" && r.Method == http.MethodPost:
		h.chat(w, r)
	case p == "/v1/models" && r.Method == http.MethodGet:
		data := []any{}
		for _, m := range Models {
			data = append(data, modelObject(m))
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	case strings.HasPrefix(p, "/v1/models/") && r.Method == http.MethodGet:
		id := strings.TrimPrefix(p, "/v1/models/")
		if !slices.Contains(Models, id) {
			unknownModel(w, id)
			return
		}
		writeJSON(w, http.StatusOK, modelObject(id))
	default:
		writeError(w, http.StatusNotFound, "not_found", "", fmt.Sprintf("the %s serves only GET /v1/models and POST /v1/chat/completions, not %s %s", Name, r.Method, r.URL.Path))
	}
}

func modelObject(id string) map[string]any {
	return map[string]any{"id": id, "object": "model", "created": created, "owned_by": Name}
}

// chatRequest is what the model reads of a Chat Completions request.
type chatRequest struct {
	Model         string    `json:"model"`
	Messages      []message `json:"messages"`
	Stream        bool      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (h *Handler) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "the request body is not a JSON chat completion request: "+err.Error())
		return
	}
	if req.Model == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "model", "model is required: "+strings.Join(Models, " or "))
		return
	}
	if !slices.Contains(Models, req.Model) {
		unknownModel(w, req.Model)
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "messages", "messages must hold at least one message")
		return
	}
	rep := decide(req.Model, req.Messages)
	id := fmt.Sprintf("chatcmpl-scripted-%d", h.n.Add(1))
	usage := usageOf(req.Messages, rep)
	if req.Stream {
		streamReply(w, id, req.Model, rep, usage, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	finish := "stop"
	if rep.toolName != "" {
		finish = "tool_calls"
		msg["tool_calls"] = []any{map[string]any{"id": rep.toolID, "type": "function",
			"function": map[string]any{"name": rep.toolName, "arguments": rep.arguments()}}}
	} else {
		msg["content"] = rep.content
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": id, "object": "chat.completion", "created": created, "model": req.Model,
		"system_fingerprint": "scripted-demo-model",
		"choices":            []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage":              usage,
	})
}

func (r reply) arguments() string {
	b, _ := json.Marshal(r.toolArgs)
	return string(b)
}

// usageOf counts tokens the simple way, about four bytes each, so that
// usage numbers are present, plausible and deterministic.
func usageOf(msgs []message, rep reply) map[string]any {
	in := 0
	for _, m := range msgs {
		in += 4 + (len(m.Content)+3)/4
		for _, tc := range m.ToolCalls {
			in += (len(tc.Function.Name) + len(tc.Function.Arguments) + 3) / 4
		}
	}
	out := 1 + (len(rep.content)+3)/4
	if rep.toolName != "" {
		out = 1 + (len(rep.toolName)+len(rep.arguments())+3)/4
	}
	return map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
}

// streamReply writes the reply as Server-Sent Events: the role, the text
// in pieces or the tool call (name, then its arguments), the finish
// reason, the usage chunk when asked, then [DONE].
func streamReply(w http.ResponseWriter, id, model string, rep reply, usage map[string]any, withUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	chunk := func(choices []any, usage any) {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"system_fingerprint": "scripted-demo-model", "choices": choices, "usage": usage})
		fmt.Fprintf(w, "data: %s\n\n", b)
		_ = rc.Flush()
	}
	delta := func(d map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish, "logprobs": nil}}
	}
	chunk(delta(map[string]any{"role": "assistant", "content": ""}, nil), nil)
	finish := "stop"
	if rep.toolName != "" {
		finish = "tool_calls"
		chunk(delta(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": rep.toolID, "type": "function",
			"function": map[string]any{"name": rep.toolName, "arguments": ""}}}}, nil), nil)
		args := rep.arguments()
		for _, part := range split(args, 2) {
			chunk(delta(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": part}}}}, nil), nil)
		}
	} else {
		for _, part := range split(rep.content, 3) {
			chunk(delta(map[string]any{"content": part}, nil), nil)
		}
	}
	chunk(delta(map[string]any{}, finish), nil)
	if withUsage {
		chunk([]any{}, usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

// split cuts s into at most n pieces at byte offsets that keep UTF-8 whole.
func split(s string, n int) []string {
	if len(s) == 0 {
		return nil
	}
	var out []string
	size := (len(s) + n - 1) / n
	for len(s) > 0 {
		end := min(size, len(s))
		for end < len(s) && (s[end]&0xC0) == 0x80 {
			end++
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

func unknownModel(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, "invalid_request_error", "model",
		fmt.Sprintf("The model %q does not exist: the %s serves %s", id, Name, strings.Join(Models, " and ")))
}

// writeError writes an OpenAI-shaped error.
func writeError(w http.ResponseWriter, status int, typ, param, msg string) {
	code := any(nil)
	if status == http.StatusNotFound && param == "model" {
		code = "model_not_found"
	}
	var p any
	if param != "" {
		p = param
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Upstream is the scripted model served on a TCP listener.
type Upstream struct {
	// URL is the OpenAI base URL, http://HOST:PORT/v1.
	URL  string
	srv  *http.Server
	done chan struct{}
}

// Start serves the scripted model on addr (HOST:PORT; port 0 picks a free
// one) until Close. log receives server errors (nil: discarded).
func Start(addr string, log *slog.Logger) (*Upstream, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("scripted demo model: listen: %w", err)
	}
	u := &Upstream{
		URL:  "http://" + ln.Addr().String() + "/v1",
		srv:  &http.Server{Handler: NewHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		done: make(chan struct{}),
	}
	go func() {
		defer close(u.done)
		if err := u.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("scripted demo model stopped", slog.Any("error", err))
		}
	}()
	return u, nil
}

// Close stops the server, waiting for open requests until ctx ends.
func (u *Upstream) Close(ctx context.Context) error {
	err := u.srv.Shutdown(ctx)
	<-u.done
	return err
}
