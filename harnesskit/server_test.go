package harnesskit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/clock"
)

func TestCapabilities_FromOptions(t *testing.T) {
	t.Parallel()
	k := newKit(t, answer, harnesskit.Options{
		Agent:             "support-desk",
		Model:             "gpt-test",
		Revision:          "0123abc",
		Branch:            "main",
		InputSchema:       json.RawMessage(`{"type":"object","required":["order_id"],"properties":{"order_id":{"type":"string","pattern":"^[0-9]+$"}}}`),
		CheckInput:        json.RawMessage(`{"order_id":"1042"}`),
		ToolCalls:         true,
		TokenUsage:        true,
		ModelOverride:     true,
		NoFileURLs:        true,
		MaxConcurrentRuns: 3,
		Capabilities: func(c *harnesskit.Capabilities) {
			c.Extra = map[string]json.RawMessage{"vendor": json.RawMessage(`"acme"`)}
		},
	})
	var got map[string]any
	k.getJSON("/capabilities", 200, &got)
	want := map[string]any{
		"contract_version": "v1",
		"agent":            "support-desk",
		"revision":         "0123abc",
		"branch":           "main",
		"input_schema":     map[string]any{"type": "object", "required": []any{"order_id"}, "properties": map[string]any{"order_id": map[string]any{"type": "string", "pattern": "^[0-9]+$"}}},
		"check_input":      map[string]any{"order_id": "1042"},
		"provides": map[string]any{"trajectory": true, "tool_calls": true, "thinking": false, "token_usage": true,
			"artifacts": false, "workspace": true, "run_listing": true},
		"accepts": map[string]any{"files": true, "file_urls": false, "model_override": true, "stop": true},
		"limits":  map[string]any{"max_concurrent_runs": float64(3)},
		"vendor":  "acme",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("capabilities (-want +got):\n%s", diff)
	}
	if c := k.srv.Capabilities(); c.Agent != "support-desk" || !c.Accepts.ModelOverride {
		t.Errorf("Server.Capabilities() = %+v", c)
	}
}

func TestCapabilities_Defaults(t *testing.T) {
	t.Parallel()
	k := newKit(t, answer, harnesskit.Options{})
	var c harnesskit.Capabilities
	k.getJSON("/capabilities", 200, &c)
	if c.Revision != nil || c.Branch != nil || c.InputSchema != nil || c.CheckInput != nil {
		t.Errorf("optional members present: %+v", c)
	}
	if !c.Accepts.Files || !c.Accepts.FileURLs || !c.Accepts.Stop || c.Accepts.ModelOverride {
		t.Errorf("accepts = %+v", c.Accepts)
	}
	if !c.Provides.Trajectory || !c.Provides.Workspace || !c.Provides.RunListing || c.Provides.ToolCalls {
		t.Errorf("provides = %+v", c.Provides)
	}
	if *c.Limits.MaxConcurrentRuns != harnesskit.DefaultMaxConcurrentRuns {
		t.Errorf("limits = %+v", c.Limits)
	}
}

