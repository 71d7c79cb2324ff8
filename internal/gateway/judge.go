package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// Defaults of the zero fields of JudgeConfig.
const (
	DefaultJudgeTimeout        = 2 * time.Minute
	DefaultJudgeMaxAnswerBytes = 1 << 20
)

// JudgeConfig configures the model calls of judge graders (SPEC §8).
type JudgeConfig struct {
	// Upstreams are the servers a judge's policy may route to: the same
	// operator configuration, with the same private-address and redirect
	// rules, as the gateway's.
	Upstreams []Upstream
	// DefaultPolicy is the policy a judge grader without policy: uses; a
	// tenant resolves it among its own policies. Empty: none, and such a
	// judge abstains with judge_unavailable.
	DefaultPolicy string
	// Timeout bounds one call, answer included (default 2 min).
	Timeout time.Duration
	// MaxAnswerBytes caps the upstream's answer (default 1 MiB); a larger
	// one is a failed call.
	MaxAnswerBytes int64
}

// JudgeDeps are the judge's collaborators.
type JudgeDeps struct {
	// Policy finds the tenant's policy of that name; found false when it
	// has none. Required.
	Policy func(ctx context.Context, tenantID, name string) (p Policy, found bool, err error)
	// Record stores each call as a grading call; nil records nothing and
	// answers carry no call id.
	Record func(ctx context.Context, c store.GradingCall) error
	// Clock times calls; nil is the wall clock.
	Clock clock.Clock
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// Judge answers judge graders through a policy's upstream. The server
// calls the upstream itself — never through a rollout's gateway token —
// so a judge call is never one of the rollout's gateway calls, never
// counted on it and never charged to its budgets; each call is recorded
// apart as a grading call that the verdict links to.
type Judge struct {
	cfg       JudgeConfig
	d         JudgeDeps
	upstreams map[string]*upstream
}

var _ grade.Judge = (*Judge)(nil)

// NewJudge returns a Judge over the configured upstreams.
func NewJudge(cfg JudgeConfig, d JudgeDeps) (*Judge, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultJudgeTimeout
	}
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = DefaultJudgeMaxAnswerBytes
	}
	if d.Policy == nil {
		return nil, errors.New("judge: a policy lookup is required")
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	j := &Judge{cfg: cfg, d: d, upstreams: map[string]*upstream{}}
	for _, u := range cfg.Upstreams {
		up, err := newUpstream(u, cfg.Timeout)
		if err != nil {
			return nil, err
		}
		j.upstreams[u.Name] = up
	}
	return j, nil
}

// Complete asks the policy the grader names, else the default policy, for
// one answer. No policy, a policy the tenant does not have, or one whose
// upstream this server does not offer the tenant is
// grade.ErrJudgeUnavailable; everything that goes wrong on the way to an
// answer is an error (the verdict abstains with judge_error).
func (j *Judge) Complete(ctx context.Context, req grade.JudgeRequest) (grade.JudgeAnswer, error) {
	name := req.Policy
	if name == "" {
		name = j.cfg.DefaultPolicy
	}
	if name == "" {
		return grade.JudgeAnswer{}, fmt.Errorf("the grader names no policy and there is no default policy: %w", grade.ErrJudgeUnavailable)
	}
	pol, found, err := j.d.Policy(ctx, req.Subject.TenantID, name)
	if err != nil {
		return grade.JudgeAnswer{}, fmt.Errorf("read policy %q: %w", name, err)
	}
	if !found {
		return grade.JudgeAnswer{}, fmt.Errorf("policy %q does not exist: %w", name, grade.ErrJudgeUnavailable)
	}
	up, ok := j.upstreams[pol.Upstream]
	if !ok || !up.AllowsTenant(req.Subject.TenantName) {
		return grade.JudgeAnswer{}, fmt.Errorf("policy %q routes to upstream %q, which this server does not offer: %w",
			name, pol.Upstream, grade.ErrJudgeUnavailable)
	}
	if !up.Speaks(ProtocolChat) {
		// The judge speaks Chat Completions; the gateway never translates.
		return grade.JudgeAnswer{}, fmt.Errorf("policy %q routes to upstream %q, which speaks %s, not chat: %w",
			name, pol.Upstream, protocolList(up.speaks()), grade.ErrJudgeUnavailable)
	}
	body, err := judgeBody(pol, req.Messages)
	if err != nil {
		return grade.JudgeAnswer{}, err
	}

	call := store.GradingCall{
		TenantID: req.Subject.TenantID, SubjectKind: req.Subject.Kind, SubjectID: req.Subject.ID, Attempt: req.Attempt,
		Policy: name, Upstream: pol.Upstream, Model: pol.Model, Request: body, StartedAt: j.d.Clock.Now(),
	}
	text, callErr := j.post(ctx, up, body, &call)
	call.DoneAt = j.d.Clock.Now()
	if callErr != nil {
		msg := strings.ToValidUTF8(strings.ReplaceAll(callErr.Error(), "\x00", ""), "?")
		call.Error = &msg
	}
	ans := grade.JudgeAnswer{Text: text}
	if j.d.Record != nil {
		id, err := uuid.NewV7()
		if err != nil {
			return grade.JudgeAnswer{}, fmt.Errorf("grading call id: %w", err)
		}
		call.ID = id.String()
		if err := j.d.Record(ctx, call); err != nil {
			// An unrecorded judgement could not be audited or linked:
			// abstain, and let a regrade judge again.
			return grade.JudgeAnswer{}, fmt.Errorf("record grading call: %w", err)
		}
		ans.CallID = call.ID
	}
	return ans, callErr
}

