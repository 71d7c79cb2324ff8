package flywheel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client speaks the flywheel/1 routes of a gyre server (SPEC §4): POST
// /turns, and the claim, heartbeat, release and output routes that the
// server describes at /.well-known/gyre-flywheel.json. It validates every
// body it sends and every ClaimResponse it receives against the embedded
// contract.
//
// A Client is safe for concurrent use. It never logs and never puts its key
// or a lease token into an error message.
type Client struct {
	base      *url.URL
	key       string
	http      *http.Client
	userAgent string
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient makes the Client send its requests through hc instead of
// a default client.
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.http = hc } }

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) ClientOption { return func(c *Client) { c.userAgent = ua } }

// maxResponseBytes caps how much of an answer the Client reads.
const maxResponseBytes = 64 << 20

// NewClient returns a Client for the gyre server at baseURL (for example
// http://127.0.0.1:7070; a path prefix is kept) that authenticates with the
// agent key key.
func NewClient(baseURL, key string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("flywheel: server URL %q must be an absolute http(s) URL", baseURL)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("flywheel: server URL must not carry credentials, a query or a fragment")
	}
	if key == "" {
		return nil, errors.New("flywheel: an agent key is required")
	}
	c := &Client{base: u, key: key, http: &http.Client{}, userAgent: "gyre-flywheel/1"}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		c.http = &http.Client{}
	}
	return c, nil
}

// Sentinel errors that an *APIError matches with errors.Is, by its code.
var (
	// ErrLeaseLost is 409 lease_lost: the lease token is not the rollout's
	// current lease, or the lease lapsed. Nothing more may be reported.
	ErrLeaseLost = errors.New("flywheel: lease lost")
	// ErrRolloutFinished is 410 rollout_finished: the rollout already ended.
	ErrRolloutFinished = errors.New("flywheel: rollout finished")
	// ErrDeadlinePassed is 410 deadline_exceeded: the output arrived after
	// the rollout's deadline and the server's grace period.
	ErrDeadlinePassed = errors.New("flywheel: deadline passed")
	// ErrOutputConflict is 409 output_conflict: a different output was
	// already accepted for the rollout.
	ErrOutputConflict = errors.New("flywheel: output conflict")
	// ErrAlreadyStarted is 409 already_started: a release came after the
	// gateway counted a completion; submit an output instead.
	ErrAlreadyStarted = errors.New("flywheel: rollout already started")
)

var errorsByCode = map[string]error{
	"lease_lost":        ErrLeaseLost,
	"rollout_finished":  ErrRolloutFinished,
	"deadline_exceeded": ErrDeadlinePassed,
	"output_conflict":   ErrOutputConflict,
	"already_started":   ErrAlreadyStarted,
}

// APIError is a non-2xx answer of the server, decoded from gyre's error
// shape {"error":{"code","message","pointer"}} when the body has it.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the snake_case error code, or "" when the body had none.
	Code string
	// Message is the server's human sentence (or the status text).
	Message string
	// Pointer is the JSON Pointer of the body field at fault, if any.
	Pointer string
	// RetryAfter is the delay the Retry-After header asked for, or 0.
	RetryAfter time.Duration
}

// Error reports the status, code, message and pointer.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "flywheel: server answered %d", e.StatusCode)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Pointer != "" {
		b.WriteString(" (at " + e.Pointer + ")")
	}
	return b.String()
}

// Is matches the sentinel errors of this package by code.
func (e *APIError) Is(target error) bool {
	s, ok := errorsByCode[e.Code]
	return ok && s == target
}

// Temporary reports whether retrying the same request later may succeed:
// 408, 429 and every 5xx.
func (e *APIError) Temporary() bool {
	return e.StatusCode == http.StatusRequestTimeout || e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

// IsTemporary reports whether err is worth retrying: a transport error (no
// answer at all) or a temporary *APIError. A cancelled context is not.
func IsTemporary(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Temporary()
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return false
	}
	var te *TransportError
	return errors.As(err, &te)
}

// RetryAfter returns the delay a Retry-After header in err asked for, or 0.
func RetryAfter(err error) time.Duration {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.RetryAfter
	}
	return 0
}

// TransportError is a request that got no HTTP answer: the connection
// failed, timed out, or the answer could not be read.
type TransportError struct {
	// Op names the route, e.g. "claim".
	Op string
	// Err is the cause.
	Err error
}