func TestNew_RefusesBadOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts harnesskit.Options
		want string
	}{
		{"no agent", harnesskit.Options{Model: "m"}, "Agent is required"},
		{"no model", harnesskit.Options{Agent: "a"}, "Model is required"},
		{"negative bound", harnesskit.Options{Agent: "a", Model: "m", MaxConcurrentRuns: -1}, "MaxConcurrentRuns"},
		{"schema not an object", harnesskit.Options{Agent: "a", Model: "m", InputSchema: json.RawMessage(`[]`)}, "InputSchema must be a JSON object"},
		{"schema does not compile", harnesskit.Options{Agent: "a", Model: "m", InputSchema: json.RawMessage(`{"type":7}`)}, "does not compile"},
		{"external ref", harnesskit.Options{Agent: "a", Model: "m", InputSchema: json.RawMessage(`{"$ref":"https://example.com/s.json"}`)}, "not allowed"},
		{"unknown $schema", harnesskit.Options{Agent: "a", Model: "m", InputSchema: json.RawMessage(`{"$schema":"https://example.com/meta","type":"object"}`)}, "does not compile"},
		{"check input without question", harnesskit.Options{Agent: "a", Model: "m", CheckInput: json.RawMessage(`{"q":"x"}`)}, "check input does not match"},
		{"check input against schema", harnesskit.Options{Agent: "a", Model: "m",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
			CheckInput:  json.RawMessage(`{"n":"seven"}`)}, "/n"},
		{"tool without name", harnesskit.Options{Agent: "a", Model: "m", ToolDefinitions: []harnesskit.ToolDefinition{{}}}, "Name is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := harnesskit.New(answer, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New() error = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := harnesskit.New(nil, harnesskit.Options{Agent: "a", Model: "m"}); err == nil {
		t.Error("New(nil agent) succeeded")
	}
	// Draft 7 schemas are accepted.
	srv, err := harnesskit.New(answer, harnesskit.Options{Agent: "a", Model: "m",
		InputSchema: json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`),
		CheckInput:  json.RawMessage(`{}`)})
	if err != nil {
		t.Fatalf("draft-07 schema refused: %v", err)
	}
	_ = srv.Close()
}

func TestRun_Completes(t *testing.T) {
	t.Parallel()
	k := newKit(t, answer, harnesskit.Options{})
	id := k.create(`{"input":{"question":"what is 2+2?"},"metadata":{"experiment_id":"e1","case_id":"c1","repetition":1}}`)
	st := k.wait(id)
	if st.Status != harnesskit.StatusCompleted || st.Answer == nil || *st.Answer != "WHAT IS 2+2?" || st.Model != "default-model" || st.Error != nil {
		t.Fatalf("status = %+v", st)
	}
	for _, m := range []string{"created_at", "started_at", "finished_at"} {
		if _, ok := st.Extra[m]; !ok {
			t.Errorf("status has no %s", m)
		}
	}
}

func TestRun_SeesRequest(t *testing.T) {
	t.Parallel()
	type seen struct {
		input    string
		model    string
		metadata *harnesskit.RunMetadata
		files    int
	}
	got := make(chan seen, 1)
	agent := harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		got <- seen{string(run.Input()), run.Model(), run.Metadata(), len(run.Files())}
		return harnesskit.Result{Answer: "ok"}, nil
	})
	k := newKit(t, agent, harnesskit.Options{})
	id := k.create(`{"input":{"question":"q","extra":[1, 2]},"metadata":{"case_id":"c9","repetition":2}}`)
	k.wait(id)
	s := <-got
	if s.input != `{"question":"q","extra":[1, 2]}` {
		t.Errorf("input = %s, want it verbatim", s.input)
	}
	if s.metadata == nil || *s.metadata.CaseID != "c9" || *s.metadata.Repetition != 2 || s.model != "default-model" || s.files != 0 {
		t.Errorf("seen = %+v", s)
	}
}

func TestRun_ModelOverride(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		override bool
		body     string
		want     string
	}{
		{"honoured", true, `{"input":{"question":"q"},"model":"gpt-big"}`, "gpt-big"},
		{"not requested", true, `{"input":{"question":"q"}}`, "default-model"},
		{"null", true, `{"input":{"question":"q"},"model":null}`, "default-model"},
		{"not accepted", false, `{"input":{"question":"q"},"model":"gpt-big"}`, "default-model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan string, 1)
			agent := harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
				seen <- run.Model()
				return harnesskit.Result{Answer: "a"}, nil
			})
			k := newKit(t, agent, harnesskit.Options{ModelOverride: tt.override})
			id := k.create(tt.body)
			st := k.wait(id)
			if m := <-seen; m != tt.want || st.Model != tt.want {
				t.Errorf("agent saw %q, status says %q, want %q", m, st.Model, tt.want)
			}
		})
	}
}

func TestRun_SetModel(t *testing.T) {
	t.Parallel()
	agent := harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		run.SetModel("resolved-model-2026")
		return harnesskit.Result{Answer: "a"}, nil
	})
	k := newKit(t, agent, harnesskit.Options{})
	if st := k.wait(k.create(`{"input":{"question":"q"}}`)); st.Model != "resolved-model-2026" {
		t.Errorf("model = %q", st.Model)
	}
}

func TestPostRuns_RefusesBadRequests(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","required":["order_id"],"properties":{"order_id":{"type":"string","pattern":"^[0-9]+$"},"note":{"type":"string","maxLength":5}}}`)
	k := newKit(t, answer, harnesskit.Options{MaxBodyBytes: 4096})
	ks := newKit(t, answer, harnesskit.Options{InputSchema: schema, NoFileURLs: true})
	const jsonCT = "application/json"
	tests := []struct {
		name        string
		k           *kit
		ct, enc     string
		body        string
		status      int
		code, point string
	}{
		{"not JSON", k, jsonCT, "", `{"input":`, 422, "invalid_body", ""},
		{"empty", k, jsonCT, "", ``, 422, "invalid_body", ""},
		{"not an object", k, jsonCT, "", `[1]`, 422, "invalid_body", ""},
		{"no input", k, jsonCT, "", `{"model":"m"}`, 422, "invalid_body", ""},
		{"input not an object", k, jsonCT, "", `{"input":"what?"}`, 422, "invalid_body", "/input"},
		{"model not a string", k, jsonCT, "", `{"input":{"question":"q"},"model":7}`, 422, "invalid_body", "/model"},
		{"metadata repetition not an integer", k, jsonCT, "", `{"input":{"question":"q"},"metadata":{"repetition":1.5}}`, 422, "invalid_body", "/metadata/repetition"},
		{"file without name", k, jsonCT, "", `{"input":{"question":"q"},"files":[{"url":"https://x.test/a"}]}`, 422, "invalid_body", "/files/0"},
		{"default schema: no question", k, jsonCT, "", `{"input":{"prompt":"q"}}`, 422, "invalid_input", "/input"},
		{"default schema: question not a string", k, jsonCT, "", `{"input":{"question":42}}`, 422, "invalid_input", "/input/question"},
		{"declared schema: missing member", ks, jsonCT, "", `{"input":{"question":"q"}}`, 422, "invalid_input", "/input"},
		{"declared schema: pattern", ks, jsonCT, "", `{"input":{"order_id":"10a"}}`, 422, "invalid_input", "/input/order_id"},
		{"declared schema: maxLength", ks, jsonCT, "", `{"input":{"order_id":"1","note":"too long"}}`, 422, "invalid_input", "/input/note"},
		{"file url without url", k, jsonCT, "", `{"input":{"question":"q"},"files":[{"name":"a.txt"}]}`, 422, "invalid_body", "/files/0/url"},
		{"file url scheme", k, jsonCT, "", `{"input":{"question":"q"},"files":[{"name":"a.txt","url":"file:///etc/passwd"}]}`, 422, "invalid_body", "/files/0/url"},
		{"file name with a slash", k, jsonCT, "", `{"input":{"question":"q"},"files":[{"name":"../a","url":"https://x.test/a"}]}`, 422, "invalid_body", "/files/0/name"},
		{"file named twice", k, jsonCT, "", `{"input":{"question":"q"},"files":[{"name":"a","url":"https://x.test/a"},{"name":"a","url":"https://x.test/b"}]}`, 422, "invalid_body", "/files/1/name"},
		{"file urls not accepted", ks, jsonCT, "", `{"input":{"order_id":"1"},"files":[{"name":"a","url":"https://x.test/a"}]}`, 415, "unsupported_media_type", "/files/0/url"},
		{"other media type", k, "text/plain", "", `{"input":{"question":"q"}}`, 415, "unsupported_media_type", ""},
		{"compressed", k, jsonCT, "gzip", `{"input":{"question":"q"}}`, 415, "unsupported_media_type", ""},
		{"too large", k, jsonCT, "", `{"input":{"question":"` + strings.Repeat("x", 5000) + `"}}`, 413, "body_too_large", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{"Content-Type": {tt.ct}}
			if tt.enc != "" {
				h.Set("Content-Encoding", tt.enc)
			}
			resp, b := tt.k.do("POST", "/runs", strings.NewReader(tt.body), h)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, b, tt.status)
			}
			code, ptr := errorCode(t, b)
			if code != tt.code || ptr != tt.point {
				t.Errorf("error = %s (code %q pointer %q), want code %q pointer %q", b, code, ptr, tt.code, tt.point)
			}
		})
	}
	var list harnesskit.RunList
	k.getJSON("/runs", 200, &list)
	ks.getJSON("/runs", 200, &list)
	if list.Total != 0 {
		t.Errorf("refused requests created runs: %+v", list)
	}
}