// judgeBody is the chat request of a judge call: the prompt, then the
// policy's model and sampling overrides, as the gateway forwards them.
func judgeBody(pol Policy, msgs []grade.Message) ([]byte, error) {
	raw, err := json.Marshal(struct {
		Messages []grade.Message `json:"messages"`
	}{msgs})
	if err != nil {
		return nil, fmt.Errorf("judge request: %w", err)
	}
	cr, aerr := parseChatRequest(raw)
	if aerr != nil {
		return nil, fmt.Errorf("judge request: %s", aerr.Message)
	}
	pol.CaptureTokens = false // a judge's answer is read, never trained on
	return cr.forward(pol).body, nil
}

// post sends one judge request and reads the answer's text, filling the
// call's status, response and usage.
func (j *Judge) post(ctx context.Context, up *upstream, body []byte, call *store.GradingCall) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, j.cfg.Timeout)
	defer cancel()
	resp, err := up.post(ctx, ProtocolChat, body, false)
	if err != nil {
		return "", errors.New(upstreamErrorText(up.Name, err))
	}
	defer resp.Body.Close()
	call.Status = resp.StatusCode
	b, err := io.ReadAll(io.LimitReader(resp.Body, j.cfg.MaxAnswerBytes+1))
	if int64(len(b)) > j.cfg.MaxAnswerBytes {
		call.Response = redactKey(b[:j.cfg.MaxAnswerBytes], up.APIKey)
		return "", fmt.Errorf("upstream %s answered more than %d bytes", up.Name, j.cfg.MaxAnswerBytes)
	}
	call.Response = redactKey(b, up.APIKey)
	if err != nil {
		return "", errors.New(upstreamErrorText(up.Name, err))
	}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return "", fmt.Errorf("upstream %s answered a redirect (%d), which gyre never follows", up.Name, resp.StatusCode)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return "", fmt.Errorf("upstream %s answered status %d", up.Name, resp.StatusCode)
	}
	var c struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage json.RawMessage `json:"usage"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return "", fmt.Errorf("upstream %s answered something other than a chat completion", up.Name)
	}
	if len(c.Usage) > 0 && !isNull(c.Usage) && json.Valid(c.Usage) && utf8.Valid(c.Usage) {
		call.Usage = c.Usage
	}
	if len(c.Choices) == 0 || c.Choices[0].Message.Content == nil {
		return "", fmt.Errorf("upstream %s answered a chat completion without message content", up.Name)
	}
	return *c.Choices[0].Message.Content, nil
}

// redactKey removes an upstream's own key from a body it sent back, so
// that a server echoing its Authorization header never puts the
// operator's key into the store.
func redactKey(b []byte, key string) []byte {
	if key == "" || !bytes.Contains(b, []byte(key)) {
		return b
	}
	return bytes.ReplaceAll(b, []byte(key), []byte("[redacted]"))
}

// PolicyStore is what StorePolicies reads.
type PolicyStore interface {
	GetPolicy(ctx context.Context, tenantID, name string) (store.Policy, error)
}

// StorePolicies looks judge policies up among a tenant's stored policies,
// as gyre serve does.
func StorePolicies(st PolicyStore) func(ctx context.Context, tenantID, name string) (Policy, bool, error) {
	return func(ctx context.Context, tenantID, name string) (Policy, bool, error) {
		sp, err := st.GetPolicy(ctx, tenantID, name)
		if errors.Is(err, store.ErrNotFound) {
			return Policy{}, false, nil
		}
		if err != nil {
			return Policy{}, false, err
		}
		p, err := ParsePolicy(sp.Body)
		if err != nil {
			return Policy{}, false, err
		}
		return p, true, nil
	}
}
