package harnesscheck_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/harnesscheck"
)

// check runs the conformance check against url with test-friendly
// timeouts.
func check(t *testing.T, url string, change func(c *harnesscheck.Config)) harnesscheck.Report {
	t.Helper()
	cfg := harnesscheck.Config{URL: url, RunTimeout: 20 * time.Second, PollInterval: time.Millisecond}
	if change != nil {
		change(&cfg)
	}
	rep, err := harnesscheck.Run(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep) != len(harnesscheck.Names) {
		t.Fatalf("report has %d checks, want %d", len(rep), len(harnesscheck.Names))
	}
	for i, c := range rep {
		if c.Name != harnesscheck.Names[i] {
			t.Fatalf("check %d is %q, want %q", i, c.Name, harnesscheck.Names[i])
		}
	}
	return rep
}

// dump logs the report, for failing tests.
func dump(t *testing.T, rep harnesscheck.Report) {
	t.Helper()
	var b bytes.Buffer
	_ = rep.WriteText(&b)
	t.Log("\n" + b.String())
}

func TestConformingFakePasses(t *testing.T) {
	t.Parallel()
	f, url := newFake(t, func(f *fake) {
		f.requireKey = "k-123"
		// Runs 1 and 2 share a session the listing groups.
		f.sessionOf = func(i int) string {
			if i == 1 || i == 2 {
				return "shared"
			}
			return "s" + string(rune('a'+i))
		}
		f.groupSessions = true
	})
	var streamed harnesscheck.Report
	rep := check(t, url, func(c *harnesscheck.Config) {
		c.APIKey = "k-123"
		c.OnCheck = func(c harnesscheck.Check) { streamed = append(streamed, c) }
	})
	if rep.Failed() || rep.Count(harnesscheck.Warn) > 0 || rep.Count(harnesscheck.Skip) > 0 {
		dump(t, rep)
		t.Fatal("a conforming harness must pass every check")
	}
	if !slices.Equal(streamed, rep) {
		t.Fatalf("OnCheck saw %v, want the report %v in order", streamed, rep)
	}
	if f.sawKeyMismatch {
		t.Error("a request reached the harness without its key")
	}
}