func TestRun_Results(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		result harnesskit.Result
		err    error
		panics bool
		want   string // RunStatus as JSON, without the timestamps
	}{
		{"answer", harnesskit.Result{Answer: "4"}, nil, false,
			`{"status":"completed","answer":"4","model":"default-model"}`},
		{"output only", harnesskit.Result{Output: map[string]any{"total": 4}}, nil, false,
			`{"status":"completed","output":{"total":4},"model":"default-model"}`},
		{"answer and output", harnesskit.Result{Answer: "4", Output: json.RawMessage(`{"n":4}`)}, nil, false,
			`{"status":"completed","answer":"4","output":{"n":4},"model":"default-model"}`},
		{"empty answer still answers", harnesskit.Result{}, nil, false,
			`{"status":"completed","answer":"","model":"default-model"}`},
		{"non-fatal error", harnesskit.Result{Answer: "partial", Error: "tool timed out"}, nil, false,
			`{"status":"completed","answer":"partial","model":"default-model","error":"tool timed out"}`},
		{"artifacts", harnesskit.Result{Answer: "a", Artifacts: []harnesskit.ArtifactRef{{Name: "report"}}}, nil, false,
			`{"status":"completed","answer":"a","model":"default-model","artifacts":[{"name":"report"}]}`},
		{"error", harnesskit.Result{Answer: "ignored"}, errors.New("upstream model unavailable"), false,
			`{"status":"failed","model":"default-model","error":"upstream model unavailable"}`},
		{"output not an object", harnesskit.Result{Output: []int{1}}, nil, false,
			`{"status":"failed","model":"default-model","error":"the agent's output is not a JSON object"}`},
		{"panic", harnesskit.Result{}, nil, true,
			`{"status":"failed","model":"default-model","error":"the agent panicked"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			agent := harnesskit.AgentFunc(func(context.Context, *harnesskit.Run) (harnesskit.Result, error) {
				if tt.panics {
					panic("boom")
				}
				return tt.result, tt.err
			})
			k := newKit(t, agent, harnesskit.Options{})
			id := k.create(`{"input":{"question":"q"}}`)
			k.wait(id)
			var got map[string]any
			k.getJSON("/runs/"+id, 200, &got)
			for _, m := range []string{"created_at", "started_at", "finished_at"} {
				delete(got, m)
			}
			var want map[string]any
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	t.Run("running", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		k := newKit(t, g, harnesskit.Options{})
		id := k.create(`{"input":{"question":"q"}}`)
		<-g.started
		var st harnesskit.RunStatus
		k.getJSON("/runs/"+id, 200, &st)
		if st.Status != harnesskit.StatusRunning {
			t.Fatalf("status = %s, want running", st.Status)
		}
		resp, b := k.post("/runs/"+id+"/stop", "")
		if resp.StatusCode != 200 {
			t.Fatalf("stop = %d %s", resp.StatusCode, b)
		}
		st = k.wait(id)
		if st.Status != harnesskit.StatusCancelled || st.Answer != nil || st.Error == nil {
			t.Errorf("after stop: %+v", st)
		}
		// Stopping again is harmless.
		resp, b = k.post("/runs/"+id+"/stop", "")
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"cancelled"`) {
			t.Errorf("second stop = %d %s", resp.StatusCode, b)
		}
		// The trajectory is served after a stop.
		k.getJSON("/runs/"+id+"/trajectory", 200, nil)
	})
	t.Run("queued", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		k := newKit(t, g, harnesskit.Options{MaxConcurrentRuns: 1})
		first := k.create(`{"input":{"question":"first"}}`)
		<-g.started
		second := k.create(`{"input":{"question":"second"}}`)
		resp, b := k.post("/runs/"+second+"/stop", "")
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"status":"cancelled"`) {
			t.Fatalf("stop queued = %d %s, want cancelled at once", resp.StatusCode, b)
		}
		close(g.release)
		if st := k.wait(first); st.Status != harnesskit.StatusCompleted {
			t.Errorf("first = %+v", st)
		}
		if st := k.wait(second); st.Status != harnesskit.StatusCancelled {
			t.Errorf("second = %+v", st)
		}
		if _, calls := g.stats(); calls != 1 {
			t.Errorf("agent ran %d times; the stopped queued run must not run", calls)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		t.Parallel()
		k := newKit(t, answer, harnesskit.Options{})
		id := k.create(`{"input":{"question":"q"}}`)
		k.wait(id)
		resp, b := k.post("/runs/"+id+"/stop", "")
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"status":"completed"`) {
			t.Errorf("stop after completion = %d %s", resp.StatusCode, b)
		}
	})
	t.Run("agent ignores the error", func(t *testing.T) {
		t.Parallel()
		started := make(chan struct{})
		agent := harnesskit.AgentFunc(func(ctx context.Context, _ *harnesskit.Run) (harnesskit.Result, error) {
			close(started)
			<-ctx.Done()
			return harnesskit.Result{Answer: "finished anyway"}, nil
		})
		k := newKit(t, agent, harnesskit.Options{})
		id := k.create(`{"input":{"question":"q"}}`)
		<-started
		k.post("/runs/"+id+"/stop", "")
		if st := k.wait(id); st.Status != harnesskit.StatusCancelled || st.Answer != nil {
			t.Errorf("status = %+v, want cancelled without an answer", st)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		t.Parallel()
		k := newKit(t, answer, harnesskit.Options{})
		resp, b := k.post("/runs/0190-nope/stop", "")
		if resp.StatusCode != 404 {
			t.Errorf("stop unknown = %d %s", resp.StatusCode, b)
		}
	})
}

