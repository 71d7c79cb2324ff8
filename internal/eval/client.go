package eval

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

	"github.com/gyrehq/gyre/harnesskit"
)

// Limits bound what the runner reads from a harness, which is untrusted
// (SPEC §7.2). Sizes are of decoded bytes.
type Limits struct {
	// Capabilities caps GET /capabilities (default 1 MiB).
	Capabilities int64
	// RunStatus caps GET /runs/{id}, and also RunCreated and the workspace
	// listing (default 8 MiB).
	RunStatus int64
	// Trajectory caps GET /runs/{id}/trajectory (default 256 MiB); over it
	// the trajectory is invalid with reason too_large.
	Trajectory int64
	// File caps one workspace file (default 64 MiB).
	File int64
	// Files caps the files fetched per run (default 1,000).
	Files int
}

// DefaultLimits are the limits of SPEC §7.2.
func DefaultLimits() Limits {
	return Limits{Capabilities: 1 << 20, RunStatus: 8 << 20, Trajectory: 256 << 20, File: 64 << 20, Files: 1000}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.Capabilities <= 0 {
		l.Capabilities = d.Capabilities
	}
	if l.RunStatus <= 0 {
		l.RunStatus = d.RunStatus
	}
	if l.Trajectory <= 0 {
		l.Trajectory = d.Trajectory
	}
	if l.File <= 0 {
		l.File = d.File
	}
	if l.Files <= 0 {
		l.Files = d.Files
	}
	return l
}

// ErrorKind classifies a failed call to a harness (SPEC §7.2).
type ErrorKind int

// The kinds of failed call.
const (
	// KindTransport is a connection, TLS or timeout failure.
	KindTransport ErrorKind = iota + 1
	// KindServer is a 5xx answer other than backpressure.
	KindServer
	// KindInvalid is an answer that breaks the contract: a redirect, an
	// unexpected status, a malformed or oversized body.
	KindInvalid
	// KindClient is a 4xx answer other than backpressure.
	KindClient
	// KindBackpressure is 429 or 503 with a Retry-After header.
	KindBackpressure
)

// String names the kind as run records and messages show it.
func (k ErrorKind) String() string {
	switch k {
	case KindTransport:
		return "transport"
	case KindServer:
		return "server_error"
	case KindInvalid:
		return "invalid_response"
	case KindClient:
		return "client_error"
	case KindBackpressure:
		return "backpressure"
	}
	return "unknown"
}

// CallError is a failed call to a harness.
type CallError struct {
	// Op is the call, e.g. "POST /runs".
	Op   string
	Kind ErrorKind
	// Status is the HTTP status, 0 for a transport error.
	Status int
	// RetryAfter is the wait a backpressure answer asked for.
	RetryAfter time.Duration
	// Reason is a stable code for invalid responses, e.g. "too_large".
	Reason string
	Err    error
}

// Error describes the call and what went wrong.
func (e *CallError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	switch {
	case e.Kind == KindBackpressure:
		fmt.Fprintf(&b, "backpressure (%d, retry after %s)", e.Status, e.RetryAfter)
	case e.Status != 0:
		fmt.Fprintf(&b, "%s (HTTP %d)", e.Kind, e.Status)
	default:
		b.WriteString(e.Kind.String())
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *CallError) Unwrap() error { return e.Err }

// Retryable reports whether the failure is an error a run retries:
// transport errors, 5xx and invalid responses.
func (e *CallError) Retryable() bool {
	return e.Kind == KindTransport || e.Kind == KindServer || e.Kind == KindInvalid
}

// errTooLarge is a body over its limit.
var errTooLarge = errors.New("body too large")

// maxRunIDLen bounds a harness run id.
const maxRunIDLen = 1024

// Client calls one harness. It never follows redirects (a 3xx is an
// invalid response), sends x-api-key only to the harness's own origin, and
// reads at most Limits of every answer. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	key    string
	hc     *http.Client
	limits Limits
	// callTimeout bounds one JSON call; downloadTimeout one trajectory or
	// file download.
	callTimeout, downloadTimeout time.Duration
}