func TestMisbehavingHarnesses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(f *fake)
		config func(c *harnesscheck.Config)
		check  string
		want   harnesscheck.Result
		detail string
	}{
		{
			name:   "listing ignores query",
			change: func(f *fake) { f.ignoreQuery = true },
			check:  harnesscheck.CheckListingQuery, want: harnesscheck.Fail, detail: "is query ignored?",
		},
		{
			name: "check_input violates its own input_schema",
			change: func(f *fake) {
				f.caps["input_schema"] = map[string]any{"type": "object", "required": []any{"order_id"}, "properties": map[string]any{"order_id": map[string]any{"type": "string"}}}
			},
			check: harnesscheck.CheckInput, want: harnesscheck.Fail, detail: "does not pass the declared input_schema",
		},
		{
			name:   "check_input violates the default schema",
			change: func(f *fake) { delete(f.caps, "input_schema"); f.caps["check_input"] = map[string]any{"prompt": "hi"} },
			check:  harnesscheck.CheckInput, want: harnesscheck.Fail, detail: "default question schema",
		},
		{
			name:   "workspace path with ..",
			change: func(f *fake) { f.files = []map[string]any{{"path": "out/../../etc/passwd", "size": 3}} },
			check:  harnesscheck.CheckWorkspace, want: harnesscheck.Fail, detail: "has a .. segment",
		},
		{
			name:   "absolute workspace path",
			change: func(f *fake) { f.files = []map[string]any{{"path": "/etc/passwd", "size": 3}} },
			check:  harnesscheck.CheckWorkspace, want: harnesscheck.Fail, detail: "is absolute",
		},
		{
			name:   "workspace file size differs from the listing",
			change: func(f *fake) { f.fileBody = func(string) []byte { return []byte("longer than listed") } },
			check:  harnesscheck.CheckWorkspace, want: harnesscheck.Fail, detail: "the listing says 3",
		},
		{
			name:   "workspace file served as text/html",
			change: func(f *fake) { f.fileType = "text/html" },
			check:  harnesscheck.CheckWorkspace, want: harnesscheck.Fail, detail: "breaks the contract",
		},
		{
			name:   "workspace path gyre eval will not fetch",
			change: func(f *fake) { f.files = []map[string]any{{"path": "out//x", "size": 3}} },
			check:  harnesscheck.CheckWorkspace, want: harnesscheck.Warn, detail: "empty path segment",
		},
		{
			name:   "contract_version v2",
			change: func(f *fake) { f.caps["contract_version"] = "v2" },
			check:  harnesscheck.CheckContractVersion, want: harnesscheck.Fail, detail: `"v2"`,
		},
		{
			name:   "capabilities without agent",
			change: func(f *fake) { delete(f.caps, "agent") },
			check:  harnesscheck.CheckCapabilities, want: harnesscheck.Fail, detail: "agent",
		},
		{
			name:   "capabilities with a flag of the wrong type",
			change: func(f *fake) { f.caps["accepts"] = map[string]any{"stop": "yes"} },
			check:  harnesscheck.CheckCapabilities, want: harnesscheck.Fail, detail: "/accepts/stop",
		},
		{
			name:   "max_concurrent_runs 0",
			change: func(f *fake) { f.caps["limits"] = map[string]any{"max_concurrent_runs": 0} },
			check:  harnesscheck.CheckCapabilities, want: harnesscheck.Fail, detail: "at least 1",
		},
		{
			name:   "oversized capabilities",
			change: func(f *fake) { f.rawCaps = []byte(`{"agent":"big","pad":"` + strings.Repeat("x", 1<<20) + `"}`) },
			check:  harnesscheck.CheckCapabilities, want: harnesscheck.Fail, detail: "answer over the limit of 1 MiB",
		},
		{
			name:   "capabilities not JSON",
			change: func(f *fake) { f.rawCaps = []byte(`<html>hello</html>`) },
			check:  harnesscheck.CheckCapabilities, want: harnesscheck.Fail, detail: "capabilities",
		},
		{
			name:   "POST /runs answers 200",
			change: func(f *fake) { f.createStatus = http.StatusOK },
			check:  harnesscheck.CheckRun, want: harnesscheck.Warn, detail: "answered 200; the contract declares 201",
		},
		{
			name:   "POST /runs answers 500",
			change: func(f *fake) { f.createStatus = http.StatusInternalServerError },
			check:  harnesscheck.CheckRun, want: harnesscheck.Fail, detail: "answered 500",
		},
		{
			name:   "RunStatus without model",
			change: func(f *fake) { f.noModel = true },
			check:  harnesscheck.CheckRun, want: harnesscheck.Fail, detail: "model",
		},
		{
			name:   "invalid trajectory",
			change: func(f *fake) { f.trajectory = `{"schema_version":"ATIF-v1.6","agent":{"name":"x"},"steps":[]}` },
			check:  harnesscheck.CheckTrajectory, want: harnesscheck.Fail, detail: "not valid ATIF",
		},
		{
			name:   "trajectory that is not an object",
			change: func(f *fake) { f.trajectory = `[1,2]` },
			check:  harnesscheck.CheckTrajectory, want: harnesscheck.Fail, detail: "breaks the contract",
		},
		{
			name:   "stop ignored",
			change: func(f *fake) { f.ignoreStop = true; f.pollsToFinish = 1 << 30 },
			config: func(c *harnesscheck.Config) { c.RunTimeout = 300 * time.Millisecond },
			check:  harnesscheck.CheckStop, want: harnesscheck.Fail, detail: "still running",
		},
		{
			name:   "runs that never finish",
			change: func(f *fake) { f.pollsToFinish = 1 << 30 },
			config: func(c *harnesscheck.Config) { c.RunTimeout = 200 * time.Millisecond },
			check:  harnesscheck.CheckRun, want: harnesscheck.Fail, detail: "was still running after 200ms",
		},
		{
			name:   "file url never fetched",
			change: func(f *fake) { f.noFetch = true },
			check:  harnesscheck.CheckFixtures, want: harnesscheck.Fail, detail: "without fetching",
		},
		{
			name:   "listing ignores limit",
			change: func(f *fake) { f.ignoreLimit = true },
			check:  harnesscheck.CheckListingPagination, want: harnesscheck.Fail, detail: "limit=1&offset=0 listed",
		},
		{
			name:   "listing oldest first",
			change: func(f *fake) { f.oldestFirst = true },
			check:  harnesscheck.CheckListingPagination, want: harnesscheck.Fail, detail: "not newest first",
		},
		{
			name:   "listing ignores since",
			change: func(f *fake) { f.ignoreSince = true },
			check:  harnesscheck.CheckListingTimeRange, want: harnesscheck.Fail, detail: "since=",
		},
		{
			name:   "listing created_at without a zone",
			change: func(f *fake) { f.createdAt = func(t time.Time) string { return t.Format("2006-01-02T15:04:05") } },
			check:  harnesscheck.CheckListingPagination, want: harnesscheck.Fail, detail: "breaks the contract",
		},
		{
			name: "sessions listed more than once",
			change: func(f *fake) {
				f.sessionOf = func(int) string { return "one-session" }
			},
			check: harnesscheck.CheckListingSessionID, want: harnesscheck.Fail, detail: `session_id "one-session" is listed`,
		},
		{
			name:   "input_schema without check_input",
			change: func(f *fake) { delete(f.caps, "check_input") },
			check:  harnesscheck.CheckRun, want: harnesscheck.Warn, detail: "skipped",
		},
		{
			name:   "no input_schema and no check_input",
			change: func(f *fake) { delete(f.caps, "check_input"); delete(f.caps, "input_schema") },
			check:  harnesscheck.CheckRun, want: harnesscheck.Pass, detail: "completed",
		},
		{
			name:   "nothing to deliver fixtures with",
			change: func(f *fake) { f.caps["accepts"] = map[string]any{"stop": true} },
			check:  harnesscheck.CheckFixtures, want: harnesscheck.Skip, detail: "neither files nor file_urls",
		},
		{
			name:   "no listing",
			change: func(f *fake) { f.caps["provides"] = map[string]any{"trajectory": true} },
			check:  harnesscheck.CheckListingQuery, want: harnesscheck.Skip, detail: "run_listing is false",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, url := newFake(t, tc.change)
			rep := check(t, url, tc.config)
			got, _ := rep.Get(tc.check)
			t.Log(got)
			if got.Result != tc.want || !strings.Contains(got.Detail, tc.detail) {
				dump(t, rep)
				t.Fatalf("%s = %s %q, want %s containing %q", tc.check, got.Result, got.Detail, tc.want, tc.detail)
			}
			if tc.want == harnesscheck.Fail && !rep.Failed() {
				t.Fatal("a report with a FAIL must fail")
			}
		})
	}
}