// Error reports the route and the cause.
func (e *TransportError) Error() string { return "flywheel: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *TransportError) Unwrap() error { return e.Err }

// ClaimRequest is the optional body and query of a claim (SPEC §4.3).
type ClaimRequest struct {
	// MaxRollouts is 1..64; 0 means the server's default (1).
	MaxRollouts int
	// Lease asks for a lease length; 0 means the server's default. The
	// server clamps it and reports what it granted in lease_expires_ts.
	Lease time.Duration
	// WorkerID is a stable id of the worker, recorded on the rollout.
	WorkerID string
	// WorkerVersion is the worker's version, recorded on the rollout.
	WorkerVersion string
	// Wait long-polls up to this long (at most 30 s) for work.
	Wait time.Duration
	// IdempotencyKey makes a retried claim return the rollouts the first
	// attempt leased instead of leasing new ones.
	IdempotencyKey string
}

// ClaimResult is an answered claim.
type ClaimResult struct {
	// Response is the validated ClaimResponse.
	Response ClaimResponse
	// Sent and Received are the local times the request left and the
	// answer arrived.
	Sent, Received time.Time
	// ServerDate is the answer's Date header (second resolution), or zero
	// when it had none.
	ServerDate time.Time
}

// ClockOffset estimates the server's clock minus the local clock from the
// Date header (SPEC §4.5): the smallest offset consistent with the header's
// one-second resolution and the round trip, so that clocks in step give 0.
// It is 0 when the answer carried no Date.
func (r ClaimResult) ClockOffset() time.Duration {
	if r.ServerDate.IsZero() {
		return 0
	}
	// The server's clock read S at some local instant L with
	// Sent ≤ L ≤ Received and Date ≤ S < Date+1s, so the offset S−L lies
	// in (Date−Received, Date+1s−Sent).
	lo := r.ServerDate.Sub(r.Received)
	hi := r.ServerDate.Add(time.Second).Sub(r.Sent)
	switch {
	case lo > 0:
		return lo
	case hi < 0:
		return hi
	}
	return 0
}

// Claim leases up to req.MaxRollouts rollouts of agentID. The answer is
// validated against the contract: a ClaimResponse that breaks it is an
// error wrapping *ValidationError.
func (c *Client) Claim(ctx context.Context, agentID string, req ClaimRequest) (*ClaimResult, error) {
	body := map[string]any{}
	if req.MaxRollouts != 0 {
		body["max_rollouts"] = req.MaxRollouts
	}
	if req.Lease > 0 {
		body["lease_seconds"] = req.Lease.Seconds()
	}
	if req.WorkerID != "" {
		body["worker_id"] = req.WorkerID
	}
	if req.WorkerVersion != "" {
		body["worker_version"] = req.WorkerVersion
	}
	raw, err := marshal(body)
	if err != nil {
		return nil, err
	}
	path := "/agents/" + url.PathEscape(agentID) + "/claim"
	if req.Wait > 0 {
		path += "?wait_ms=" + strconv.FormatInt(min(req.Wait, 30*time.Second).Milliseconds(), 10)
	}
	hdr := http.Header{}
	if req.IdempotencyKey != "" {
		hdr.Set("Idempotency-Key", req.IdempotencyKey)
	}
	sent := time.Now()
	resp, b, err := c.do(ctx, "claim", path, hdr, raw)
	if err != nil {
		return nil, err
	}
	res := &ClaimResult{Sent: sent, Received: time.Now()}
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		res.ServerDate = d
	}
	if err := Unmarshal(DefClaimResponse, b, &res.Response); err != nil {
		return nil, fmt.Errorf("flywheel: claim answer breaks the contract: %w", err)
	}
	return res, nil
}

// Heartbeat renews the lease of rolloutID. Its answer is not parsed: the
// cadence is fixed at claim (SPEC §4.4).
func (c *Client) Heartbeat(ctx context.Context, rolloutID, leaseToken string) error {
	_, _, err := c.do(ctx, "heartbeat", "/rollouts/"+url.PathEscape(rolloutID)+"/heartbeat", leaseHeader(leaseToken), nil)
	return err
}

// Release hands back a rollout the worker will not run (SPEC §4.5).
func (c *Client) Release(ctx context.Context, rolloutID, leaseToken string) error {
	_, _, err := c.do(ctx, "release", "/rollouts/"+url.PathEscape(rolloutID)+"/release", leaseHeader(leaseToken), nil)
	return err
}