// NewClient returns a client for the harness at baseURL (http or https,
// no query or fragment). hc supplies the transport (nil: a default one);
// its redirect policy is replaced.
func NewClient(baseURL, apiKey string, hc *http.Client, limits Limits) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	switch {
	case err != nil:
		return nil, fmt.Errorf("harness url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("harness url %q: want http:// or https://", baseURL)
	case u.Host == "":
		return nil, fmt.Errorf("harness url %q has no host", baseURL)
	case u.User != nil:
		return nil, errors.New("harness url must not carry credentials: use --api-key")
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("harness url %q must not have a query or fragment", baseURL)
	}
	var c http.Client
	if hc != nil {
		c = *hc
	}
	if c.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 256
		c.Transport = t
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.Jar = nil
	return &Client{base: u, key: apiKey, hc: &c, limits: limits.withDefaults(),
		callTimeout: time.Minute, downloadTimeout: 10 * time.Minute}, nil
}

// BaseURL is the harness's base URL.
func (c *Client) BaseURL() string { return c.base.String() }

// runPath is /runs/{id} with id escaped as one path segment.
func runPath(runID string) string { return "/runs/" + url.PathEscape(runID) }

// WorkspacePath escapes a workspace-relative path segment by segment for
// GET /runs/{id}/files/{path}. It refuses absolute paths, empty, "." and
// ".." segments, backslashes and control characters.
func WorkspacePath(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if strings.HasPrefix(p, "/") {
		return "", errors.New("absolute path")
	}
	if len(p) > 4096 {
		return "", errors.New("path longer than 4096 bytes")
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		switch {
		case s == "":
			return "", errors.New("empty path segment")
		case s == "." || s == "..":
			return "", fmt.Errorf("%q segment", s)
		case strings.ContainsRune(s, '\\'):
			return "", errors.New("backslash in path")
		case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			return "", errors.New("control character in path")
		}
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/"), nil
}

// do sends one request to the harness; path is already escaped. The
// caller closes the response body.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	u := c.base.String() + path
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if mb, ok := body.(*multipartBody); ok {
		// The length is known: never send a multipart body chunked.
		req.ContentLength = mb.size
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "gyre-eval")
	// The key goes to the configured origin only.
	if c.key != "" && req.URL.Scheme == c.base.Scheme && req.URL.Host == c.base.Host {
		req.Header.Set("x-api-key", c.key)
	}
	return c.hc.Do(req)
}

// call sends a request and classifies its answer: one of ok statuses, or
// a *CallError. On success the caller closes the body.
func (c *Client) call(ctx context.Context, op, method, path string, body io.Reader, contentType string, ok ...int) (*http.Response, error) {
	resp, err := c.do(ctx, method, path, body, contentType)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &CallError{Op: op, Kind: KindTransport, Err: err}
	}
	for _, s := range ok {
		if resp.StatusCode == s {
			return resp, nil
		}
	}
	defer resp.Body.Close()
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10) // keep the connection reusable
	return nil, classifyStatus(op, resp)
}

// classifyStatus turns an unexpected status into a *CallError.
func classifyStatus(op string, resp *http.Response) *CallError {
	s := resp.StatusCode
	e := &CallError{Op: op, Status: s}
	switch {
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			e.Kind, e.RetryAfter = KindBackpressure, d
			return e
		}
		if s == http.StatusServiceUnavailable {
			e.Kind = KindServer
		} else {
			e.Kind = KindClient
		}
	case s >= 500:
		e.Kind = KindServer
	case s >= 400:
		e.Kind = KindClient
	case s >= 300 && s < 400:
		e.Kind, e.Reason = KindInvalid, "redirect"
		e.Err = errors.New("redirects are not followed")
	default:
		e.Kind, e.Reason = KindInvalid, "unexpected_status"
	}
	return e
}

