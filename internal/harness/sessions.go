package harness

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/secret"
	"github.com/gyrehq/gyre/internal/store"
)

// Page sizes of the sessions listing: the harness computes every page, so
// they are smaller than gyre's own lists.
const (
	DefaultRunsLimit = 50
	MaxRunsLimit     = 100
	// maxOffset bounds how deep a cursor may page into a harness's runs.
	maxOffset = 1_000_000
	// maxRunIDLen bounds a harness run id in a path (as package eval).
	maxRunIDLen = 1024
)

// client returns the evaluator's client for h, its key opened.
func (r *Registry) client(h store.Harness) (*eval.Client, error) {
	var key string
	if h.APIKeySealed != nil {
		if r.key == nil {
			return nil, gyre.Errorf(gyre.CodeHarnessKeyUnavailable,
				"harness %q has an API key and this server has no GYRE_SECRET_KEY to decrypt it with", h.Name)
		}
		k, err := r.key.Open(h.APIKeySealed, h.APIKeyKID, keyContext(h.TenantID, h.ID))
		switch {
		case errors.Is(err, secret.ErrWrongKey):
			return nil, gyre.Errorf(gyre.CodeHarnessKeyUnavailable,
				"harness %q's API key was encrypted under secret key %s and this server has %s; set that GYRE_SECRET_KEY or register the harness again", h.Name, h.APIKeyKID, r.key.ID())
		case err != nil:
			return nil, fmt.Errorf("open harness %s key: %w", h.ID, err)
		}
		key = string(k)
	}
	c, err := eval.NewClient(h.BaseURL, key, r.hc, eval.Limits{
		Capabilities: r.cfg.MaxAnswerBytes, RunStatus: r.cfg.MaxAnswerBytes, Trajectory: r.cfg.MaxTrajectoryBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("harness %s client: %w", h.ID, err)
	}
	return c, nil
}

// callFailed turns a failed call to harness h into the error its client
// sees: 502 with a code, or 404 when the harness has no such run.
func callFailed(h store.Harness, op string, err error, notFoundIs404 bool) error {
	var ce *eval.CallError
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return gyre.Errorf(gyre.CodeHarnessTimeout, "harness %q did not answer %s in time", h.Name, op)
	case errors.Is(err, errPrivateTarget):
		return gyre.Errorf(gyre.CodeHarnessUnreachable,
			"harness %q resolves to a loopback, private or link-local address, which this server does not allow (gyre serve --harness-allow-private)", h.Name)
	case !errors.As(err, &ce):
		if errors.Is(err, context.Canceled) {
			return err
		}
		return gyre.Errorf(gyre.CodeHarnessUnreachable, "harness %q could not be reached for %s", h.Name, op)
	case ce.Kind == eval.KindTransport:
		return gyre.Errorf(gyre.CodeHarnessUnreachable, "harness %q could not be reached for %s", h.Name, op)
	case ce.Kind == eval.KindInvalid:
		return gyre.Errorf(gyre.CodeHarnessInvalidResponse, "harness %q answered %s with something the Harness API v1 contract does not allow (%s)", h.Name, op, ce.Reason)
	case ce.Status == http.StatusNotFound && notFoundIs404:
		return gyre.Errorf(gyre.CodeNotFound, "harness %q has no such run (it answered %s with 404)", h.Name, op)
	}
	return gyre.Errorf(gyre.CodeHarnessError, "harness %q answered %s with HTTP %d", h.Name, op, ce.Status)
}

// Capabilities returns the harness's GET /capabilities, compacted.
func (r *Registry) Capabilities(ctx context.Context, h store.Harness) (json.RawMessage, error) {
	c, err := r.client(h)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	_, raw, err := c.Capabilities(ctx)
	if err != nil {
		return nil, callFailed(h, "GET /capabilities", err, false)
	}
	return raw, nil
}

// RunsQuery is a checked sessions listing request.
type RunsQuery struct {
	Query, UserID, ClientID string
	Since, Until            *time.Time
	Limit, Offset           int
}

