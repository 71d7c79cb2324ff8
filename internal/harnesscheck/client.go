package harnesscheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Bounds on what the checks read from a harness, which is untrusted (SPEC
// §7.2). Sizes are of decoded bytes.
const (
	// MaxCapabilitiesBytes bounds GET /capabilities.
	MaxCapabilitiesBytes = 1 << 20
	// MaxStatusBytes bounds RunCreated, RunStatus, RunList and FileList.
	MaxStatusBytes = 8 << 20
	// MaxTrajectoryBytes bounds a trajectory.
	MaxTrajectoryBytes = 256 << 20
	// MaxFileBytes bounds one workspace file.
	MaxFileBytes = 64 << 20
	// MaxFiles is the number of workspace files gyre eval fetches per run.
	MaxFiles = 1000
	// maxErrorBody bounds what is read of an error answer.
	maxErrorBody = 64 << 10
	// maxValidatedBytes bounds the bodies given to the OpenAPI validator
	// (which decodes them whole); a larger trajectory is checked by the
	// ATIF validator alone.
	maxValidatedBytes = 8 << 20
)

// errTooLarge is an answer over its bound.
var errTooLarge = errors.New("answer over the limit")

// client calls one harness. It never follows redirects (a 3xx comes back
// as the answer), sends x-api-key only to the harness's own origin, and
// reads at most a given number of bytes of every answer.
type client struct {
	base *url.URL
	key  string
	hc   *http.Client
	// callTimeout bounds one JSON call, downloadTimeout one trajectory or
	// workspace file.
	callTimeout, downloadTimeout time.Duration
}

// parseBaseURL checks a harness base URL: http or https, a host, no
// credentials, query or fragment.
func parseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	switch {
	case err != nil:
		return nil, fmt.Errorf("harness url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("harness url %q: want http:// or https://", raw)
	case u.Host == "":
		return nil, fmt.Errorf("harness url %q has no host", raw)
	case u.User != nil:
		return nil, errors.New("harness url must not carry credentials: use the api key")
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return nil, fmt.Errorf("harness url %q must not have a query or fragment", raw)
	}
	return u, nil
}

// newClient returns a client for base; hc supplies the transport (nil: a
// clone of the default one). Its redirect policy and cookie jar are
// replaced.
func newClient(base *url.URL, key string, hc *http.Client, callTimeout, downloadTimeout time.Duration) *client {
	var c http.Client
	if hc != nil {
		c = *hc
	}
	if c.Transport == nil {
		c.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.Jar = nil
	return &client{base: base, key: key, hc: &c, callTimeout: callTimeout, downloadTimeout: downloadTimeout}
}

// answer is one response of the harness, read whole (within its bound).
type answer struct {
	status int
	header http.Header
	body   []byte
}

// runPath is /runs/{id} with id escaped as one path segment.
func runPath(runID string) string { return "/runs/" + url.PathEscape(runID) }

// request is one call to the harness.
type request struct {
	op    op
	path  string // escaped, from the base URL's path on
	query url.Values
	body  io.Reader
	ctype string
	// limit bounds the body read of a 2xx answer.
	limit int64
	// download selects the longer download timeout.
	download bool
}

// do sends r and reads the answer. A transport error, a timeout or a 2xx
// body over r.limit is an error; any status, redirects included, is an
// answer. Error answers are read up to maxErrorBody.
func (c *client) do(ctx context.Context, r request) (*answer, error) {
	timeout := c.callTimeout
	if r.download {
		timeout = c.downloadTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := c.base.String() + r.path
	if q := r.query.Encode(); q != "" {
		u += "?" + q
	}
	req, err := http.NewRequestWithContext(ctx, r.op.method, u, r.body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.op, err)
	}
	if r.ctype != "" {
		req.Header.Set("Content-Type", r.ctype)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "gyre-harness-check")
	// The key goes to the configured origin only.
	if c.key != "" && req.URL.Scheme == c.base.Scheme && req.URL.Host == c.base.Host {
		req.Header.Set("x-api-key", c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.op, redactURL(err))
	}
	defer resp.Body.Close()
	limit := r.limit
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		limit = maxErrorBody
	} else if resp.ContentLength > limit {
		return nil, fmt.Errorf("%s: %w of %s (Content-Length %d)", r.op, errTooLarge, size(limit), resp.ContentLength)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read answer: %w", r.op, redactURL(err))
	}
	if int64(len(body)) > limit {
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			body = body[:limit]
		} else {
			return nil, fmt.Errorf("%s: %w of %s", r.op, errTooLarge, size(limit))
		}
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// redactURL drops the URL from a client error; the message names the
// operation instead.
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("timed out: %w", ue.Err)
		}
		return ue.Err
	}
	return err
}

// size formats a byte count as people read limits.
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// statusError describes an answer whose status is not the expected one.
func statusError(o op, a *answer) error {
	if a.status >= 300 && a.status < 400 {
		loc := a.header.Get("Location")
		if loc == "" {
			loc = "nowhere"
		}
		return fmt.Errorf("%s answered %d, a redirect to %s: gyre never follows redirects from a harness", o, a.status, oneLine(loc, 200))
	}
	msg := fmt.Sprintf("%s answered %d", o, a.status)
	if b := bytes.TrimSpace(a.body); len(b) > 0 {
		msg += ": " + oneLine(string(b), 200)
	}
	return errors.New(msg)
}

// expect checks that a is the declared success of o, or one of the other
// statuses in tolerated (which come back as a warning), and validates the
// answer against the contract. A tolerated status is validated as the
// declared one.
func (c *client) expect(ct *contract, o op, a *answer, tolerated ...int) (warning string, err error) {
	status := a.status
	if status != o.declared {
		ok := false
		for _, t := range tolerated {
			if t == status {
				ok = true
			}
		}
		if !ok {
			return "", statusError(o, a)
		}
		warning = fmt.Sprintf("%s answered %d; the contract declares %d", o, status, o.declared)
		status = o.declared
	}
	body := a.body
	if int64(len(body)) > maxValidatedBytes {
		return warning, nil
	}
	return warning, ct.validate(o, status, a.header, body)
}