func TestContractVersionV2SkipsTheRest(t *testing.T) {
	t.Parallel()
	f, url := newFake(t, func(f *fake) { f.caps["contract_version"] = "v2" })
	rep := check(t, url, nil)
	for _, c := range rep[2:] {
		if c.Result != harnesscheck.Skip {
			dump(t, rep)
			t.Fatalf("%s = %s, want SKIP after an unsupported contract version", c.Name, c.Result)
		}
	}
	if len(f.runs) != 0 {
		t.Errorf("%d runs created against a v2 harness", len(f.runs))
	}
}

func TestRedirectIsNeverFollowed(t *testing.T) {
	t.Parallel()
	var hits, keyed atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("x-api-key") != "" {
			keyed.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"agent":"elsewhere"}`))
	}))
	t.Cleanup(target.Close)
	_, url := newFake(t, func(f *fake) { f.redirectCaps = target.URL + "/capabilities" })
	rep := check(t, url, func(c *harnesscheck.Config) { c.APIKey = "secret" })
	got, _ := rep.Get(harnesscheck.CheckCapabilities)
	if got.Result != harnesscheck.Fail || !strings.Contains(got.Detail, "never follows redirects") {
		dump(t, rep)
		t.Fatalf("capabilities = %s %q, want FAIL naming the redirect", got.Result, got.Detail)
	}
	if hits.Load() != 0 || keyed.Load() != 0 {
		t.Fatalf("the redirect target got %d requests (%d with the key)", hits.Load(), keyed.Load())
	}
	for _, c := range rep[1:] {
		if c.Result != harnesscheck.Skip {
			t.Fatalf("%s = %s after unreadable capabilities, want SKIP", c.Name, c.Result)
		}
	}
	var text bytes.Buffer
	_ = rep.WriteText(&text)
	if strings.Contains(text.String(), "secret") {
		t.Fatal("the report shows the api key")
	}
}

func TestUnreachableHarness(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.NotFoundHandler())
	url := hs.URL
	hs.Close()
	rep := check(t, url, func(c *harnesscheck.Config) { c.CallTimeout = 5 * time.Second })
	if got, _ := rep.Get(harnesscheck.CheckCapabilities); got.Result != harnesscheck.Fail {
		t.Fatalf("capabilities = %s %q, want FAIL", got.Result, got.Detail)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  harnesscheck.Config
		ok   bool
	}{
		{"plain", harnesscheck.Config{URL: "http://127.0.0.1:8080"}, true},
		{"base path", harnesscheck.Config{URL: "https://agent.example/harness/"}, true},
		{"no scheme", harnesscheck.Config{URL: "agent.example"}, false},
		{"ftp", harnesscheck.Config{URL: "ftp://agent.example"}, false},
		{"credentials", harnesscheck.Config{URL: "http://u:p@agent.example"}, false},
		{"query", harnesscheck.Config{URL: "http://agent.example/?a=1"}, false},
		{"negative timeout", harnesscheck.Config{URL: "http://agent.example", RunTimeout: -1}, false},
		{"bad fixture addr", harnesscheck.Config{URL: "http://agent.example", FixtureAddr: "nope"}, false},
		{"bad public url", harnesscheck.Config{URL: "http://agent.example", PublicURL: "ftp://x"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestReportJSON(t *testing.T) {
	t.Parallel()
	rep := harnesscheck.Report{{Name: "capabilities", Result: harnesscheck.Pass, Detail: "agent \"x\""}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"check":"capabilities","result":"PASS","detail":"agent \"x\""}]`; string(b) != want {
		t.Fatalf("JSON = %s, want %s", b, want)
	}
}

