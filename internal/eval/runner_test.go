package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

const basicSuite = `name: refunds
version: "1"
cases:
  - id: small
    input: {question: "Refund order 1042"}
    graders:
      - contains: "Refund"
`

const filesSuite = `name: refunds
version: "1"
cases:
  - id: with-files
    input: {question: "Refund the invoice"}
    files:
      - {name: invoice.pdf, context: "the customer's invoice"}
      - {name: notes.txt}
    graders:
      - contains: "Refund"
`

var fixtureFiles = map[string]string{"invoice.pdf": "%PDF-1.4 invoice bytes", "notes.txt": "handle with care"}

func mustRun(t *testing.T, ctx context.Context, e *env, cfg Config, doc string, fixtures map[string]string) *Result {
	t.Helper()
	return e.run(t, ctx, cfg, writeSuite(t, doc, fixtures))
}

// onlyRun is the one run record the experiment of res recorded.
func (e *env) onlyRun(t *testing.T, res *Result) store.RunRecord {
	t.Helper()
	runs, err := e.rec.Runs(t.Context(), res.Experiment.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
	return runs[0]
}

func TestMultipartOnly(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot","accepts":{"files":true}}`)
	s := writeSuite(t, filesSuite, fixtureFiles)
	e := newEnv(t, h, s)
	res := e.run(t, t.Context(), Config{}, s)
	if r := e.onlyRun(t, res); r.Classification != "passed" {
		t.Fatalf("run = %+v, want passed", r)
	}
	creates, _, _, _ := h.snapshot()
	c := creates[0]
	if !strings.HasPrefix(c.ContentType, "multipart/form-data; boundary=") {
		t.Fatalf("Content-Type = %q, want multipart", c.ContentType)
	}
	files := c.Payload["files"].([]any)
	if len(files) != 2 {
		t.Fatalf("payload files = %v", files)
	}
	f0 := files[0].(map[string]any)
	if f0["name"] != "invoice.pdf" || f0["context"] != "the customer's invoice" || f0["url"] != nil {
		t.Errorf("payload files[0] = %v, want name and context, no url", f0)
	}
	want := []part{{"files", "invoice.pdf", fixtureFiles["invoice.pdf"]}, {"files", "notes.txt", fixtureFiles["notes.txt"]}}
	if !slices.Equal(c.Parts, want) {
		t.Errorf("parts = %+v, want %+v (in payload order)", c.Parts, want)
	}
	if c.Payload["input"].(map[string]any)["question"] != "Refund the invoice" {
		t.Errorf("input = %v", c.Payload["input"])
	}
}

func TestFileURLs(t *testing.T) {
	t.Parallel()
	for _, caps := range []string{
		`{"agent":"bot","accepts":{"file_urls":true}}`,
		`{"agent":"bot","accepts":{"file_urls":true,"files":true}}`, // both declared: JSON wins
	} {
		h := newFakeHarness(t, caps)
		s := writeSuite(t, filesSuite, fixtureFiles)
		e := newEnv(t, h, s)
		srv := httptest.NewServer(e.fixtures.Handler())
		defer srv.Close()
		signer, err := NewFixtureSigner(srv.URL, clock.Real{})
		if err != nil {
			t.Fatal(err)
		}
		e.fixtures.Signer = signer
		res := e.run(t, t.Context(), Config{Timeout: time.Minute}, s)
		if r := e.onlyRun(t, res); r.Classification != "passed" {
			t.Fatalf("%s: run = %+v", caps, r)
		}
		creates, _, _, _ := h.snapshot()
		c := creates[0]
		if c.ContentType != "application/json" {
			t.Fatalf("%s: Content-Type = %q, want JSON", caps, c.ContentType)
		}
		files := c.Payload["files"].([]any)
		if len(files) != 2 {
			t.Fatalf("files = %v", files)
		}
		for i, name := range []string{"invoice.pdf", "notes.txt"} {
			f := files[i].(map[string]any)
			if f["name"] != name {
				t.Errorf("files[%d].name = %v, want %s", i, f["name"], name)
			}
			u, _ := f["url"].(string)
			if !strings.HasPrefix(u, srv.URL+"/fixtures/t1/") || !strings.Contains(u, "signature=") {
				t.Fatalf("files[%d].url = %q, want a signed gyre URL", i, u)
			}
			resp, err := http.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(b) != fixtureFiles[name] {
				t.Errorf("GET %s = %d %q, want the fixture", u, resp.StatusCode, b)
			}
			// A tampered signature, and another tenant, are 404.
			pu, _ := url.Parse(u)
			q := pu.Query()
			sig := q.Get("signature")
			q.Set("signature", strings.Repeat("0", len(sig)))
			pu.RawQuery = q.Encode()
			if resp, err := http.Get(pu.String()); err != nil || resp.StatusCode != http.StatusNotFound {
				t.Errorf("tampered URL: %v %v, want 404", resp.StatusCode, err)
			} else {
				resp.Body.Close()
			}
			other := strings.Replace(u, "/fixtures/t1/", "/fixtures/t2/", 1)
			if resp, err := http.Get(other); err != nil || resp.StatusCode != http.StatusNotFound {
				t.Errorf("other tenant: %v %v, want 404", resp.StatusCode, err)
			} else {
				resp.Body.Close()
			}
		}
		if f0 := files[0].(map[string]any); f0["context"] != "the customer's invoice" {
			t.Errorf("context = %v", f0["context"])
		}
		if c.Parts != nil {
			t.Errorf("JSON request carried parts %v", c.Parts)
		}
	}
}

func TestFixtureSignerExpiry(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	s, err := NewFixtureSigner("http://gyre.test", clk)
	if err != nil {
		t.Fatal(err)
	}
	sum := strings.Repeat("ab", 32)
	u, _ := url.Parse(s.URL("t1", sum, time.Hour))
	q := u.Query()
	if err := s.Verify("t1", sum, q.Get("expires"), q.Get("signature")); err != nil {
		t.Fatalf("fresh URL: %v", err)
	}
	for name, args := range map[string][4]string{
		"other sha":      {"t1", strings.Repeat("cd", 32), q.Get("expires"), q.Get("signature")},
		"other tenant":   {"t2", sum, q.Get("expires"), q.Get("signature")},
		"later expiry":   {"t1", sum, "9999999999", q.Get("signature")},
		"bad hex":        {"t1", sum, q.Get("expires"), "zz"},
		"padded expires": {"t1", sum, "0" + q.Get("expires"), q.Get("signature")},
	} {
		if err := s.Verify(args[0], args[1], args[2], args[3]); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	clk.Advance(time.Hour + time.Second)
	if err := s.Verify("t1", sum, q.Get("expires"), q.Get("signature")); err == nil {
		t.Error("expired URL verified")
	}
}

func TestFilesWithoutDelivery(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot"}`)
	s := writeSuite(t, filesSuite, fixtureFiles)
	e := newEnv(t, h, s)
	_, err := e.runner(t, Config{}).Run(t.Context(), s)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Code != "files_unsupported" {
		t.Fatalf("error = %v, want files_unsupported", err)
	}
	if creates, _, _, _ := h.snapshot(); len(creates) != 0 || e.rec.experiments() != 0 {
		t.Errorf("%d runs and %d experiments created, want none", len(creates), e.rec.experiments())
	}
}

func TestModelOverride(t *testing.T) {
	t.Parallel()
	// Without accepts.model_override, no model is sent…
	h := newFakeHarness(t, `{"agent":"bot"}`)
	s := writeSuite(t, basicSuite, nil)
	e := newEnv(t, h, s)
	e.run(t, t.Context(), Config{}, s)
	creates, _, _, _ := h.snapshot()
	if _, ok := creates[0].Payload["model"]; ok {
		t.Errorf("model sent to a harness without model_override: %v", creates[0].Payload)
	}
	meta := creates[0].Payload["metadata"].(map[string]any)
	if meta["case_id"] != "small" || meta["repetition"] != 1.0 || meta["experiment_id"] == "" {
		t.Errorf("metadata = %v", meta)
	}
	// …and --model is refused before any run.
	h2 := newFakeHarness(t, `{"agent":"bot"}`)
	e2 := newEnv(t, h2, s)
	_, err := e2.runner(t, Config{Model: "big"}).Run(t.Context(), s)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Code != "model_override_unsupported" {
		t.Fatalf("error = %v, want model_override_unsupported", err)
	}
	if c, _, _, _ := h2.snapshot(); len(c) != 0 || e2.rec.experiments() != 0 {
		t.Errorf("runs were created: %d", len(c))
	}
	// With it, the model is sent and the run's reported model recorded.
	h3 := newFakeHarness(t, `{"agent":"bot","accepts":{"model_override":true}}`)
	h3.Status = func(string, int) (int, string) {
		return 200, `{"status":"completed","answer":"Refund issued","model":"big-2024"}`
	}
	e3 := newEnv(t, h3, s)
	res := e3.run(t, t.Context(), Config{Model: "big"}, s)
	c3, _, _, _ := h3.snapshot()
	if c3[0].Payload["model"] != "big" {
		t.Errorf("model = %v, want big", c3[0].Payload["model"])
	}
	if r := e3.onlyRun(t, res); r.Model != "big-2024" || res.Report.Model == nil || *res.Report.Model != "big-2024" {
		t.Errorf("recorded model %q / %v, want the reported big-2024", r.Model, res.Report.Model)
	}
}

func TestInputSchemaViolation(t *testing.T) {
	t.Parallel()
	caps := `{"agent":"bot","input_schema":{"type":"object","required":["order_id"],"properties":{"order_id":{"type":"string","pattern":"^[0-9]+$"}}}}`
	doc := `name: s
cases:
  - id: good
    input: {order_id: "1042"}
  - id: bad-type
    input: {order_id: 1042}
  - id: missing
    input: {question: "where?"}
`
	h := newFakeHarness(t, caps)
	s := writeSuite(t, doc, nil)
	e := newEnv(t, h, s)
	_, err := e.runner(t, Config{}).Run(t.Context(), s)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Code != "invalid_case_input" {
		t.Fatalf("error = %v, want invalid_case_input", err)
	}
	for _, want := range []string{"case bad-type", "at /order_id", "case missing"} {
		if !strings.Contains(ce.Message, want) {
			t.Errorf("message %q lacks %q", ce.Message, want)
		}
	}
	if strings.Contains(ce.Message, "case good") {
		t.Errorf("the good case is reported: %q", ce.Message)
	}
	if c, _, _, _ := h.snapshot(); len(c) != 0 || e.rec.experiments() != 0 {
		t.Errorf("runs (%d) or experiments (%d) were created", len(c), e.rec.experiments())
	}

	// Without input_schema the default question schema applies.
	h2 := newFakeHarness(t, `{"agent":"bot"}`)
	e2 := newEnv(t, h2, s)
	_, err = e2.runner(t, Config{}).Run(t.Context(), s)
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, "case good") || !strings.Contains(ce.Message, "default question schema") {
		t.Errorf("default schema: error = %v", err)
	}
}

func TestInputSchemaRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, schema, input string
		compileErr, bad     bool
	}{
		{"default ok", ``, `{"question":"q"}`, false, false},
		{"default missing", ``, `{"q":"x"}`, false, true},
		{"draft 7", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","required":["a"]}`, `{}`, false, true},
		{"draft 4", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`, `{}`, false, false},
		{"2019-09", `{"$schema":"https://json-schema.org/draft/2019-09/schema","type":"object"}`, `{}`, false, false},
		{"unknown draft", `{"$schema":"https://example.com/my-schema","type":"object"}`, `{}`, true, false},
		{"external ref", `{"$ref":"https://example.com/x.json"}`, `{}`, true, false},
		{"internal ref", `{"$defs":{"q":{"type":"string"}},"properties":{"q":{"$ref":"#/$defs/q"}}}`, `{"q":1}`, false, true},
		{"format asserted", `{"properties":{"d":{"type":"string","format":"date"}}}`, `{"d":"not a date"}`, false, true},
		{"ecma lookahead", `{"properties":{"p":{"type":"string","pattern":"^(?=.*[0-9]).+$"}}}`, `{"p":"abc"}`, false, true},
		{"ecma lookahead ok", `{"properties":{"p":{"type":"string","pattern":"^(?=.*[0-9]).+$"}}}`, `{"p":"a1"}`, false, false},
		{"not an object", `[1]`, `{}`, true, false},
	}
	for _, tt := range tests {
		s, err := CompileInputSchema(json.RawMessage(tt.schema))
		if tt.compileErr {
			if err == nil {
				t.Errorf("%s: compiled", tt.name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if err := s.Check(json.RawMessage(tt.input)); (err != nil) != tt.bad {
			t.Errorf("%s: Check = %v, want bad %v", tt.name, err, tt.bad)
		}
	}
}

func TestUnsupportedContractVersion(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot","contract_version":"v2"}`)
	s := writeSuite(t, basicSuite, nil)
	e := newEnv(t, h, s)
	_, err := e.runner(t, Config{}).Run(t.Context(), s)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Code != "unsupported_contract_version" {
		t.Fatalf("error = %v", err)
	}
	if e.rec.experiments() != 0 {
		t.Error("an experiment was created")
	}
	// Capabilities over 1 MiB are refused too.
	big := `{"agent":"bot","pad":"` + strings.Repeat("x", 1<<20) + `"}`
	h2 := newFakeHarness(t, big)
	e2 := newEnv(t, h2, s)
	if _, err := e2.runner(t, Config{}).Run(t.Context(), s); !errors.As(err, &ce) || !strings.Contains(err.Error(), "invalid_response") {
		t.Errorf("oversized capabilities: error = %v", err)
	}
}

func TestRunNeverEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHarness(t, `{"agent":"bot","accepts":{"stop":true},"provides":{"trajectory":true}}`)
		h.Status = func(string, int) (int, string) { return 200, `{"status":"running","model":"m1"}` }
		s := writeSuite(t, basicSuite, nil)
		e := newEnv(t, h, s)
		start := time.Now()
		res := e.run(t, t.Context(), Config{Timeout: 10 * time.Second}, s)
		r := e.onlyRun(t, res)
		if r.Classification != "failed" || !r.TimedOut {
			t.Fatalf("run = %+v, want failed and timed out", r)
		}
		if len(r.Verdicts) != 0 && string(r.Verdicts) != "null" {
			t.Errorf("graders ran on a timed-out run: %s", r.Verdicts)
		}
		_, stops, _, traj := h.snapshot()
		if !slices.Equal(stops, []string{"run-1"}) {
			t.Errorf("stops = %v, want run-1 once", stops)
		}
		if traj["run-1"] != 1 {
			t.Errorf("trajectory fetched %d times, want once", traj["run-1"])
		}
		// 10 s of running, 30 s of waiting for a terminal status after
		// the stop, then the slot is held to 60 s after the stop.
		if d := time.Since(start); d < 70*time.Second || d > 75*time.Second {
			t.Errorf("took %s (fake time), want about 70 s", d)
		}
		if res.Report.TimedOut != 1 || res.Report.Failed != 1 || res.ExitCode != ExitFailed {
			t.Errorf("report = %+v, exit %d", res.Report.Summary, res.ExitCode)
		}
		attempts := decodeJSON[[]Attempt](t, r.Attempts)
		if len(attempts) != 1 || attempts[0].Outcome != outcomeTimedOut || !attempts[0].StopRequested {
			t.Errorf("attempts = %+v", attempts)
		}
	})
}

func TestQueueTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHarness(t, `{"agent":"bot"}`)
		h.Status = func(string, int) (int, string) { return 200, `{"status":"queued","model":"m1"}` }
		s := writeSuite(t, basicSuite, nil)
		e := newEnv(t, h, s)
		res := e.run(t, t.Context(), Config{Timeout: time.Hour, QueueTimeout: 5 * time.Second}, s)
		r := e.onlyRun(t, res)
		if r.Classification != "error" || !strings.Contains(r.Error, "queue timeout") || r.TimedOut {
			t.Fatalf("run = %+v, want an error for the queue timeout", r)
		}
	})
}

func TestServerErrorOnCreate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var healthy atomic.Bool
		h := newFakeHarness(t, `{"agent":"bot"}`)
		h.Create = func(n int, w http.ResponseWriter) bool {
			if healthy.Load() {
				return true
			}
			w.WriteHeader(http.StatusInternalServerError)
			return false
		}
		s := writeSuite(t, basicSuite, nil)
		e := newEnv(t, h, s)
		start := time.Now()
		res := e.run(t, t.Context(), Config{Retries: 2}, s)
		r := e.onlyRun(t, res)
		if r.Classification != "error" || !strings.Contains(r.Error, "HTTP 500") {
			t.Fatalf("run = %+v, want an error", r)
		}
		if res.Report.Failed != 0 || res.Report.Errors != 1 || res.ExitCode != ExitError {
			t.Errorf("report %+v exit %d: a 5xx is an error, not a failure", res.Report.Summary, res.ExitCode)
		}
		attempts := decodeJSON[[]Attempt](t, r.Attempts)
		if len(attempts) != 3 {
			t.Fatalf("%d attempts, want 3 (one plus two retries): %+v", len(attempts), attempts)
		}
		// Exponential backoff from 2 s: 2 s + 4 s.
		if d := time.Since(start); d < 6*time.Second || d > 7*time.Second {
			t.Errorf("took %s, want 6 s of backoff", d)
		}

		// --retry-errors re-runs the errored pair into the same experiment.
		healthy.Store(true)
		res2 := e.run(t, t.Context(), Config{RetryErrors: res.Experiment.ID}, s)
		if res2.Experiment.ID != res.Experiment.ID {
			t.Fatalf("retry went to experiment %s, want %s", res2.Experiment.ID, res.Experiment.ID)
		}
		r2 := e.onlyRun(t, res2)
		if r2.Classification != "passed" || res2.ExitCode != ExitOK {
			t.Fatalf("after retry: %+v exit %d", r2, res2.ExitCode)
		}
		if a := decodeJSON[[]Attempt](t, r2.Attempts); len(a) != 4 || a[3].Outcome != outcomeCompleted {
			t.Errorf("attempts after retry = %+v, want the 3 earlier plus one completed", a)
		}
	})
}