func TestPool_NeverExceedsBound(t *testing.T) {
	t.Parallel()
	g := newGate()
	const bound, runs = 2, 7
	k := newKit(t, g, harnesskit.Options{MaxConcurrentRuns: bound})
	var ids []string
	for i := range runs {
		ids = append(ids, k.create(fmt.Sprintf(`{"input":{"question":"run %d"}}`, i)))
	}
	running := map[string]bool{}
	for range bound {
		running[<-g.started] = true
	}
	// With the pool full, every other run is queued.
	counts := map[harnesskit.Status]int{}
	for _, id := range ids {
		var st harnesskit.RunStatus
		k.getJSON("/runs/"+id, 200, &st)
		counts[st.Status]++
		if running[id] != (st.Status == harnesskit.StatusRunning) {
			t.Errorf("run %s is %s; started: %v", id, st.Status, running[id])
		}
	}
	if counts[harnesskit.StatusRunning] != bound || counts[harnesskit.StatusQueued] != runs-bound {
		t.Errorf("statuses = %v, want %d running and %d queued", counts, bound, runs-bound)
	}
	close(g.release)
	for _, id := range ids {
		if st := k.wait(id); st.Status != harnesskit.StatusCompleted {
			t.Errorf("run %s = %+v", id, st)
		}
	}
	if maxRunning, calls := g.stats(); maxRunning > bound || calls != runs {
		t.Errorf("at most %d ran at once over %d calls; bound %d, runs %d", maxRunning, calls, bound, runs)
	}
}

