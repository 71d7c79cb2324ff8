package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/suite"
)

// validTrajectory is a small valid ATIF document with one tool call and
// token usage.
const validTrajectory = `{"schema_version":"ATIF-v1.7","session_id":"s1","agent":{"name":"bot","version":"1"},"steps":[` +
	`{"step_id":1,"source":"user","message":"hi"},` +
	`{"step_id":2,"source":"agent","message":"","tool_calls":[{"tool_call_id":"c1","function_name":"issue_refund","arguments":{"order_id":"1042"}}],` +
	`"observation":{"results":[{"source_call_id":"c1","content":"ok"}]},"metrics":{"prompt_tokens":10,"completion_tokens":5,"cost_usd":0.01}},` +
	`{"step_id":3,"source":"agent","message":"Refund issued"}]}`

// createdRun is one POST /runs the fake harness received.
type createdRun struct {
	ID          string
	ContentType string
	Payload     map[string]any // the JSON body, or the payload part
	// Parts are the multipart parts after the payload: form name,
	// filename and bytes.
	Parts  []part
	APIKey string
}

type part struct{ Name, Filename, Body string }

// fakeHarness is a programmable Harness API v1 server. Its function
// fields decide the answers; its other fields record what it saw.
type fakeHarness struct {
	t    *testing.T
	Caps string // capabilities JSON

	// Create answers POST /runs number n (from 1); nil: 201 with run-n.
	Create func(n int, w http.ResponseWriter) bool
	// Status answers the poll number poll (from 1) of run id; nil:
	// completed with answer "Refund issued" and model m1.
	Status func(id string, poll int) (int, string)
	// Trajectory answers GET …/trajectory; nil: validTrajectory.
	Trajectory func(id string, w http.ResponseWriter)
	// Files answers the listing; File one file.
	Files func(id string) string
	File  func(id, path string) (int, string)

	mu         sync.Mutex
	creates    []createdRun
	createN    int
	polls      map[string]int
	stops      []string
	trajGets   map[string]int
	fileGets   []string
	keys       []string
	active     map[string]bool // created, not yet reported terminal
	peakActive int
	requests   []string
}

func newFakeHarness(t *testing.T, caps string) *fakeHarness {
	return &fakeHarness{t: t, Caps: caps, polls: map[string]int{}, trajGets: map[string]int{}, active: map[string]bool{}}
}