func TestClientErrorOnCreateNotRetried(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot"}`)
	h.Create = func(n int, w http.ResponseWriter) bool {
		w.WriteHeader(http.StatusUnprocessableEntity)
		return false
	}
	s := writeSuite(t, basicSuite, nil)
	e := newEnv(t, h, s)
	res := e.run(t, t.Context(), Config{Retries: 2}, s)
	if r := e.onlyRun(t, res); r.Classification != "error" {
		t.Fatalf("run = %+v", r)
	}
	if c, _, _, _ := h.snapshot(); len(c) != 1 {
		t.Errorf("%d creates, want 1: a 4xx is not retried", len(c))
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHarness(t, `{"agent":"bot"}`)
		h.Create = func(n int, w http.ResponseWriter) bool {
			w.Header().Set("Location", "http://evil.test/runs")
			w.WriteHeader(http.StatusTemporaryRedirect)
			return false
		}
		s := writeSuite(t, basicSuite, nil)
		e := newEnv(t, h, s)
		res := e.run(t, t.Context(), Config{Retries: 1}, s)
		r := e.onlyRun(t, res)
		if r.Classification != "error" || !strings.Contains(r.Error, "invalid_response") {
			t.Fatalf("run = %+v, want an invalid response", r)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, req := range h.requests {
			if strings.Contains(req, "evil") {
				t.Errorf("followed the redirect: %s", req)
			}
		}
		for _, k := range h.keys {
			if k != "secret-key" {
				t.Errorf("request without the harness key: %q", k)
			}
		}
	})
}

func TestRunStatusWithoutModel(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHarness(t, `{"agent":"bot"}`)
		h.Status = func(string, int) (int, string) { return 200, `{"status":"completed","answer":"Refund issued"}` }
		s := writeSuite(t, basicSuite, nil)
		e := newEnv(t, h, s)
		res := e.run(t, t.Context(), Config{Retries: 1}, s)
		r := e.onlyRun(t, res)
		if r.Classification != "error" || !strings.Contains(r.Error, "no model") {
			t.Fatalf("run = %+v, want an error naming the missing model", r)
		}
		creates, _, polls, _ := h.snapshot()
		// Each run is polled once plus three re-polls; a retry is a new
		// run, and the abandoned one is not polled again.
		if len(creates) != 2 || polls["run-1"] != 4 || polls["run-2"] != 4 {
			t.Errorf("creates %d, polls %v; want 2 runs, each polled 4 times", len(creates), polls)
		}
	})
}

