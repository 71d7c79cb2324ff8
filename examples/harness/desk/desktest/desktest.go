// Package desktest drives the example desk harness in tests, as an
// evaluator does, and checks every response against the Harness API v1
// contract and every trajectory as ATIF.
package desktest

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/examples/harness/desk"
	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/harnesskit/harnesskittest"
)

var contract = sync.OnceValues(harnesskittest.New)

// Client talks to a running harness at Base, sending Key as x-api-key when
// set, and fails T on any contract violation.
type Client struct {
	T    testing.TB
	Base string
	Key  string
}

// Serve serves desk.New(c) in-process (two workers and a temporary
// workspace directory unless c says otherwise) until the test ends.
func Serve(t testing.TB, c desk.Config) *Client {
	t.Helper()
	if c.MaxConcurrentRuns == 0 {
		c.MaxConcurrentRuns = 2
	}
	if c.WorkspaceDir == "" {
		c.WorkspaceDir = t.TempDir()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := desk.New(c)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.Close()
		_ = h.Close()
	})
	return &Client{T: t, Base: hs.URL, Key: c.APIKey}
}

// Do sends a request and returns the response (its body consumed) and the
// body.
func (c *Client) Do(method, path, contentType string, body io.Reader) (*http.Response, []byte) {
	c.T.Helper()
	req, err := http.NewRequest(method, c.Base+path, body)
	if err != nil {
		c.T.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.Key != "" {
		req.Header.Set("x-api-key", c.Key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.T.Fatal(err)
	}
	defer resp.Body.Close()
	v, err := contract()
	if err != nil {
		c.T.Fatal(err)
	}
	if err := v.Response(req, resp); err != nil {
		c.T.Errorf("contract: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.T.Fatal(err)
	}
	return resp, b
}

// Get fetches path, which must answer 200, decodes it into v when v is not
// nil and returns the body.
func (c *Client) Get(path string, v any) []byte {
	c.T.Helper()
	resp, b := c.Do("GET", path, "", nil)
	if resp.StatusCode != 200 {
		c.T.Fatalf("GET %s = %d %s", path, resp.StatusCode, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			c.T.Fatalf("GET %s: %v", path, err)
		}
	}
	return b
}

// Start creates a run from a JSON RunRequest and returns its id.
func (c *Client) Start(body string) string {
	c.T.Helper()
	return c.StartWith("application/json", strings.NewReader(body))
}

// StartWith creates a run from a body of contentType (JSON or multipart)
// and returns its id.
func (c *Client) StartWith(contentType string, body io.Reader) string {
	c.T.Helper()
	resp, b := c.Do("POST", "/runs", contentType, body)
	if resp.StatusCode != 201 {
		c.T.Fatalf("POST /runs = %d %s", resp.StatusCode, b)
	}
	var rc harnesskit.RunCreated
	if err := json.Unmarshal(b, &rc); err != nil {
		c.T.Fatal(err)
	}
	return rc.RunID
}

// Finish polls a run until it is terminal, as an evaluator does.
func (c *Client) Finish(id string) harnesskit.RunStatus {
	c.T.Helper()
	deadline := time.Now().Add(time.Minute) // a guard against hanging, not a timing assertion
	for {
		var st harnesskit.RunStatus
		c.Get("/runs/"+id, &st)
		if st.IsTerminal() {
			return st
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("run %s still %s", id, st.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Trajectory fetches a run's trajectory and checks it is valid ATIF.
func (c *Client) Trajectory(id string) *atif.Trajectory {
	c.T.Helper()
	b := c.Get("/runs/"+id+"/trajectory", nil)
	tr, err := atif.Parse(b)
	if err != nil {
		c.T.Fatalf("trajectory is not valid ATIF: %v\n%s", err, b)
	}
	return tr
}

// For returns a copy of c that reports to t, for subtests.
func (c *Client) For(t testing.TB) *Client {
	cc := *c
	cc.T = t
	return &cc
}