// OutputAnswer is the answer of an accepted output.
type OutputAnswer struct {
	// RolloutID is the rollout the output was accepted for.
	RolloutID string `json:"rollout_id"`
	// State is the rollout's state after the output, "submitted".
	State string `json:"state"`
	// Replayed is true when the server already held this very output.
	Replayed bool `json:"replayed"`
}

// SubmitOutput encodes out, validates it against the contract (a
// *ValidationError when it breaks it, before anything is sent) and submits
// it for rolloutID.
func (c *Client) SubmitOutput(ctx context.Context, rolloutID, leaseToken string, out RolloutOutput) (OutputAnswer, error) {
	raw, err := Marshal(DefRolloutOutput, out)
	if err != nil {
		return OutputAnswer{}, err
	}
	return c.SubmitOutputJSON(ctx, rolloutID, leaseToken, raw)
}

// SubmitOutputJSON submits an already encoded RolloutOutput as is.
func (c *Client) SubmitOutputJSON(ctx context.Context, rolloutID, leaseToken string, body []byte) (OutputAnswer, error) {
	_, b, err := c.do(ctx, "output", "/rollouts/"+url.PathEscape(rolloutID)+"/output", leaseHeader(leaseToken), body)
	if err != nil {
		return OutputAnswer{}, err
	}
	var a OutputAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return OutputAnswer{}, &TransportError{Op: "output", Err: fmt.Errorf("decode answer: %w", err)}
	}
	return a, nil
}

// TurnsAnswer is the answer of POST /turns: Accepted + Duplicates is the
// number of turns sent.
type TurnsAnswer struct {
	// Accepted counts turns stored now.
	Accepted int `json:"accepted"`
	// Duplicates counts turns the server already held, identical.
	Duplicates int `json:"duplicates"`
}

// PostTurns validates batch against the contract and sends it to POST
// /turns.
func (c *Client) PostTurns(ctx context.Context, batch ProductionTurnBatch) (TurnsAnswer, error) {
	raw, err := Marshal(DefProductionTurnBatch, batch)
	if err != nil {
		return TurnsAnswer{}, err
	}
	_, b, err := c.do(ctx, "turns", "/turns", nil, raw)
	if err != nil {
		return TurnsAnswer{}, err
	}
	var a TurnsAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return TurnsAnswer{}, &TransportError{Op: "turns", Err: fmt.Errorf("decode answer: %w", err)}
	}
	return a, nil
}

func leaseHeader(token string) http.Header {
	h := http.Header{}
	h.Set("Lease-Token", token)
	return h
}

// do POSTs body (nil for none) to path and returns the 2xx answer, or an
// *APIError or *TransportError.
func (c *Client) do(ctx context.Context, op, path string, hdr http.Header, body []byte) (*http.Response, []byte, error) {
	u := *c.base
	p, q, _ := strings.Cut(path, "?")
	u.RawPath = c.base.EscapedPath() + p
	u.Path, _ = url.PathUnescape(u.RawPath)
	u.RawQuery = q
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), rd)
	if err != nil {
		return nil, nil, fmt.Errorf("flywheel: %s: %w", op, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, c.failed(ctx, op, scrubURLError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, nil, c.failed(ctx, op, fmt.Errorf("read answer: %w", err))
	}
	if resp.StatusCode/100 != 2 {
		return resp, b, apiError(resp, b)
	}
	return resp, b, nil
}

// failed classifies a request that got no answer: a cancelled context is
// the caller's decision and not worth retrying; anything else, a deadline
// included, is a *TransportError.
func (c *Client) failed(ctx context.Context, op string, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("flywheel: %s: %w", op, context.Cause(ctx))
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return &TransportError{Op: op, Err: err}
}

// scrubURLError drops the URL from a *url.Error: it may carry a path an
// operator did not mean to log.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func apiError(resp *http.Response, b []byte) *APIError {
	e := &APIError{StatusCode: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Pointer string `json:"pointer"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &body) == nil {
		e.Code, e.Message, e.Pointer = body.Error.Code, body.Error.Message, body.Error.Pointer
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP
// date. Anything else, or a date in the past, is 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(min(n, 3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), time.Hour)
	}
	return 0
}