// TestInvalidStatusStopIsNotWaitedFor checks the amended rule of SPEC
// §7.2: a run retried because its RunStatus answers were invalid is
// stopped, but its slot is not held waiting for a terminal status that
// the same invalid answers can never confirm.
func TestInvalidStatusStopIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHarness(t, `{"agent":"bot","accepts":{"stop":true}}`)
		h.Status = func(string, int) (int, string) { return 200, `{"status":"running"}` }
		s := writeSuite(t, basicSuite, nil)
		e := newEnv(t, h, s)
		start := time.Now()
		res := e.run(t, t.Context(), Config{Retries: DefaultRetries}, s)
		elapsed := time.Since(start)
		r := e.onlyRun(t, res)
		if r.Classification != "error" || !strings.Contains(r.Error, "no model") {
			t.Fatalf("run = %+v, want an error naming the missing model", r)
		}
		if res.ExitCode != ExitError {
			t.Errorf("exit code %d, want %d", res.ExitCode, ExitError)
		}
		creates, stops, polls, _ := h.snapshot()
		if len(creates) != 3 {
			t.Fatalf("%d runs created, want 3 (one and two retries)", len(creates))
		}
		// Every run is polled once plus three re-polls, and never again
		// after its stop.
		want := map[string]int{"run-1": 4, "run-2": 4, "run-3": 4}
		if !maps.Equal(polls, want) {
			t.Errorf("polls %v, want %v", polls, want)
		}
		if !slices.Equal(stops, []string{"run-1", "run-2"}) {
			t.Errorf("stops %v, want the two retried runs stopped", stops)
		}
		// Polls and the two retry backoffs (2 s, 4 s), nothing near a
		// slot hold of 60 s per retry.
		if elapsed >= 10*time.Second {
			t.Errorf("the experiment took %s of fake time, want under 10 s", elapsed)
		}
	})
}

func TestCompletedWithoutAnswer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHarness(t, `{"agent":"bot"}`)
		h.Status = func(id string, n int) (int, string) {
			if n <= 2 {
				return 200, `{"status":"completed","model":"m1"}`
			}
			return 200, `{"status":"completed","output":{"refund":true},"model":"m1"}`
		}
		s := writeSuite(t, `name: s
cases:
  - id: c
    input: {question: q}
    graders: [{equals_json: {pointer: /refund, value: true}}]
`, nil)
		e := newEnv(t, h, s)
		res := e.run(t, t.Context(), Config{Retries: 0}, s)
		// Two invalid answers are polled again; the third poll is valid.
		if r := e.onlyRun(t, res); r.Classification != "passed" || string(r.Output) != `{"refund":true}` {
			t.Fatalf("run = %+v", r)
		}
	})
}

func TestHarnessFailedStatus(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status          string
		failedIsFailure bool
		want            string
	}{
		{`{"status":"failed","error":"agent crashed","model":"m1"}`, false, "error"},
		{`{"status":"failed","error":"agent crashed","model":"m1"}`, true, "failed"},
		{`{"status":"cancelled","model":"m1"}`, false, "error"},
		{`{"status":"completed","answer":"Refund issued","error":"partial","model":"m1"}`, false, "passed"},
	} {
		h := newFakeHarness(t, `{"agent":"bot"}`)
		h.Status = func(string, int) (int, string) { return 200, tt.status }
		s := writeSuite(t, basicSuite, nil)
		e := newEnv(t, h, s)
		res := e.run(t, t.Context(), Config{FailedIsFailure: tt.failedIsFailure}, s)
		r := e.onlyRun(t, res)
		if r.Classification != tt.want {
			t.Errorf("%s (failed-is-failure %v): %s, want %s", tt.status, tt.failedIsFailure, r.Classification, tt.want)
		}
		if c, _, _, _ := h.snapshot(); len(c) != 1 {
			t.Errorf("%s: %d creates, want 1 (not retried)", tt.status, len(c))
		}
		if strings.Contains(tt.status, "partial") && r.Error != "partial" {
			t.Errorf("non-fatal error = %q, want partial", r.Error)
		}
	}
}

func TestTrajectoryEvidence(t *testing.T) {
	t.Parallel()
	doc := `name: s
cases:
  - id: c
    input: {question: q}
    graders:
      - tool_called: {name: issue_refund, args: {order_id: "1042"}}
      - max_llm_calls: 2
      - max_tokens: 100
`
	for _, tt := range []struct {
		name       string
		caps       string
		trajectory string
		want       string
		reasons    []string
	}{
		{"valid", `{"agent":"bot","provides":{"trajectory":true,"tool_calls":true}}`, validTrajectory, "passed", nil},
		{"no tool_calls", `{"agent":"bot","provides":{"trajectory":true}}`, validTrajectory, "passed",
			[]string{grade.ReasonToolCallsNotProvided, grade.ReasonToolCallsNotProvided, ""}},
		{"invalid", `{"agent":"bot","provides":{"trajectory":true,"tool_calls":true}}`, `{"schema_version":"ATIF-v1.7","steps":[]}`, "unscored",
			[]string{grade.ReasonTrajectoryInvalid, grade.ReasonTrajectoryInvalid, grade.ReasonUsageNotReported}},
		{"not json", `{"agent":"bot","provides":{"trajectory":true,"tool_calls":true}}`, `<html>`, "unscored", nil},
	} {
		h := newFakeHarness(t, tt.caps)
		h.Trajectory = func(_ string, w http.ResponseWriter) { io.WriteString(w, tt.trajectory) }
		s := writeSuite(t, doc, nil)
		e := newEnv(t, h, s)
		res := e.run(t, t.Context(), Config{}, s)
		r := e.onlyRun(t, res)
		if r.Classification != tt.want {
			t.Errorf("%s: %s, want %s; verdicts %s", tt.name, r.Classification, tt.want, r.Verdicts)
		}
		info := decodeJSON[TrajectoryInfo](t, r.Trajectory)
		if wantValid := tt.name == "valid" || tt.name == "no tool_calls"; info.Valid != wantValid || (!wantValid && len(info.Errors) == 0) {
			t.Errorf("%s: trajectory info %+v", tt.name, info)
		}
		if r.TrajectorySHA256 == "" || e.rec.blobs[r.TrajectorySHA256] == nil {
			t.Errorf("%s: trajectory not stored", tt.name)
		}
		vs := decodeJSON[[]grade.Verdict](t, r.Verdicts)
		for i, reason := range tt.reasons {
			if reason == "" {
				continue
			}
			if vs[i].Pass != nil || vs[i].Reason != reason {
				t.Errorf("%s: verdict %d = %+v, want abstention %s", tt.name, i, vs[i], reason)
			}
		}
		if tt.name == "valid" {
			u := decodeJSON[RunUsage](t, r.Usage)
			if *u.PromptTokens != 10 || *u.CompletionTokens != 5 || *u.CostUSD != 0.01 {
				t.Errorf("usage = %s", r.Usage)
			}
		}
	}
}

