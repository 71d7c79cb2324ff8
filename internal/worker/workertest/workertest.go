// Package workertest runs a real gyre control plane in-process for tests of
// the agent side: the API server and rollout service on a fresh SQLite
// store, reached over HTTP, with a clock the test can move.
package workertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// Clock is the server's clock: the wall clock plus a skew the test can
// grow, so that server time flows and can also jump (a lapsed lease).
type Clock struct {
	mu   sync.Mutex
	skew time.Duration
}

// Now returns the wall clock plus the skew.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.skew)
}

// Advance moves the server's clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.skew += d
	c.mu.Unlock()
}

// Options tune a Server.
type Options struct {
	// Skew starts the server's clock this far from the wall clock, as a
	// server whose clock differs from the worker's.
	Skew time.Duration
	// Rollout is the rollout service's configuration; PublicURL defaults
	// to the test server's URL.
	Rollout rollout.Config
	// API is the API server's configuration.
	API api.Config
	// Background runs the watchdog and the grader.
	Background bool
	// Deps, when set, may change the API server's collaborators before it
	// is built (for example to add a gateway).
	Deps func(d *api.Deps)
}

// Server is a running control plane with one tenant, its admin key and an
// agent key.
type Server struct {
	t testing.TB
	// URL is the server's base URL.
	URL string
	// Admin and Agent are the secrets of the tenant's admin and agent keys.
	Admin, Agent string
	// Tenant is the one tenant.
	Tenant gyre.Tenant
	// Clock is the server's clock; Advance it to lapse leases.
	Clock *Clock
	// Store is the server's store.
	Store store.Store
	// Svc is the rollout service; call Sweep for a watchdog pass.
	Svc *rollout.Service
	// Logs holds the server's JSON logs.
	Logs *Buffer
	seq  atomic.Int64
}

