package flywheel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre/flywheel"
)

// fakeServer is a hand-written flywheel/1 server for tests of the loop's
// rules. It runs in memory (inMemory), so tests can use testing/synctest's
// fake clock: no sockets, no real time.
type fakeServer struct {
	t  *testing.T
	mu sync.Mutex

	// skew puts the server's clock (its Date header, the times it mints)
	// ahead of the worker's.
	skew time.Duration
	// lease is the grant written into lease_expires_ts (default 30 s).
	lease time.Duration
	// deadline is each rollout's budget (default 60 s).
	deadline time.Duration
	// pollAfterMS answers empty claims.
	pollAfterMS int
	// pending are the rollouts still to hand out, by turn input.
	pending []string
	// claimHook, when set, answers a claim instead of the default.
	claimHook func(w http.ResponseWriter, r *http.Request, n int) bool
	// beatStatus, when set, answers heartbeat n (1-based) of a rollout.
	beatStatus func(id string, n int) int
	// outputStatus, when set, answers output n (1-based) of a rollout.
	outputStatus func(id string, n int) (int, string)
	// releaseStatus, when set, answers releases.
	releaseStatus int

	claims   []claimSeen
	beats    map[string][]time.Time
	outputs  map[string][]json.RawMessage
	releases []string
	seq      int
}

type claimSeen struct {
	at   time.Time
	max  int
	idem string
	wait string
}

func newFakeServer(t *testing.T, inputs ...string) *fakeServer {
	return &fakeServer{t: t, pending: inputs, lease: 30 * time.Second, deadline: 60 * time.Second,
		pollAfterMS: 1000, beats: map[string][]time.Time{}, outputs: map[string][]json.RawMessage{}}
}

// client returns a flywheel.Client that reaches f in memory.
func (f *fakeServer) client() *flywheel.Client {
	hc := &http.Client{Transport: inMemory{f}}
	c, err := flywheel.NewClient("http://gyre.test", "agent-key", flywheel.WithHTTPClient(hc))
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// inMemory is a RoundTripper that calls a handler directly.
type inMemory struct{ h http.Handler }

func (m inMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, r)
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}

func (f *fakeServer) now() time.Time { return time.Now().Add(f.skew) }

func ts(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Date", f.now().UTC().Format(http.TimeFormat))
	path := r.URL.Path
	switch {
	case strings.HasSuffix(path, "/claim"):
		f.claim(w, r)
	case strings.HasSuffix(path, "/heartbeat"):
		id := strings.Split(path, "/")[2]
		f.mu.Lock()
		f.beats[id] = append(f.beats[id], time.Now())
		n := len(f.beats[id])
		hook := f.beatStatus
		f.mu.Unlock()
		status := 200
		if hook != nil {
			status = hook(id, n)
		}
		switch status {
		case 200:
			fmt.Fprintf(w, `{"lease_expires_ts":%f}`, ts(f.now().Add(f.lease)))
		case 409:
			w.WriteHeader(409)
			io.WriteString(w, `{"error":{"code":"lease_lost","message":"lost"}}`)
		case 410:
			w.WriteHeader(410)
			io.WriteString(w, `{"error":{"code":"rollout_finished","message":"finished"}}`)
		default:
			w.WriteHeader(status)
		}
	case strings.HasSuffix(path, "/release"):
		id := strings.Split(path, "/")[2]
		f.mu.Lock()
		f.releases = append(f.releases, id)
		status := f.releaseStatus
		f.mu.Unlock()
		if status != 0 && status != 200 {
			w.WriteHeader(status)
			return
		}
		fmt.Fprintf(w, `{"rollout_id":%q,"state":"released"}`, id)
	case strings.HasSuffix(path, "/output"):
		id := strings.Split(path, "/")[2]
		b, _ := io.ReadAll(r.Body)
		if err := flywheel.Validate(flywheel.DefRolloutOutput, b); err != nil {
			f.t.Errorf("the worker sent an output that breaks the contract: %v\n%s", err, b)
		}
		f.mu.Lock()
		f.outputs[id] = append(f.outputs[id], b)
		n := len(f.outputs[id])
		hook := f.outputStatus
		f.mu.Unlock()
		if hook != nil {
			if status, body := hook(id, n); status != 200 {
				w.WriteHeader(status)
				io.WriteString(w, body)
				return
			}
		}
		fmt.Fprintf(w, `{"rollout_id":%q,"state":"submitted","replayed":false}`, id)
	default:
		w.WriteHeader(404)
	}
}

func (f *fakeServer) claim(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Max int `json:"max_rollouts"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	f.mu.Lock()
	f.claims = append(f.claims, claimSeen{at: time.Now(), max: body.Max, idem: r.Header.Get("Idempotency-Key"), wait: r.URL.Query().Get("wait_ms")})
	n := len(f.claims)
	hook := f.claimHook
	f.mu.Unlock()
	if hook != nil && hook(w, r, n) {
		return
	}
	f.mu.Lock()
	take := min(max(body.Max, 1), len(f.pending))
	inputs := f.pending[:take]
	f.pending = f.pending[take:]
	f.mu.Unlock()
	f.answer(w, inputs, f.pollAfterMS)
}

// answer writes a ClaimResponse handing out one rollout per input.
func (f *fakeServer) answer(w http.ResponseWriter, inputs []string, pollAfter int) {
	resp := flywheel.ClaimResponse{Rollouts: []flywheel.RolloutRequest{}, PollAfterMS: pollAfter}
	for _, in := range inputs {
		resp.Rollouts = append(resp.Rollouts, f.rollout(in))
	}
	if len(inputs) > 0 {
		resp.PollAfterMS = 0
	}
	b, err := flywheel.Marshal(flywheel.DefClaimResponse, resp)
	if err != nil {
		f.t.Fatal(err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func (f *fakeServer) rollout(input string) flywheel.RolloutRequest {
	f.mu.Lock()
	f.seq++
	id := fmt.Sprintf("r%d", f.seq)
	f.mu.Unlock()
	now := f.now()
	return flywheel.RolloutRequest{
		RolloutID: id, TurnInput: input, LLMURL: "http://gyre.test/gw/tok-" + id + "/v1", APIKey: "key-" + id,
		ArtifactsDir: "rollouts/" + id, DeadlineTS: ts(now.Add(f.deadline)),
		LeaseToken: flywheel.Some("lease-" + id), LeaseExpiresTS: flywheel.Some(ts(now.Add(f.lease))),
	}
}

func (f *fakeServer) beatTimes(id string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.beats[id]...)
}

func (f *fakeServer) outputsOf(id string) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	for _, b := range f.outputs[id] {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func (f *fakeServer) claimsSeen() []claimSeen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]claimSeen(nil), f.claims...)
}

// serveUntil runs Serve with h until stop returns true (checked whenever
// the bubble is idle), then cancels it and returns its error.
func serveUntil(t *testing.T, f *fakeServer, cfg flywheel.ServeConfig, h flywheel.Handler, stop func() bool) error {
	t.Helper()
	cfg.Client = f.client()
	if cfg.AgentID == "" {
		cfg.AgentID = "agent-1"
	}
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = "worker-test"
	}
	if cfg.PollWait == 0 {
		cfg.PollWait = -1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- flywheel.Serve(ctx, cfg, h) }()
	for !stop() {
		select {
		case err := <-done:
			cancel()
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	return <-done
}