// ParseRunsQuery checks the query of GET /api/v1/harnesses/{id}/runs:
// the contract's filters (query, user_id, client_id, since, until as RFC
// 3339) with limit (1 to 100, default 50) and an opaque cursor in place of
// offset. Anything else is 400 invalid_query.
func ParseRunsQuery(q url.Values) (RunsQuery, error) {
	out := RunsQuery{Limit: DefaultRunsLimit}
	bad := func(format string, args ...any) (RunsQuery, error) {
		return RunsQuery{}, gyre.Errorf(gyre.CodeInvalidQuery, format, args...)
	}
	allowed := []string{"query", "user_id", "client_id", "since", "until", "limit", "cursor"}
	for name, vals := range q {
		known := false
		for _, a := range allowed {
			known = known || a == name
		}
		if !known {
			return bad("unknown query parameter %q (allowed: %s)", name, strings.Join(allowed, ", "))
		}
		if len(vals) > 1 {
			return bad("query parameter %q is given more than once", name)
		}
	}
	text := func(name string, max int) (string, error) {
		v := q.Get(name)
		if len(v) > max || !utf8.ValidString(v) {
			return "", gyre.Errorf(gyre.CodeInvalidQuery, "%s must be at most %d bytes of UTF-8", name, max)
		}
		return v, nil
	}
	var err error
	if out.Query, err = text("query", 1024); err != nil {
		return RunsQuery{}, err
	}
	if out.UserID, err = text("user_id", 255); err != nil {
		return RunsQuery{}, err
	}
	if out.ClientID, err = text("client_id", 255); err != nil {
		return RunsQuery{}, err
	}
	for _, tc := range []struct {
		name string
		dst  **time.Time
	}{{"since", &out.Since}, {"until", &out.Until}} {
		if v := q.Get(tc.name); q.Has(tc.name) {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return bad("%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", tc.name)
			}
			t = t.UTC()
			*tc.dst = &t
		}
	}
	if out.Since != nil && out.Until != nil && !out.Since.Before(*out.Until) {
		return bad("since must be before until")
	}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > MaxRunsLimit {
			return bad("limit must be an integer from 1 to %d", MaxRunsLimit)
		}
		out.Limit = n
	}
	if q.Has("cursor") {
		off, ok := decodeCursor(q.Get("cursor"))
		if !ok {
			return bad("cursor must be a next_cursor value from a previous page")
		}
		out.Offset = off
	}
	return out, nil
}

const cursorPrefix = "runs-offset:"

func encodeCursor(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + strconv.Itoa(offset)))
}

func decodeCursor(c string) (int, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, false
	}
	v, ok := strings.CutPrefix(string(raw), cursorPrefix)
	n, err := strconv.Atoi(v)
	if !ok || err != nil || n < 1 || n > maxOffset || strconv.Itoa(n) != v {
		return 0, false
	}
	return n, true
}