// maxRetryAfter caps the wait a harness may ask for.
const maxRetryAfter = 5 * time.Minute

// parseRetryAfter reads delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0, false
		}
		return min(time.Duration(n)*time.Second, maxRetryAfter), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return min(d, maxRetryAfter), true
}

// readAll reads a whole body of at most limit bytes.
func readAll(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errTooLarge
	}
	return b, nil
}

func invalid(op, reason string, err error) *CallError {
	return &CallError{Op: op, Kind: KindInvalid, Status: http.StatusOK, Reason: reason, Err: err}
}

// readJSON reads a 2xx answer's body, at most limit bytes, as one JSON
// object.
func readJSON(op string, resp *http.Response, limit int64) ([]byte, error) {
	defer resp.Body.Close()
	b, err := readAll(resp.Body, limit)
	if errors.Is(err, errTooLarge) {
		return nil, invalid(op, "too_large", fmt.Errorf("answer larger than %d bytes", limit))
	}
	if err != nil {
		return nil, &CallError{Op: op, Kind: KindTransport, Status: resp.StatusCode, Err: err}
	}
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		return nil, invalid(op, "not_json", errors.New("answer is not a JSON object"))
	}
	return t, nil
}

// Capabilities fetches GET /capabilities and returns it with its raw JSON,
// the snapshot an experiment keeps. It checks the contract's shape: agent
// is a string, flags are booleans, limits.max_concurrent_runs an integer.
func (c *Client) Capabilities(ctx context.Context) (harnesskit.Capabilities, json.RawMessage, error) {
	const op = "GET /capabilities"
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	resp, err := c.call(ctx, op, http.MethodGet, "/capabilities", nil, "", http.StatusOK)
	if err != nil {
		return harnesskit.Capabilities{}, nil, err
	}
	raw, err := readJSON(op, resp, c.limits.Capabilities)
	if err != nil {
		return harnesskit.Capabilities{}, nil, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return harnesskit.Capabilities{}, nil, invalid(op, "not_json", err)
	}
	if a, ok := members["agent"]; !ok || !isJSONString(a) {
		return harnesskit.Capabilities{}, nil, invalid(op, "schema", errors.New("capabilities need a string agent"))
	}
	var caps harnesskit.Capabilities
	if err := json.Unmarshal(raw, &caps); err != nil {
		return harnesskit.Capabilities{}, nil, invalid(op, "schema", fmt.Errorf("capabilities do not match the contract: %w", err))
	}
	if m := caps.Limits; m != nil && m.MaxConcurrentRuns != nil && *m.MaxConcurrentRuns < 1 {
		return harnesskit.Capabilities{}, nil, invalid(op, "schema", fmt.Errorf("limits.max_concurrent_runs %d is below 1", *m.MaxConcurrentRuns))
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return harnesskit.Capabilities{}, nil, invalid(op, "not_json", err)
	}
	return caps, compact.Bytes(), nil
}

func isJSONString(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '"'
}

// Fixture is one fixture file a run request carries.
type Fixture struct {
	// Name is the fixture key shown to the agent.
	Name string
	// Context describes the file, "" when none.
	Context string
	// URL is set for a file_urls delivery.
	URL string
	// Open opens the bytes for a multipart delivery; Size is their
	// length.
	Open func(ctx context.Context) (io.ReadCloser, error)
	Size int64
}

// CreateRequest is one POST /runs.
type CreateRequest struct {
	// Input is the case input, sent verbatim.
	Input json.RawMessage
	// Model is sent only when non-nil (the harness accepts model_override).
	Model *string
	// Metadata identifies the experiment, case and repetition.
	Metadata harnesskit.RunMetadata
	// Files are the case's fixtures.
	Files []Fixture
	// Multipart delivers Files as multipart parts instead of URLs.
	Multipart bool
}