func TestOversizedTrajectory(t *testing.T) {
	t.Parallel()
	for _, chunked := range []bool{false, true} {
		h := newFakeHarness(t, `{"agent":"bot","provides":{"trajectory":true,"tool_calls":true}}`)
		big := `{"schema_version":"ATIF-v1.7","pad":"` + strings.Repeat("x", 8<<10) + `"}`
		h.Trajectory = func(_ string, w http.ResponseWriter) {
			if !chunked {
				w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			}
			io.WriteString(w, big)
		}
		s := writeSuite(t, basicSuite, nil)
		e := newEnv(t, h, s)
		res := e.run(t, t.Context(), Config{Limits: Limits{Trajectory: 4 << 10}}, s)
		r := e.onlyRun(t, res)
		info := decodeJSON[TrajectoryInfo](t, r.Trajectory)
		if info.Valid || len(info.Errors) != 1 || !strings.HasPrefix(info.Errors[0], "too_large") {
			t.Errorf("chunked %v: trajectory = %+v, want invalid too_large", chunked, info)
		}
		if r.TrajectorySHA256 != "" || len(e.rec.blobs) != 0 {
			t.Errorf("chunked %v: an oversized trajectory was stored", chunked)
		}
		// The answer still decides: the run is graded normally.
		if r.Classification != "passed" {
			t.Errorf("chunked %v: %s", chunked, r.Classification)
		}
	}
}

func TestWorkspaceTraversal(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot","provides":{"workspace":true,"artifacts":true}}`)
	h.Status = func(string, int) (int, string) {
		return 200, `{"status":"completed","answer":"done","model":"m1","artifacts":[{"name":"report","path":"out/report.txt"}]}`
	}
	h.Files = func(string) string {
		return `{"files":[{"path":"../evil","size":1},{"path":"/etc/passwd","size":1},{"path":"a/../../b","size":1},` +
			`{"path":"./x","size":1},{"path":"","size":1},{"path":"a//b","size":1},{"path":"a\\..\\b","size":1},` +
			`{"path":"out/report.txt","size":12},{"path":"dir/with space.txt","size":3}]}`
	}
	h.File = func(_, p string) (int, string) {
		switch p {
		case "out/report.txt":
			return 200, "refund: 42 €"
		case "dir/with%20space.txt":
			return 200, "abc"
		}
		return 404, ""
	}
	s := writeSuite(t, `name: s
cases:
  - id: c
    input: {question: q}
    graders:
      - artifact: {name: report, contains: "refund"}
`, nil)
	e := newEnv(t, h, s)
	res := e.run(t, t.Context(), Config{}, s)
	r := e.onlyRun(t, res)
	if r.Classification != "passed" {
		t.Fatalf("run = %+v verdicts %s", r, r.Verdicts)
	}
	h.mu.Lock()
	gets := slices.Clone(h.fileGets)
	h.mu.Unlock()
	slices.Sort(gets)
	if want := []string{"dir/with%20space.txt", "out/report.txt"}; !slices.Equal(gets, want) {
		t.Errorf("fetched %v, want only %v (escaped segment by segment)", gets, want)
	}
	files := decodeJSON[[]FileRecord](t, r.Files)
	rejected := 0
	for _, f := range files {
		switch f.Path {
		case "out/report.txt", "dir/with space.txt":
			if f.SHA256 == nil || f.Error != nil {
				t.Errorf("%s: %+v, want fetched", f.Path, f)
			}
		default:
			if f.Error == nil || !strings.HasPrefix(*f.Error, "rejected") {
				t.Errorf("%q: %+v, want rejected", f.Path, f)
			}
			rejected++
		}
	}
	if rejected != 7 {
		t.Errorf("%d rejected paths, want 7", rejected)
	}
}

func TestWorkspacePath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a.txt":         "a.txt",
		"dir/b c.txt":   "dir/b%20c.txt",
		"x/%2F/y":       "x/%252F/y",
		"q?x#y":         "q%3Fx%23y",
		"unicode/é.txt": "unicode/%C3%A9.txt",
	} {
		got, err := WorkspacePath(in)
		if err != nil || got != want {
			t.Errorf("WorkspacePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "/abs", "../x", "a/..", "./a", "a//b", "a/", "a\\b", "a\x00b", "a\nb"} {
		if got, err := WorkspacePath(bad); err == nil {
			t.Errorf("WorkspacePath(%q) = %q, want an error", bad, got)
		}
	}
}

func TestMaxConcurrentRunsBelowFlag(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHarness(t, `{"agent":"bot","limits":{"max_concurrent_runs":2}}`)
		h.Status = func(_ string, n int) (int, string) {
			if n < 4 {
				return 200, `{"status":"running","model":"m1"}`
			}
			return 200, `{"status":"completed","answer":"Refund issued","model":"m1"}`
		}
		s := writeSuite(t, `name: s
defaults: {repetitions: 6}
cases:
  - id: a
    input: {question: q}
    graders: [{contains: Refund}]
  - id: b
    input: {question: q}
    graders: [{contains: Refund}]
`, nil)
		e := newEnv(t, h, s)
		res := e.run(t, t.Context(), Config{Concurrency: 8}, s)
		if res.Report.Passed != 12 {
			t.Fatalf("report = %+v", res.Report.Summary)
		}
		h.mu.Lock()
		peak := h.peakActive
		h.mu.Unlock()
		if peak > 2 || res.PeakConcurrency != 2 {
			t.Errorf("harness saw %d runs at once, runner held %d slots; want at most 2 and 2", peak, res.PeakConcurrency)
		}
	})
}

func TestBackpressure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHarness(t, `{"agent":"bot"}`)
		h.Create = func(n int, w http.ResponseWriter) bool {
			if n <= 2 {
				w.Header().Set("Retry-After", "3")
				w.WriteHeader(http.StatusTooManyRequests)
				return false
			}
			return true
		}
		s := writeSuite(t, basicSuite, nil)
		e := newEnv(t, h, s)
		start := time.Now()
		res := e.run(t, t.Context(), Config{Retries: 0, Concurrency: 8}, s)
		r := e.onlyRun(t, res)
		if r.Classification != "passed" {
			t.Fatalf("run = %+v, want passed after backpressure", r)
		}
		if a := decodeJSON[[]Attempt](t, r.Attempts); len(a) != 1 {
			t.Errorf("%d attempts: backpressure spends no retry", len(a))
		}
		if d := time.Since(start); d < 6*time.Second {
			t.Errorf("took %s; want the two Retry-After waits (6 s)", d)
		}
	})
}