func (h *fakeHarness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.keys = append(h.keys, r.Header.Get("x-api-key"))
	h.requests = append(h.requests, r.Method+" "+r.URL.EscapedPath())
	h.mu.Unlock()
	path := r.URL.EscapedPath()
	switch {
	case r.Method == http.MethodGet && path == "/capabilities":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, h.Caps)
	case r.Method == http.MethodPost && path == "/runs":
		h.create(w, r)
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/stop"):
		id := strings.TrimSuffix(strings.TrimPrefix(path, "/runs/"), "/stop")
		h.mu.Lock()
		h.stops = append(h.stops, id)
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/trajectory"):
		id := strings.TrimSuffix(strings.TrimPrefix(path, "/runs/"), "/trajectory")
		h.mu.Lock()
		h.trajGets[id]++
		h.mu.Unlock()
		if h.Trajectory != nil {
			h.Trajectory(id, w)
			return
		}
		io.WriteString(w, validTrajectory)
	case r.Method == http.MethodGet && strings.Contains(path, "/files"):
		rest := strings.TrimPrefix(path, "/runs/")
		id, file, _ := strings.Cut(rest, "/files")
		if file == "" {
			if h.Files == nil {
				io.WriteString(w, `{"files":[]}`)
				return
			}
			io.WriteString(w, h.Files(id))
			return
		}
		p := strings.TrimPrefix(file, "/")
		h.mu.Lock()
		h.fileGets = append(h.fileGets, p)
		h.mu.Unlock()
		status, body := http.StatusNotFound, ""
		if h.File != nil {
			status, body = h.File(id, p)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/runs/"):
		id := strings.TrimPrefix(path, "/runs/")
		h.mu.Lock()
		h.polls[id]++
		n := h.polls[id]
		h.mu.Unlock()
		status, body := http.StatusOK, `{"status":"completed","answer":"Refund issued","model":"m1"}`
		if h.Status != nil {
			status, body = h.Status(id, n)
		}
		if status == http.StatusOK && (strings.Contains(body, `"completed"`) || strings.Contains(body, `"failed"`) || strings.Contains(body, `"cancelled"`)) {
			h.mu.Lock()
			delete(h.active, id)
			h.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	default:
		http.NotFound(w, r)
	}
}

func (h *fakeHarness) create(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.createN++
	n := h.createN
	h.mu.Unlock()
	c := createdRun{ContentType: r.Header.Get("Content-Type"), APIKey: r.Header.Get("x-api-key")}
	mt, params, _ := mime.ParseMediaType(c.ContentType)
	if mt == "multipart/form-data" {
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				h.t.Errorf("multipart: %v", err)
				break
			}
			b, _ := io.ReadAll(p)
			if p.FormName() == "payload" {
				if ct := p.Header.Get("Content-Type"); ct != "application/json" {
					h.t.Errorf("payload part Content-Type = %q", ct)
				}
				_ = json.Unmarshal(b, &c.Payload)
				continue
			}
			c.Parts = append(c.Parts, part{p.FormName(), p.FileName(), string(b)})
		}
	} else {
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &c.Payload); err != nil {
			h.t.Errorf("POST /runs body %q: %v", b, err)
		}
	}
	if h.Create != nil && !h.Create(n, w) {
		h.mu.Lock()
		h.creates = append(h.creates, c)
		h.mu.Unlock()
		return
	}
	c.ID = fmt.Sprintf("run-%d", n)
	h.mu.Lock()
	h.creates = append(h.creates, c)
	h.active[c.ID] = true
	h.peakActive = max(h.peakActive, len(h.active))
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"run_id":%q}`, c.ID)
}

func (h *fakeHarness) snapshot() (creates []createdRun, stops []string, polls map[string]int, traj map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := map[string]int{}
	for k, v := range h.polls {
		p[k] = v
	}
	tg := map[string]int{}
	for k, v := range h.trajGets {
		tg[k] = v
	}
	return slices.Clone(h.creates), slices.Clone(h.stops), p, tg
}

// handlerTransport serves requests in-process, without a network, so
// that tests run inside a synctest bubble with fake time.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req.Clone(req.Context()))
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// memRecorder is an in-memory Recorder that also keeps every PutRun.
type memRecorder struct {
	mu      sync.Mutex
	exps    map[string]store.Experiment
	runs    map[string]store.RunRecord
	history []store.RunRecord
	blobs   map[string][]byte
	n       int
}

func newMemRecorder() *memRecorder {
	return &memRecorder{exps: map[string]store.Experiment{}, runs: map[string]store.RunRecord{}, blobs: map[string][]byte{}}
}

func (m *memRecorder) CreateExperiment(_ context.Context, e store.NewExperiment) (store.Experiment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	x := store.Experiment{ID: fmt.Sprintf("0190a000-0000-7000-8000-%012d", m.n), Suite: e.Suite, SuiteVersion: e.SuiteVersion,
		Harness: e.Harness, Capabilities: e.Capabilities, Config: e.Config}
	m.exps[x.ID] = x
	return x, nil
}

func (m *memRecorder) Experiment(_ context.Context, id string) (store.Experiment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.exps[id]
	if !ok {
		return store.Experiment{}, store.ErrNotFound
	}
	return e, nil
}

func (m *memRecorder) Runs(_ context.Context, id string) ([]store.RunRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.RunRecord
	for _, r := range m.runs {
		if r.ExperimentID == id {
			out = append(out, r)
		}
	}
	sortRuns(out)
	return out, nil
}

func (m *memRecorder) AllRuns(ctx context.Context, id string) iter.Seq2[store.RunRecord, error] {
	return func(yield func(store.RunRecord, error) bool) {
		runs, err := m.Runs(ctx, id)
		if err != nil {
			yield(store.RunRecord{}, err)
			return
		}
		for _, r := range runs {
			if !yield(r, nil) {
				return
			}
		}
	}
}

func (m *memRecorder) PutRun(_ context.Context, r store.RunRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.exps[r.ExperimentID]; !ok {
		return store.ErrNotFound
	}
	m.runs[pairKey(r.CaseID, r.Repetition)+r.ExperimentID] = r
	m.history = append(m.history, r)
	return nil
}

func (m *memRecorder) PutBlob(_ context.Context, s *Spool) error {
	b, err := s.Bytes()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blobs[s.SHA256()] = slices.Clone(b)
	return nil
}

func (m *memRecorder) Finish(_ context.Context, id, model string, summary json.RawMessage) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.exps[id]
	if !ok {
		return store.ErrNotFound
	}
	e.Model, e.Summary = model, summary
	m.exps[id] = e
	return nil
}

func (m *memRecorder) experiments() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.exps)
}

// writeSuite writes a suite file (and fixtures) and loads it.
func writeSuite(t testing.TB, doc string, fixtures map[string]string) *suite.Suite {
	t.Helper()
	dir := t.TempDir()
	if len(fixtures) > 0 {
		if err := os.Mkdir(filepath.Join(dir, "fixtures"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range fixtures {
			if err := os.WriteFile(filepath.Join(dir, "fixtures", name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := filepath.Join(dir, "suite.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := suite.Load(p, suite.Options{})
	if err != nil {
		t.Fatalf("load suite: %v", err)
	}
	return s
}

// env is a runner wired to a fake harness through an in-process
// transport and an in-memory recorder.
type env struct {
	h        *fakeHarness
	rec      *memRecorder
	fixtures *Fixtures
}

func newEnv(t *testing.T, h *fakeHarness, s *suite.Suite) *env {
	t.Helper()
	signer, err := NewFixtureSigner("http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &env{h: h, rec: newMemRecorder(), fixtures: &Fixtures{Tenant: "t1", Dir: s.FixturesDir, Signer: signer}}
}

func (e *env) runner(t *testing.T, cfg Config) *Runner {
	t.Helper()
	c, err := NewClient("http://harness.test", "secret-key", &http.Client{Transport: handlerTransport{e.h}}, cfg.Limits)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Criteria == (Criteria{}) {
		cfg.Criteria = DefaultCriteria()
	}
	r, err := NewRunner(cfg, Deps{Client: c, Recorder: e.rec, Fixtures: e.fixtures})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run runs the suite and fails the test on an error.
func (e *env) run(t *testing.T, ctx context.Context, cfg Config, s *suite.Suite) *Result {
	t.Helper()
	res, err := e.runner(t, cfg).Run(ctx, s)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func decodeJSON[T any](t *testing.T, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}

// sortRuns orders records by case id, then repetition.
func sortRuns(runs []store.RunRecord) {
	slices.SortFunc(runs, func(a, b store.RunRecord) int {
		if c := strings.Compare(a.CaseID, b.CaseID); c != 0 {
			return c
		}
		return a.Repetition - b.Repetition
	})
}