// CreateRun starts a run with POST /runs and returns the harness's run id.
// 200, 201 and 202 with a valid RunCreated are accepted.
func (c *Client) CreateRun(ctx context.Context, r CreateRequest) (string, error) {
	const op = "POST /runs"
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	rr := harnesskit.RunRequest{Input: r.Input, Model: r.Model, Metadata: &r.Metadata}
	for _, f := range r.Files {
		ref := harnesskit.FileRef{Name: f.Name}
		if f.Context != "" {
			fc := f.Context
			ref.Context = &fc
		}
		if !r.Multipart {
			u := f.URL
			ref.URL = &u
		}
		rr.Files = append(rr.Files, ref)
	}
	payload, err := rr.MarshalJSON()
	if err != nil {
		return "", fmt.Errorf("encode run request: %w", err)
	}
	var (
		body        io.Reader = bytes.NewReader(payload)
		contentType           = "application/json"
		mb          *multipartBody
	)
	if r.Multipart && len(r.Files) > 0 {
		mb, err = newMultipartBody(ctx, payload, r.Files)
		if err != nil {
			return "", fmt.Errorf("encode run request: %w", err)
		}
		// The transport closes the body, even on errors.
		body, contentType = mb, mb.contentType
	}
	resp, err := c.call(ctx, op, http.MethodPost, "/runs", body, contentType,
		http.StatusOK, http.StatusCreated, http.StatusAccepted)
	if ce := (*CallError)(nil); mb != nil && errors.As(err, &ce) && ce.Kind == KindTransport {
		ce.Err = mb.explain(ce.Err)
	}
	if err != nil {
		return "", err
	}
	raw, err := readJSON(op, resp, c.limits.RunStatus)
	if err != nil {
		return "", err
	}
	var created struct {
		RunID *string `json:"run_id"`
	}
	if err := json.Unmarshal(raw, &created); err != nil || created.RunID == nil {
		return "", invalid(op, "schema", errors.New("RunCreated needs a string run_id"))
	}
	id := *created.RunID
	if id == "" || id == "." || id == ".." || len(id) > maxRunIDLen {
		return "", invalid(op, "schema", fmt.Errorf("run_id %q is not usable as a path segment", truncate(id, 64)))
	}
	return id, nil
}

// RunStatus polls GET /runs/{id}. An answer that breaks the contract — no
// model, an unknown status, a completed run with neither answer nor
// output, members of the wrong type — is a KindInvalid *CallError.
func (c *Client) RunStatus(ctx context.Context, runID string) (harnesskit.RunStatus, error) {
	const op = "GET /runs/{run_id}"
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	resp, err := c.call(ctx, op, http.MethodGet, runPath(runID), nil, "", http.StatusOK)
	if err != nil {
		return harnesskit.RunStatus{}, err
	}
	raw, err := readJSON(op, resp, c.limits.RunStatus)
	if err != nil {
		return harnesskit.RunStatus{}, err
	}
	st, err := decodeRunStatus(raw)
	if err != nil {
		return harnesskit.RunStatus{}, invalid(op, "schema", err)
	}
	return st, nil
}

// decodeRunStatus decodes and checks a RunStatus.
func decodeRunStatus(raw []byte) (harnesskit.RunStatus, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return harnesskit.RunStatus{}, err
	}
	model, ok := m["model"]
	if !ok || !isJSONString(model) {
		return harnesskit.RunStatus{}, errors.New("RunStatus has no model")
	}
	var st harnesskit.RunStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		return harnesskit.RunStatus{}, fmt.Errorf("RunStatus does not match the contract: %w", err)
	}
	if strings.TrimSpace(st.Model) == "" {
		return harnesskit.RunStatus{}, errors.New("RunStatus model is empty")
	}
	if !st.Status.Valid() {
		return harnesskit.RunStatus{}, fmt.Errorf("RunStatus status %q is not one of queued, running, completed, failed, cancelled", truncate(string(st.Status), 64))
	}
	if o := bytes.TrimSpace(st.Output); len(o) > 0 && o[0] != '{' && !bytes.Equal(o, []byte("null")) {
		return harnesskit.RunStatus{}, errors.New("RunStatus output must be an object or null")
	}
	if bytes.Equal(bytes.TrimSpace(st.Output), []byte("null")) {
		st.Output = nil
	}
	if st.Status == harnesskit.StatusCompleted && st.Answer == nil && st.Output == nil {
		return harnesskit.RunStatus{}, errors.New("a completed RunStatus carries neither answer nor output")
	}
	for i, a := range st.Artifacts {
		if a.Name == "" {
			return harnesskit.RunStatus{}, fmt.Errorf("RunStatus artifacts[%d] has no name", i)
		}
	}
	return st, nil
}