func TestLimiter(t *testing.T) {
	t.Parallel()
	l := newLimiter(8)
	l.backpressure()
	l.backpressure()
	if lim, _ := l.state(); lim != 2 {
		t.Fatalf("limit after two halvings = %d, want 2", lim)
	}
	for range 9 {
		l.success()
	}
	if lim, _ := l.state(); lim != 2 {
		t.Errorf("limit after 9 successes = %d, want 2", lim)
	}
	l.success()
	if lim, _ := l.state(); lim != 3 {
		t.Errorf("limit after 10 successes = %d, want 3", lim)
	}
	for range 100 {
		l.success()
	}
	if lim, _ := l.state(); lim != 8 {
		t.Errorf("limit grows back to %d, want the maximum 8", lim)
	}
	for range 10 {
		l.backpressure()
	}
	if lim, _ := l.state(); lim != 1 {
		t.Errorf("limit = %d, never below 1", lim)
	}
	ctx, cancel := context.WithCancel(t.Context())
	if err := l.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := l.acquire(ctx); err == nil {
		t.Error("second acquire at limit 1 succeeded")
	}
}

func TestInterruptAndResume(t *testing.T) {
	t.Parallel()
	for _, stop := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			var finished atomic.Bool
			caps := `{"agent":"bot","accepts":{"stop":true}}`
			if !stop {
				caps = `{"agent":"bot"}`
			}
			h := newFakeHarness(t, caps)
			h.Status = func(string, int) (int, string) {
				if finished.Load() {
					return 200, `{"status":"completed","answer":"Refund issued","model":"m1"}`
				}
				return 200, `{"status":"running","model":"m1"}`
			}
			s := writeSuite(t, `name: s
defaults: {repetitions: 3}
cases:
  - id: c
    input: {question: q}
    graders: [{contains: Refund}]
`, nil)
			e := newEnv(t, h, s)
			ctx, cancel := context.WithCancel(t.Context())
			go func() {
				time.Sleep(5 * time.Second)
				cancel()
			}()
			res := e.run(t, ctx, Config{Concurrency: 2}, s)
			if !res.Interrupted || res.ExitCode != ExitError {
				t.Fatalf("stop %v: interrupted %v exit %d", stop, res.Interrupted, res.ExitCode)
			}
			creates, stops, _, _ := h.snapshot()
			if len(creates) != 2 {
				t.Fatalf("stop %v: %d runs created, want 2 (the third was never launched)", stop, len(creates))
			}
			if stop && len(stops) != 2 || !stop && len(stops) != 0 {
				t.Errorf("stop %v: stops = %v", stop, stops)
			}
			runs, _ := e.rec.Runs(t.Context(), res.Experiment.ID)
			if len(runs) != 2 || runs[0].Classification != "" || runs[0].RunID == "" {
				t.Fatalf("stop %v: saved runs %+v, want 2 in flight with their run ids", stop, runs)
			}

			// Resume: the interrupted runs are run again (stopped) or
			// polled again (not stopped); the third is launched.
			finished.Store(true)
			res2 := e.run(t, t.Context(), Config{Concurrency: 2, Resume: res.Experiment.ID}, s)
			if res2.Report.Passed != 3 || res2.ExitCode != ExitOK {
				t.Fatalf("stop %v: after resume %+v", stop, res2.Report.Summary)
			}
			creates, _, _, _ = h.snapshot()
			want := 2 + 1
			if stop {
				want = 2 + 3
			}
			if len(creates) != want {
				t.Errorf("stop %v: %d runs created in all, want %d", stop, len(creates), want)
			}
			// A second resume has nothing to do.
			res3 := e.run(t, t.Context(), Config{Concurrency: 2, Resume: res.Experiment.ID}, s)
			if c, _, _, _ := h.snapshot(); len(c) != want || res3.Report.Passed != 3 {
				t.Errorf("stop %v: a finished experiment was run again", stop)
			}
		})
	}
}

func TestResumeRefusesChanges(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot","revision":"abc"}`)
	s := writeSuite(t, basicSuite, nil)
	e := newEnv(t, h, s)
	res := e.run(t, t.Context(), Config{}, s)
	h.Caps = `{"agent":"bot","revision":"def"}`
	_, err := e.runner(t, Config{Resume: res.Experiment.ID}).Run(t.Context(), s)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Code != "resume_mismatch" || !strings.Contains(ce.Message, "revision") {
		t.Fatalf("error = %v, want resume_mismatch on the revision", err)
	}
	if _, err := e.runner(t, Config{Resume: res.Experiment.ID, Force: true}).Run(t.Context(), s); err != nil {
		t.Errorf("--force: %v", err)
	}
	s2 := writeSuite(t, strings.Replace(basicSuite, `version: "1"`, `version: "2"`, 1), nil)
	h.Caps = `{"agent":"bot","revision":"abc"}`
	if _, err := e.runner(t, Config{Resume: res.Experiment.ID}).Run(t.Context(), s2); !errors.As(err, &ce) || !strings.Contains(ce.Message, "suite version") {
		t.Errorf("changed suite version: %v", err)
	}
	h.Caps = `{"agent":"bot","revision":"abc","accepts":{"model_override":true}}`
	if _, err := e.runner(t, Config{Resume: res.Experiment.ID, Model: "x"}).Run(t.Context(), s); !errors.As(err, &ce) || !strings.Contains(ce.Message, "model") {
		t.Errorf("changed model: %v", err)
	}
	if _, err := e.runner(t, Config{Resume: "0190a000-0000-7000-8000-999999999999"}).Run(t.Context(), s); !errors.As(err, &ce) || ce.Code != "experiment_not_found" {
		t.Errorf("unknown experiment: %v", err)
	}
}

func TestRunIDCommittedAfterCreate(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot"}`)
	s := writeSuite(t, basicSuite, nil)
	e := newEnv(t, h, s)
	e.run(t, t.Context(), Config{}, s)
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	if len(e.rec.history) != 2 {
		t.Fatalf("%d writes, want 2", len(e.rec.history))
	}
	first := e.rec.history[0]
	if first.RunID != "run-1" || first.Classification != "" {
		t.Errorf("first write = %+v, want the run id without a classification", first)
	}
	if e.rec.history[1].Classification != "passed" {
		t.Errorf("second write = %+v", e.rec.history[1])
	}
}

func TestMixedModels(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot"}`)
	h.Status = func(id string, _ int) (int, string) {
		return 200, fmt.Sprintf(`{"status":"completed","answer":"Refund issued","model":"m-%s"}`, id)
	}
	s := writeSuite(t, strings.Replace(basicSuite, "cases:", "defaults: {repetitions: 2}\ncases:", 1), nil)
	e := newEnv(t, h, s)
	res := e.run(t, t.Context(), Config{}, s)
	if res.Report.Model == nil || *res.Report.Model != MixedModel || len(res.Report.Warnings) != 1 {
		t.Errorf("model %v warnings %v, want mixed with a warning", res.Report.Model, res.Report.Warnings)
	}
	if e.rec.exps[res.Experiment.ID].Model != MixedModel {
		t.Errorf("stored model = %q", e.rec.exps[res.Experiment.ID].Model)
	}
}