func TestInterruptedCheck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	// The run check's run never ends; the caller gives up while polling.
	f, url := newFake(t, func(f *fake) {
		f.pollsToFinish = 1 << 30
		f.onPoll = cancel
	})
	rep, err := harnesscheck.Run(ctx, harnesscheck.Config{URL: url, PollInterval: time.Millisecond})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error = %v, want context.Canceled", err)
	}
	for i, c := range rep {
		want := harnesscheck.Skip
		if i < 3 {
			want = harnesscheck.Pass // capabilities, contract_version, check_input
		}
		if c.Result != want || (want == harnesscheck.Skip && c.Detail != "interrupted") {
			dump(t, rep)
			t.Fatalf("%s = %s %q, want %s", c.Name, c.Result, c.Detail, want)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.runs) != 1 || !f.runs[0].stopped {
		t.Fatalf("the run left running was not stopped: %d runs", len(f.runs))
	}
}

func TestRunsThatCannotBeCreatedSkipTheirDependants(t *testing.T) {
	t.Parallel()
	f, url := newFake(t, func(f *fake) { f.createStatus = http.StatusUnprocessableEntity })
	rep := check(t, url, nil)
	for _, name := range []string{harnesscheck.CheckFixtures, harnesscheck.CheckTrajectory, harnesscheck.CheckStop,
		harnesscheck.CheckListingQuery, harnesscheck.CheckListingSessionID, harnesscheck.CheckWorkspace} {
		if c, _ := rep.Get(name); c.Result != harnesscheck.Skip {
			dump(t, rep)
			t.Fatalf("%s = %s, want SKIP", name, c.Result)
		}
	}
	if c, _ := rep.Get(harnesscheck.CheckRun); c.Result != harnesscheck.Fail || !strings.Contains(c.Detail, "answered 422") {
		t.Fatalf("run = %s %q", c.Result, c.Detail)
	}
	if len(f.runs) != 1 {
		t.Fatalf("%d runs attempted, want 1", len(f.runs))
	}
}