// Buffer is a log sink safe for concurrent writers.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Start runs a control plane until the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	clk := &Clock{skew: o.Skew}
	logs := &Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, err := storeopen.Open(context.Background(), storeopen.Options{DataDir: t.TempDir(), Clock: clk, Logger: log, Migrate: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })

	// The handler is set once the URL is known, for the PublicURL.
	var h atomic.Value
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Load().(http.Handler).ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	if o.Rollout.PublicURL == "" {
		o.Rollout.PublicURL = ts.URL
	}
	svc, err := rollout.New(o.Rollout, rollout.Deps{Store: st, Clock: clk, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	d := api.Deps{Store: st, Logger: log, Clock: clk, Rollouts: svc}
	if o.Deps != nil {
		o.Deps(&d)
	}
	srv, err := api.New(o.API, d)
	if err != nil {
		t.Fatal(err)
	}
	h.Store(srv.Handler())
	if o.Background {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { svc.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	t.Cleanup(svc.Close)

	s := &Server{t: t, URL: ts.URL, Clock: clk, Store: st, Svc: svc, Logs: logs}
	ctx := context.Background()
	s.Tenant, err = st.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, s.Admin, err = auth.CreateKey(ctx, st, s.Tenant.ID, auth.KeyRequest{Role: gyre.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	if _, s.Agent, err = auth.CreateKey(ctx, st, s.Tenant.ID, auth.KeyRequest{Role: gyre.RoleAgent}); err != nil {
		t.Fatal(err)
	}
	return s
}

// Do sends a request with key and returns the status and body.
func (s *Server) Do(method, path, key string, body any) (int, []byte) {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// Case is one suite case of a batch.
type Case struct {
	// Question is the case's input.question, the rollout's turn input.
	Question string
	// Graders are the case's graders as JSON; default a contains grader.
	Graders []string
}

// BatchOptions are the batch's extra members.
type BatchOptions struct {
	// AgentID defaults to "agent-1".
	AgentID string
	// DeadlineS is the per-rollout budget in seconds (default 60).
	DeadlineS float64
	// MaxAttempts defaults to the server's (2).
	MaxAttempts int
	// Policy names the batch's policy.
	Policy string
}

// Batch uploads a suite of cases, makes its tasks and creates a batch; it
// returns the batch id and its rollout ids, in task order.
func (s *Server) Batch(o BatchOptions, cases ...Case) (string, []string) {
	s.t.Helper()
	if o.AgentID == "" {
		o.AgentID = "agent-1"
	}
	if o.DeadlineS == 0 {
		o.DeadlineS = 60
	}
	var cs []map[string]any
	for i, c := range cases {
		graders := c.Graders
		if len(graders) == 0 {
			graders = []string{`{"contains":"answer"}`}
		}
		var gs []json.RawMessage
		for _, g := range graders {
			gs = append(gs, json.RawMessage(g))
		}
		cs = append(cs, map[string]any{"id": fmt.Sprintf("c%d", i), "input": map[string]any{"question": c.Question}, "graders": gs})
	}
	name := fmt.Sprintf("suite-%d", s.seq.Add(1))
	if st, b := s.Do(http.MethodPost, "/api/v1/suites", s.Admin, map[string]any{"name": name, "cases": cs}); st != http.StatusCreated {
		s.t.Fatalf("upload suite: %d %s", st, b)
	}
	st, b := s.Do(http.MethodPost, "/api/v1/tasks", s.Admin, map[string]any{"suite": name})
	if st != http.StatusOK && st != http.StatusCreated {
		s.t.Fatalf("create tasks: %d %s", st, b)
	}
	var items struct {
		Items []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &items); err != nil {
		s.t.Fatal(err)
	}
	var ids []string
	for _, it := range items.Items {
		ids = append(ids, it.TaskID)
	}
	body := map[string]any{"agent_id": o.AgentID, "task_ids": ids, "deadline_s": o.DeadlineS}
	if o.MaxAttempts > 0 {
		body["max_attempts"] = o.MaxAttempts
	}
	if o.Policy != "" {
		body["policy"] = o.Policy
	}
	st, b = s.Do(http.MethodPost, "/api/v1/batches", s.Admin, body)
	if st != http.StatusOK && st != http.StatusCreated {
		s.t.Fatalf("create batch: %d %s", st, b)
	}
	var res struct {
		BatchID    string   `json:"batch_id"`
		RolloutIDs []string `json:"rollout_ids"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		s.t.Fatal(err)
	}
	return res.BatchID, res.RolloutIDs
}

// Rollout is GET /api/v1/rollouts/{id} (SPEC §4.8), with the members tests
// look at decoded under their wire names and the whole answer kept in Raw.
type Rollout struct {
	RolloutID            string          `json:"rollout_id"`
	TaskID               string          `json:"task_id"`
	GroupID              string          `json:"group_id"`
	Attempt              int             `json:"attempt"`
	State                string          `json:"state"`
	WorkerID             *string         `json:"worker_id"`
	Output               json.RawMessage `json:"output"`
	Exclusion            json.RawMessage `json:"exclusion"`
	Reconciliation       *string         `json:"reconciliation"`
	ReconciliationReason *string         `json:"reconciliation_reason"`
	Verdicts             json.RawMessage `json:"verdicts"`
	TrainingGrade        *bool           `json:"training_grade"`
	NotTrainingGrade     []string        `json:"not_training_grade_reasons"`
	Gateway              json.RawMessage `json:"gateway"`
	ToolCallJoins        json.RawMessage `json:"tool_call_joins"`
	Raw                  json.RawMessage `json:"-"`
}

// OutputMap decodes the stored output (nil when there is none).
func (r Rollout) OutputMap() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.Output, &m)
	return m
}

// ExclusionReason is the exclusion's reason, or "".
func (r Rollout) ExclusionReason() string {
	var e struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(r.Exclusion, &e)
	return e.Reason
}

// Rollout reads one rollout.
func (s *Server) Rollout(id string) Rollout {
	s.t.Helper()
	st, b := s.Do(http.MethodGet, "/api/v1/rollouts/"+id, s.Admin, nil)
	if st != http.StatusOK {
		s.t.Fatalf("get rollout %s: %d %s", id, st, b)
	}
	var r Rollout
	if err := json.Unmarshal(b, &r); err != nil {
		s.t.Fatal(err)
	}
	r.Raw = b
	return r
}

// BatchRollouts lists the rollouts of a batch, retries included.
func (s *Server) BatchRollouts(batchID string) []Rollout {
	s.t.Helper()
	st, b := s.Do(http.MethodGet, "/api/v1/rollouts?batch_id="+batchID+"&limit=500", s.Admin, nil)
	if st != http.StatusOK {
		s.t.Fatalf("list rollouts: %d %s", st, b)
	}
	var page struct {
		Items []Rollout `json:"items"`
	}
	if err := json.Unmarshal(b, &page); err != nil {
		s.t.Fatal(err)
	}
	return page.Items
}

// WaitRollout polls a rollout until cond holds, failing the test after
// timeout. It waits for an event; it does not time anything.
func (s *Server) WaitRollout(id string, timeout time.Duration, cond func(Rollout) bool) Rollout {
	s.t.Helper()
	end := time.Now().Add(timeout)
	for {
		r := s.Rollout(id)
		if cond(r) {
			return r
		}
		if time.Now().After(end) {
			s.t.Fatalf("rollout %s never reached the expected state; last: %s", id, r.Raw)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Finished reports whether the rollout has ended, with or without output.
func Finished(r Rollout) bool {
	return r.State != string(gyre.StateQueued) && r.State != string(gyre.StateLeased)
}