func TestExitCodesEndToEnd(t *testing.T) {
	t.Parallel()
	// Case a passes 3 of 3, case b 1 of 3: pass rate 4/6.
	doc := `name: s
defaults: {repetitions: 3}
cases:
  - id: a
    input: {question: a}
    graders: [{contains: Refund}]
  - id: b
    input: {question: b}
    graders: [{contains: Refund}]
`
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name string
		c    Criteria
		want int
	}{
		{"a case failed", DefaultCriteria(), ExitFailed},
		{"fail-under met", Criteria{FailUnder: f(0.6), CaseThreshold: 1, MaxUnscoredRate: 0.2}, ExitOK},
		{"fail-under missed", Criteria{FailUnder: f(0.7), CaseThreshold: 1, MaxUnscoredRate: 0.2}, ExitFailed},
		{"case threshold", Criteria{CaseThreshold: 0.3, MaxUnscoredRate: 0.2}, ExitOK},
	}
	for _, tt := range tests {
		h := newFakeHarness(t, `{"agent":"bot"}`)
		var n atomic.Int32
		h.Status = func(id string, _ int) (int, string) {
			// Runs of case b (created 4th to 6th) fail but the first.
			num := 0
			fmt.Sscanf(id, "run-%d", &num)
			if num >= 5 {
				n.Add(1)
				return 200, `{"status":"completed","answer":"no","model":"m1"}`
			}
			return 200, `{"status":"completed","answer":"Refund issued","model":"m1"}`
		}
		s := writeSuite(t, doc, nil)
		e := newEnv(t, h, s)
		res := e.run(t, t.Context(), Config{Concurrency: 1, Criteria: tt.c}, s)
		if res.Report.Passed != 4 || res.Report.Failed != 2 {
			t.Fatalf("%s: report %+v", tt.name, res.Report.Summary)
		}
		if res.ExitCode != tt.want {
			t.Errorf("%s: exit %d (%s), want %d", tt.name, res.ExitCode, res.Report.ExitReason, tt.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	sum := func(passed, failed, unscored, errors int) Summary {
		s := Summary{Runs: passed + failed + unscored + errors, Passed: passed, Failed: failed, Unscored: unscored, Errors: errors}
		if passed+failed > 0 {
			s.PassRate = f(float64(passed) / float64(passed+failed))
		}
		return s
	}
	d := DefaultCriteria()
	tests := []struct {
		name        string
		s           Summary
		casesFailed int
		c           Criteria
		want        int
	}{
		{"all pass", sum(10, 0, 0, 0), 0, d, 0},
		{"a case failed", sum(9, 1, 0, 0), 1, d, 100},
		{"nothing scored", sum(0, 0, 2, 0), 0, d, 1},
		{"nothing at all", sum(0, 0, 0, 0), 0, d, 1},
		{"an error, max 0", sum(9, 0, 0, 1), 0, d, 1},
		{"errors within max", sum(9, 0, 0, 1), 0, Criteria{CaseThreshold: 1, MaxErrorRate: 0.1, MaxUnscoredRate: 0.2}, 0},
		{"errors win over failures", sum(5, 4, 0, 1), 3, d, 1},
		{"unscored over max", sum(7, 0, 3, 0), 0, d, 1},
		{"unscored at max", sum(8, 0, 2, 0), 0, d, 0},
		{"fail-under met despite failed case", sum(9, 1, 0, 0), 1, Criteria{FailUnder: f(0.9), CaseThreshold: 1, MaxUnscoredRate: 0.2}, 0},
		{"fail-under missed", sum(8, 2, 0, 0), 1, Criteria{FailUnder: f(0.9), CaseThreshold: 1, MaxUnscoredRate: 0.2}, 100},
		{"fail-under 0", sum(0, 5, 0, 0), 1, Criteria{FailUnder: f(0), CaseThreshold: 1, MaxUnscoredRate: 0.2}, 0},
	}
	for _, tt := range tests {
		if got, reason := ExitCode(tt.s, tt.casesFailed, tt.c); got != tt.want {
			t.Errorf("%s: exit %d (%s), want %d", tt.name, got, reason, tt.want)
		}
	}
}

func TestDecodeRunStatus(t *testing.T) {
	t.Parallel()
	good := []string{
		`{"status":"running","model":"m"}`,
		`{"status":"completed","answer":"a","model":"m"}`,
		`{"status":"completed","output":{},"model":"m","extra":1}`,
		`{"status":"failed","error":"x","model":"m"}`,
		`{"status":"completed","answer":"","model":"m","artifacts":[{"name":"a","path":"x"}]}`,
	}
	bad := []string{
		`{"status":"running"}`,
		`{"status":"running","model":null}`,
		`{"status":"running","model":""}`,
		`{"status":"running","model":1}`,
		`{"status":"done","model":"m"}`,
		`{"status":"completed","model":"m"}`,
		`{"status":"completed","answer":null,"output":null,"model":"m"}`,
		`{"status":"completed","output":[1],"model":"m"}`,
		`{"status":"completed","answer":1,"model":"m"}`,
		`{"status":"completed","answer":"a","model":"m","artifacts":[{"path":"x"}]}`,
	}
	for _, g := range good {
		if _, err := decodeRunStatus([]byte(g)); err != nil {
			t.Errorf("%s: %v", g, err)
		}
	}
	for _, b := range bad {
		if _, err := decodeRunStatus([]byte(b)); err == nil {
			t.Errorf("%s: accepted", b)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"0":                             0,
		"7":                             7 * time.Second,
		"99999":                         maxRetryAfter,
		"Tue, 01 Jan 2030 00:00:10 GMT": 10 * time.Second,
		"Mon, 31 Dec 2029 00:00:00 GMT": 0,
	} {
		if got, ok := parseRetryAfter(in, now); !ok || got != want {
			t.Errorf("parseRetryAfter(%q) = %s, %v; want %s", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "-1", "soon", "1.5"} {
		if _, ok := parseRetryAfter(bad, now); ok {
			t.Errorf("parseRetryAfter(%q) accepted", bad)
		}
	}
}

func TestJUnit(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot"}`)
	h.Status = func(id string, _ int) (int, string) {
		if id == "run-2" {
			return 200, `{"status":"completed","answer":"no","model":"m1"}`
		}
		return 200, `{"status":"completed","answer":"Refund issued","model":"m1"}`
	}
	s := writeSuite(t, strings.Replace(basicSuite, "cases:", "defaults: {repetitions: 2}\ncases:", 1), nil)
	e := newEnv(t, h, s)
	res := e.run(t, t.Context(), Config{Concurrency: 1}, s)
	var b strings.Builder
	if err := WriteJUnit(&b, res.Report.Summary, e.rec.AllRuns(t.Context(), res.Experiment.ID)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{`<testsuite name="refunds" tests="2" failures="1" errors="0" skipped="0"`,
		`<testcase name="small#1" classname="refunds.small"`, `<testcase name="small#2"`, `<failure message="failed" type="failed">contains: `} {
		if !strings.Contains(out, want) {
			t.Errorf("JUnit lacks %q:\n%s", want, out)
		}
	}
}

func TestTrajectoryBackpressure(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHarness(t, `{"agent":"bot","provides":{"trajectory":true,"tool_calls":true}}`)
		var n atomic.Int32
		h.Trajectory = func(_ string, w http.ResponseWriter) {
			if n.Add(1) == 1 {
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, validTrajectory)
		}
		s := writeSuite(t, basicSuite, nil)
		e := newEnv(t, h, s)
		r := e.onlyRun(t, e.run(t, t.Context(), Config{}, s))
		if info := decodeJSON[TrajectoryInfo](t, r.Trajectory); !info.Valid {
			t.Errorf("trajectory = %+v, want valid after the backpressure wait", info)
		}
		if n.Load() != 2 {
			t.Errorf("%d trajectory requests, want 2", n.Load())
		}
	})
}

func TestProgress(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	clk := clock.NewFake(time.Unix(0, 0))
	lp := NewLineProgress(&b, clk)
	lp.Start(3)
	lp.Done(store.RunRecord{CaseID: "a", Repetition: 1, Classification: "passed"})
	lp.Done(store.RunRecord{CaseID: "a", Repetition: 2, Classification: "error", Error: "boom"})
	lp.Warn("careful")
	lp.Done(store.RunRecord{CaseID: "a", Repetition: 3, Classification: "failed"})
	lp.Finish()
	for _, want := range []string{"running 3 runs\n", "error: a#2: boom\n", "warning: careful\n", "3/3 runs, pass rate 50.0%, 1 errors\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, b.String())
		}
	}
	// The bar draws the counts, the pass rate so far and the errors, and
	// prints warnings above itself.
	var sb syncBuf
	bp := NewBarProgress(&sb)
	bp.Start(3)
	bp.Done(store.RunRecord{Classification: "passed"})
	bp.Warn("careful")
	bp.Done(store.RunRecord{Classification: "failed"})
	bp.Done(store.RunRecord{Classification: "error", Error: "boom"})
	bp.Finish()
	out := sb.String()
	if !strings.Contains(out, "warning: careful\n") {
		t.Errorf("bar output lacks the warning:\n%q", out)
	}
	if !regexp.MustCompile(`(?m)^3/3 runs \[=+\]  pass 50\.0%  errors 1 `).MatchString(out) {
		t.Errorf("bar output lacks the final bar with 3/3 runs, pass 50.0%%, 1 error:\n%q", out)
	}
}

// TestBarProgressConcurrentDone checks that runs finishing on many
// goroutines at once advance the bar safely (run it with -race) and all
// count.
func TestBarProgressConcurrentDone(t *testing.T) {
	t.Parallel()
	var sb syncBuf
	bp := NewBarProgress(&sb)
	bp.Start(400)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				bp.Done(store.RunRecord{Classification: "passed"})
			}
		})
	}
	wg.Wait()
	bp.Finish()
	if out := sb.String(); !strings.Contains(out, "400/400 runs") {
		t.Errorf("bar output lacks 400/400 runs:\n%q", out)
	}
}