// Stop asks the harness to cancel a run (POST /runs/{id}/stop); any 2xx
// is an acknowledgement.
func (c *Client) Stop(ctx context.Context, runID string) error {
	const op = "POST /runs/{run_id}/stop"
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	resp, err := c.call(ctx, op, http.MethodPost, runPath(runID)+"/stop", nil, "",
		http.StatusOK, http.StatusAccepted, http.StatusNoContent, http.StatusCreated)
	if err != nil {
		return err
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	return resp.Body.Close()
}

// download opens a body for streaming, failing with errTooLarge past
// limit bytes. The caller closes it, which also ends the request.
func (c *Client) download(ctx context.Context, op, path string, limit int64) (io.ReadCloser, error) {
	ctx, cancel := context.WithTimeout(ctx, c.downloadTimeout)
	resp, err := c.call(ctx, op, http.MethodGet, path, nil, "", http.StatusOK)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.ContentLength > limit {
		resp.Body.Close()
		cancel()
		return nil, invalid(op, "too_large", fmt.Errorf("answer of %d bytes is larger than %d", resp.ContentLength, limit))
	}
	return &limitedBody{rc: resp.Body, left: limit, cancel: cancel}, nil
}

// limitedBody fails with errTooLarge once more than its limit was read.
type limitedBody struct {
	rc     io.ReadCloser
	left   int64
	cancel context.CancelFunc
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.rc.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n, errTooLarge
	}
	return n, err
}

func (l *limitedBody) Close() error {
	err := l.rc.Close()
	l.cancel()
	return err
}

// Trajectory opens GET /runs/{id}/trajectory, at most Limits.Trajectory
// bytes.
func (c *Client) Trajectory(ctx context.Context, runID string) (io.ReadCloser, error) {
	return c.download(ctx, "GET /runs/{run_id}/trajectory", runPath(runID)+"/trajectory", c.limits.Trajectory)
}

// Files fetches the workspace listing GET /runs/{id}/files.
func (c *Client) Files(ctx context.Context, runID string) (harnesskit.FileList, error) {
	const op = "GET /runs/{run_id}/files"
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	resp, err := c.call(ctx, op, http.MethodGet, runPath(runID)+"/files", nil, "", http.StatusOK)
	if err != nil {
		return harnesskit.FileList{}, err
	}
	raw, err := readJSON(op, resp, c.limits.RunStatus)
	if err != nil {
		return harnesskit.FileList{}, err
	}
	var fl harnesskit.FileList
	if err := json.Unmarshal(raw, &fl); err != nil {
		return harnesskit.FileList{}, invalid(op, "schema", fmt.Errorf("FileList does not match the contract: %w", err))
	}
	return fl, nil
}

// File opens one workspace file, GET /runs/{id}/files/{path}, at most
// Limits.File bytes. path must pass WorkspacePath.
func (c *Client) File(ctx context.Context, runID, path string) (io.ReadCloser, error) {
	escaped, err := WorkspacePath(path)
	if err != nil {
		return nil, err
	}
	return c.download(ctx, "GET /runs/{run_id}/files/{path}", runPath(runID)+"/files/"+escaped, c.limits.File)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