func TestPool_QueueFull(t *testing.T) {
	t.Parallel()
	g := newGate()
	k := newKit(t, g, harnesskit.Options{MaxConcurrentRuns: 1, MaxQueuedRuns: 1})
	first := k.create(`{"input":{"question":"1"}}`)
	<-g.started
	second := k.create(`{"input":{"question":"2"}}`)
	resp, b := k.post("/runs", `{"input":{"question":"3"}}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third run = %d (Retry-After %q) %s, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if code, _ := errorCode(t, b); code != "unavailable" {
		t.Errorf("code = %q", code)
	}
	close(g.release)
	k.wait(first)
	k.wait(second)
	// Room again.
	k.wait(k.create(`{"input":{"question":"4"}}`))
}

func TestAuth(t *testing.T) {
	t.Parallel()
	k := newKit(t, answer, harnesskit.Options{APIKey: "s3cret-key"})
	id := k.create(`{"input":{"question":"q"}}`)
	k.wait(id)
	paths := []struct{ method, path string }{
		{"GET", "/capabilities"}, {"POST", "/runs"}, {"GET", "/runs"}, {"GET", "/runs/" + id},
		{"POST", "/runs/" + id + "/stop"}, {"GET", "/runs/" + id + "/trajectory"},
		{"GET", "/runs/" + id + "/files"}, {"GET", "/runs/" + id + "/files/a.txt"}, {"GET", "/nowhere"},
	}
	for _, key := range []string{"", "wrong", "s3cret-key-and-more", "S3CRET-KEY"} {
		for _, p := range paths {
			h := http.Header{}
			if key != "" {
				h.Set("x-api-key", key)
			}
			kk := *k
			kk.key = ""
			resp, b := kk.do(p.method, p.path, strings.NewReader(`{"input":{"question":"q"}}`), h)
			if resp.StatusCode != 401 {
				t.Errorf("%s %s with key %q = %d, want 401", p.method, p.path, key, resp.StatusCode)
				continue
			}
			if code, _ := errorCode(t, b); code != "unauthorized" {
				t.Errorf("code %q", code)
			}
		}
	}
	k.getJSON("/capabilities", 200, nil)
}

func TestRouting_Errors(t *testing.T) {
	t.Parallel()
	k := newKit(t, answer, harnesskit.Options{})
	id := k.create(`{"input":{"question":"q"}}`)
	k.wait(id)
	tests := []struct {
		method, path string
		status       int
		code         string
	}{
		{"DELETE", "/runs/" + id, 405, "method_not_allowed"},
		{"PUT", "/runs", 405, "method_not_allowed"},
		{"POST", "/capabilities", 405, "method_not_allowed"},
		{"GET", "/runs/" + id + "/stop", 405, "method_not_allowed"},
		{"GET", "/nowhere", 404, "not_found"},
		{"GET", "/runs/" + id + "/unknown", 404, "not_found"},
		{"GET", "/runs/0197a1b2-0000-7000-8000-000000000000", 404, "not_found"},
		{"GET", "/runs/0197a1b2-0000-7000-8000-000000000000/trajectory", 404, "not_found"},
		{"GET", "/runs/0197a1b2-0000-7000-8000-000000000000/files", 404, "not_found"},
		{"GET", "/runs//files", 400, "invalid_path_param"},
		{"GET", "/runs/" + id + "/../capabilities", 400, "invalid_path_param"},
		{"GET", "/runs/./" + id, 400, "invalid_path_param"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			resp, b := k.do(tt.method, tt.path, nil, nil)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, b, tt.status)
			}
			if code, _ := errorCode(t, b); code != tt.code {
				t.Errorf("code %q, want %q", code, tt.code)
			}
			if tt.status == 405 && resp.Header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	t.Run("count", func(t *testing.T) {
		t.Parallel()
		k := newKit(t, answer, harnesskit.Options{RetainRuns: 2})
		var ids []string
		for i := range 4 {
			id := k.create(fmt.Sprintf(`{"input":{"question":"q%d"}}`, i))
			k.wait(id)
			ids = append(ids, id)
		}
		var list harnesskit.RunList
		k.getJSON("/runs", 200, &list)
		if list.Total != 2 || list.Runs[0].RunID != ids[3] || list.Runs[1].RunID != ids[2] {
			t.Errorf("listing after retention = %+v", list)
		}
		k.getJSON("/runs/"+ids[0], 404, nil)
		k.getJSON("/runs/"+ids[1]+"/trajectory", 404, nil)
		k.getJSON("/runs/"+ids[3]+"/trajectory", 200, nil)
	})
	t.Run("age", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		dir := t.TempDir()
		writer := harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
			return harnesskit.Result{Answer: "a"}, run.WriteFile("out.txt", []byte("x"))
		})
		k := newKit(t, writer, harnesskit.Options{RetainFor: time.Hour, Now: clk.Now, WorkspaceDir: dir})
		old := k.create(`{"input":{"question":"old"}}`)
		k.wait(old)
		clk.Advance(30 * time.Minute)
		young := k.create(`{"input":{"question":"young"}}`)
		k.wait(young)
		if entries, _ := os.ReadDir(dir); len(entries) != 2 {
			t.Fatalf("%d workspaces, want 2", len(entries))
		}
		clk.Advance(31 * time.Minute)
		k.getJSON("/runs/"+old, 404, nil)
		k.getJSON("/runs/"+young, 200, nil)
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("%d workspaces after the old run was dropped, want 1", len(entries))
		}
	})
	t.Run("active runs are kept", func(t *testing.T) {
		t.Parallel()
		g := newGate()
		k := newKit(t, g, harnesskit.Options{RetainRuns: 1, MaxConcurrentRuns: 3})
		for range 3 {
			k.create(`{"input":{"question":"q"}}`)
		}
		for range 3 {
			<-g.started
		}
		var list harnesskit.RunList
		k.getJSON("/runs", 200, &list)
		if list.Total != 3 {
			t.Errorf("running runs dropped: %+v", list)
		}
		close(g.release)
	})
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	g := newGate()
	k := newKit(t, g, harnesskit.Options{MaxConcurrentRuns: 1})
	running := k.create(`{"input":{"question":"1"}}`)
	<-g.started
	queued := k.create(`{"input":{"question":"2"}}`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: cancel everything at once
	if err := k.srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown = %v", err)
	}
	resp, b := k.post("/runs", `{"input":{"question":"3"}}`)
	if resp.StatusCode != 503 {
		t.Errorf("POST after shutdown = %d %s", resp.StatusCode, b)
	}
	for _, id := range []string{running, queued} {
		if st := k.wait(id); st.Status != harnesskit.StatusCancelled {
			t.Errorf("run %s = %+v, want cancelled", id, st)
		}
	}
	if err := k.srv.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown = %v", err)
	}
}

func TestWait_UnknownRun(t *testing.T) {
	t.Parallel()
	k := newKit(t, answer, harnesskit.Options{})
	if _, err := k.srv.Wait(context.Background(), "nope"); !errors.Is(err, harnesskit.ErrUnknownRun) {
		t.Errorf("Wait = %v", err)
	}
	if _, ok := k.srv.Status("nope"); ok {
		t.Error("Status(nope) found a run")
	}
}