// TestProgressByTerminalWidth checks which display a stderr gets: a bar
// on a terminal that reports its width, lines when it is not a terminal
// and when the terminal reports zero columns (a bar would draw nothing).
func TestProgressByTerminalWidth(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		columns int
		bar     bool
	}{{0, false}, {-1, false}, {1, true}, {80, true}} {
		p := NewProgress(io.Discard, tt.columns, nil)
		if _, bar := p.(*BarProgress); bar != tt.bar {
			t.Errorf("%d columns: %T, want a bar %v", tt.columns, p, tt.bar)
		}
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSummaryIndependentOfRecordOrder checks the rule that lets reports be
// built from the store one record at a time: the report depends on the
// records, not on the order they arrive in (the seeded bootstrap sees each
// case's samples in repetition order).
func TestSummaryIndependentOfRecordOrder(t *testing.T) {
	t.Parallel()
	var runs []store.RunRecord
	classes := []string{"passed", "failed", "passed", "unscored", "error", "passed", "failed"}
	for c := range 5 {
		for rep := 1; rep <= len(classes); rep++ {
			score := float64((c+rep)%4) / 3
			lat := float64(100 * rep)
			runs = append(runs, store.RunRecord{CaseID: fmt.Sprintf("case-%d", c), Repetition: rep,
				Classification: classes[(c+rep)%len(classes)], Score: &score, LatencyMS: &lat, Model: "m1",
				Usage: json.RawMessage(`{"prompt_tokens":3,"completion_tokens":4,"cost_usd":0.5}`)})
		}
	}
	e := store.Experiment{ID: "x", Suite: "s", SuiteVersion: "1", Harness: "h"}
	want := Summarize(e, runs, 5, DefaultCriteria(), 7)
	for i := range 5 {
		shuffled := slices.Clone(runs)
		rnd := uint64(i + 1)
		for j := len(shuffled) - 1; j > 0; j-- {
			rnd = rnd*6364136223846793005 + 1442695040888963407
			k := int(rnd>>33) % (j + 1)
			shuffled[j], shuffled[k] = shuffled[k], shuffled[j]
		}
		got := Summarize(e, shuffled, 5, DefaultCriteria(), 7)
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Fatalf("shuffle %d: report\n%s\nwant\n%s", i, gj, wj)
		}
	}
}

// TestRunReportIsTheStoredReport checks that the report of a run, built
// from the recorder, is the one eval show computes later from the stored
// records.
func TestRunReportIsTheStoredReport(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot"}`)
	h.Status = func(id string, _ int) (int, string) {
		if id == "run-2" || id == "run-5" {
			return 200, `{"status":"completed","answer":"no","model":"m1"}`
		}
		return 200, `{"status":"completed","answer":"Refund issued","model":"m1"}`
	}
	s := writeSuite(t, strings.Replace(basicSuite, "cases:", "defaults: {repetitions: 6}\ncases:", 1), nil)
	e := newEnv(t, h, s)
	res := e.run(t, t.Context(), Config{Concurrency: 3, Seed: 9}, s)
	exp, err := e.rec.Experiment(t.Context(), res.Experiment.ID)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := e.rec.Runs(t.Context(), exp.ID)
	if err != nil {
		t.Fatal(err)
	}
	stored := ReportOf(exp, runs)
	gj, _ := json.Marshal(res.Report)
	wj, _ := json.Marshal(stored)
	if res.Report.Runs != 6 || res.Report.Failed != 2 || string(gj) != string(wj) {
		t.Errorf("run report\n%s\nwant the stored report\n%s", gj, wj)
	}
}