// values is the contract's GET /runs query of q.
func (q RunsQuery) values() url.Values {
	v := url.Values{}
	for name, s := range map[string]string{"query": q.Query, "user_id": q.UserID, "client_id": q.ClientID} {
		if s != "" {
			v.Set(name, s)
		}
	}
	if q.Since != nil {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if q.Until != nil {
		v.Set("until", q.Until.Format(time.RFC3339Nano))
	}
	v.Set("limit", strconv.Itoa(q.Limit))
	v.Set("offset", strconv.Itoa(q.Offset))
	return v
}

// RunItem is one run (or session) of a harness's listing as gyre shows
// it: every key present, null when the harness did not say.
type RunItem struct {
	RunID     string  `json:"run_id"`
	Title     *string `json:"title"`
	UserID    *string `json:"user_id"`
	ClientID  *string `json:"client_id"`
	CreatedAt *string `json:"created_at"`
	SessionID *string `json:"session_id"`
}

// RunsPage is one page of a harness's runs.
type RunsPage struct {
	Items []RunItem `json:"items"`
	// Total is the harness's count of runs matching the filters.
	Total      int     `json:"total"`
	NextCursor *string `json:"next_cursor"`
}

// ListRuns fetches one page of the harness's GET /runs. More items than
// asked for are cut to the page size.
func (r *Registry) ListRuns(ctx context.Context, h store.Harness, q RunsQuery) (RunsPage, error) {
	c, err := r.client(h)
	if err != nil {
		return RunsPage{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	l, err := c.ListRuns(ctx, q.values())
	if err != nil {
		return RunsPage{}, callFailed(h, "GET /runs", err, false)
	}
	runs := l.Runs
	if len(runs) > q.Limit {
		runs = runs[:q.Limit]
	}
	page := RunsPage{Items: make([]RunItem, 0, len(runs)), Total: l.Total}
	for _, it := range runs {
		page.Items = append(page.Items, RunItem{RunID: it.RunID, Title: it.Title, UserID: it.UserID,
			ClientID: it.ClientID, CreatedAt: it.CreatedAt, SessionID: it.SessionID})
	}
	if next := q.Offset + len(runs); len(runs) > 0 && next < l.Total && next <= maxOffset {
		c := encodeCursor(next)
		page.NextCursor = &c
	}
	return page, nil
}

// CheckRunID checks a harness run id taken from a path: 1 to 1024 bytes,
// not . or .. (it is sent as one escaped path segment).
func CheckRunID(id string) error {
	if id == "" || id == "." || id == ".." || len(id) > maxRunIDLen {
		return gyre.Errorf(gyre.CodeInvalidPathParam, "path parameter run_id must be 1 to %d bytes, not . or ..", maxRunIDLen)
	}
	return nil
}

// RunView is a harness run's status as gyre shows it: every key present.
type RunView struct {
	RunID     string                   `json:"run_id"`
	Status    harnesskit.Status        `json:"status"`
	Model     string                   `json:"model"`
	Answer    *string                  `json:"answer"`
	Output    json.RawMessage          `json:"output"`
	Artifacts []harnesskit.ArtifactRef `json:"artifacts"`
	Error     *string                  `json:"error"`
}

// Run fetches the harness's GET /runs/{run_id}.
func (r *Registry) Run(ctx context.Context, h store.Harness, runID string) (RunView, error) {
	if err := CheckRunID(runID); err != nil {
		return RunView{}, err
	}
	c, err := r.client(h)
	if err != nil {
		return RunView{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	st, err := c.RunStatus(ctx, runID)
	if err != nil {
		return RunView{}, callFailed(h, "GET /runs/{run_id}", err, true)
	}
	v := RunView{RunID: runID, Status: st.Status, Model: st.Model, Answer: st.Answer, Output: st.Output,
		Artifacts: st.Artifacts, Error: st.Error}
	if len(v.Output) == 0 {
		v.Output = json.RawMessage("null")
	}
	return v, nil
}

// Trajectory fetches the harness's GET /runs/{run_id}/trajectory into a
// spool the caller closes: at most Config.MaxTrajectoryBytes, within
// Config.CallTimeout, and one JSON object (its ATIF validity is the
// viewer's business). It is not kept.
func (r *Registry) Trajectory(ctx context.Context, h store.Harness, runID string) (*eval.Spool, error) {
	const op = "GET /runs/{run_id}/trajectory"
	if err := CheckRunID(runID); err != nil {
		return nil, err
	}
	c, err := r.client(h)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	body, err := c.Trajectory(ctx, runID)
	if err != nil {
		return nil, callFailed(h, op, err, true)
	}
	defer body.Close()
	sp := eval.NewSpool()
	_, err = io.Copy(sp, body)
	switch {
	case sp.Size() > r.cfg.MaxTrajectoryBytes:
		sp.Close()
		return nil, gyre.Errorf(gyre.CodeHarnessInvalidResponse, "harness %q answered %s with more than %d bytes", h.Name, op, r.cfg.MaxTrajectoryBytes)
	case err != nil:
		sp.Close()
		return nil, callFailed(h, op, err, true)
	}
	rd, err := sp.Reader()
	if err == nil {
		err = checkJSONObject(rd)
	}
	if err != nil {
		sp.Close()
		return nil, gyre.Errorf(gyre.CodeHarnessInvalidResponse, "harness %q answered %s with something that is not one JSON object", h.Name, op)
	}
	return sp, nil
}

// checkJSONObject reads r as one JSON object and nothing after it,
// token by token, so a large document is never held whole.
func checkJSONObject(r io.Reader) error {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("not an object")
	}
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the object")
	}
	return nil
}
