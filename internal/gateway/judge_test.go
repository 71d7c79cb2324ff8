package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

const judgeKey = "judge-upstream-secret-0123456789"

// judgeUpstream is a fake model server: it stands in for the model and
// answers each request with the next scripted answer (the last one
// repeats), recording what it was sent.
type judgeUpstream struct {
	ts      *httptest.Server
	mu      sync.Mutex
	answers []func(w http.ResponseWriter)
	bodies  []map[string]any
	auth    []string
}

// content answers a chat completion whose message content is s.
func content(s string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		b, _ := json.Marshal(map[string]any{
			"id": "c1", "object": "chat.completion",
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": s}, "finish_reason": "stop"}},
			"usage":   map[string]any{"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49},
		})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}
}

func status(code int, body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func newJudgeUpstream(t *testing.T, answers ...func(w http.ResponseWriter)) *judgeUpstream {
	t.Helper()
	u := &judgeUpstream{answers: answers}
	u.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		u.mu.Lock()
		u.bodies = append(u.bodies, body)
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		a := u.answers[0]
		if len(u.answers) > 1 {
			u.answers = u.answers[1:]
		}
		u.mu.Unlock()
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		a(w)
	}))
	t.Cleanup(u.ts.Close)
	return u
}

func (u *judgeUpstream) calls() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.bodies)
}

// judgeFixture is a Judge over one upstream, with tenant policies held in
// memory and calls recorded into a slice.
type judgeFixture struct {
	judge    *gateway.Judge
	mu       sync.Mutex
	recorded []store.GradingCall
}

func (f *judgeFixture) records() []store.GradingCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.recorded)
}

var judgeSubject = grade.Subject{TenantID: "t-acme", TenantName: "acme", Kind: grade.SubjectRollout, ID: "r-1"}

func newJudgeFixture(t *testing.T, baseURL string, cfg gateway.JudgeConfig, tenants []string) *judgeFixture {
	t.Helper()
	temp := json.RawMessage(`0`)
	policies := map[string]gateway.Policy{
		"t-acme/judge": {Name: "judge", Upstream: "stub", Model: "judge-model", SamplingOverrides: map[string]json.RawMessage{"temperature": temp}},
		"t-acme/base":  {Name: "base", Upstream: "stub", Model: "base-model"},
		"t-acme/gone":  {Name: "gone", Upstream: "removed", Model: "m"},
		"t-acme/resp":  {Name: "resp", Upstream: "resp-only", Model: "m"},
	}
	cfg.Upstreams = append(cfg.Upstreams, gateway.Upstream{Name: "stub", BaseURL: baseURL + "/v1", APIKey: judgeKey, AllowPrivate: true, Tenants: tenants})
	f := &judgeFixture{}
	j, err := gateway.NewJudge(cfg, gateway.JudgeDeps{
		Policy: func(_ context.Context, tenantID, name string) (gateway.Policy, bool, error) {
			p, ok := policies[tenantID+"/"+name]
			return p, ok, nil
		},
		Record: func(_ context.Context, c store.GradingCall) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.recorded = append(f.recorded, c)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.judge = j
	return f
}

func ask(f *judgeFixture, policy string) (grade.JudgeAnswer, error) {
	return f.judge.Complete(context.Background(), grade.JudgeRequest{
		Subject: judgeSubject, Policy: policy, Attempt: 1,
		Messages: []grade.Message{{Role: "system", Content: "grade"}, {Role: "user", Content: "material"}},
	})
}

func TestJudge_CallsThePolicyUpstreamWithItsModelAndOverrides(t *testing.T) {
	t.Parallel()
	up := newJudgeUpstream(t, content(`{"score":0.9,"reason":"fine"}`))
	f := newJudgeFixture(t, up.ts.URL, gateway.JudgeConfig{}, nil)
	ans, err := ask(f, "judge")
	if err != nil || ans.Text != `{"score":0.9,"reason":"fine"}` {
		t.Fatalf("Complete = %+v, %v", ans, err)
	}
	body := up.bodies[0]
	if body["model"] != "judge-model" || body["temperature"] != float64(0) || body["stream"] != nil {
		t.Errorf("upstream got model %v temperature %v stream %v, want the policy's model and override, no stream", body["model"], body["temperature"], body["stream"])
	}
	if msgs, _ := body["messages"].([]any); len(msgs) != 2 {
		t.Errorf("upstream got messages %v", body["messages"])
	}
	if up.auth[0] != "Bearer "+judgeKey {
		t.Errorf("upstream Authorization = %q, want the upstream's key", up.auth[0])
	}
	recs := f.records()
	if len(recs) != 1 || recs[0].ID != ans.CallID || ans.CallID == "" {
		t.Fatalf("recorded %+v, answer call id %q", recs, ans.CallID)
	}
	c := recs[0]
	if c.TenantID != "t-acme" || c.SubjectKind != "rollout" || c.SubjectID != "r-1" || c.Attempt != 1 || c.Policy != "judge" ||
		c.Upstream != "stub" || c.Model != "judge-model" || c.Status != 200 || c.Error != nil ||
		!strings.Contains(string(c.Usage), `"total_tokens":49`) || !strings.Contains(string(c.Response), "fine") ||
		!strings.Contains(string(c.Request), `"model":"judge-model"`) || c.DoneAt.Before(c.StartedAt) {
		t.Errorf("recorded call = %+v", c)
	}
}

func TestJudge_PolicyResolution(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, policy, defaultPolicy string
		tenants                     []string
		wantModel                   string // "" = ErrJudgeUnavailable, no upstream call
	}{
		{"the named policy", "judge", "base", nil, "judge-model"},
		{"the default when none is named", "", "base", nil, "base-model"},
		{"no policy and no default", "", "", nil, ""},
		{"a named policy the tenant lacks", "missing", "base", nil, ""},
		{"a default the tenant lacks", "", "missing", nil, ""},
		{"an upstream the server no longer has", "gone", "", nil, ""},
		{"an upstream not offered to the tenant", "judge", "", []string{"globex"}, ""},
		{"an upstream offered to the tenant", "judge", "", []string{"acme"}, "judge-model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newJudgeUpstream(t, content(`{"score":1}`))
			f := newJudgeFixture(t, up.ts.URL, gateway.JudgeConfig{DefaultPolicy: tc.defaultPolicy}, tc.tenants)
			ans, err := ask(f, tc.policy)
			if tc.wantModel == "" {
				if !errors.Is(err, grade.ErrJudgeUnavailable) || up.calls() != 0 || len(f.records()) != 0 || ans.CallID != "" {
					t.Errorf("got %v after %d upstream calls, %d records; want ErrJudgeUnavailable and nothing sent", err, up.calls(), len(f.records()))
				}
				return
			}
			if err != nil || up.calls() != 1 || up.bodies[0]["model"] != tc.wantModel {
				t.Errorf("got %v, %d calls; want model %s", err, up.calls(), tc.wantModel)
			}
		})
	}
}

// TestJudge_UpstreamMustSpeakChat: the judge speaks Chat Completions, so
// a policy whose upstream does not is unavailable to it, and nothing is
// sent in a protocol the upstream does not speak.
func TestJudge_UpstreamMustSpeakChat(t *testing.T) {
	t.Parallel()
	up := newJudgeUpstream(t, content(`{"score":1}`))
	f := newJudgeFixture(t, up.ts.URL, gateway.JudgeConfig{Upstreams: []gateway.Upstream{{Name: "resp-only", BaseURL: up.ts.URL + "/v1",
		AllowPrivate: true, Protocols: []gateway.Protocol{gateway.ProtocolResponses}}}}, nil)
	ans, err := ask(f, "resp")
	if !errors.Is(err, grade.ErrJudgeUnavailable) || !strings.Contains(err.Error(), "speaks responses, not chat") || up.calls() != 0 ||
		ans.CallID != "" {
		t.Errorf("got %v after %d upstream calls; want ErrJudgeUnavailable and nothing sent", err, up.calls())
	}
}

func TestJudge_FailedCallsAreErrorsAndRecorded(t *testing.T) {
	t.Parallel()
	var redirected atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { redirected.Add(1) }))
	t.Cleanup(target.Close)
	// Cleanups run after the parallel subtests.
	t.Cleanup(func() {
		if n := redirected.Load(); n != 0 {
			t.Errorf("the redirect target was called %d times", n)
		}
	})
	// Nothing listens on port 1 (binding it needs privileges), unlike a
	// closed test server's port, which another test may take.
	closedURL := "http://127.0.0.1:1"
	for _, tc := range []struct {
		name       string
		answer     func(w http.ResponseWriter)
		url        string
		cfg        gateway.JudgeConfig
		wantStatus int
		wantErr    string
	}{
		{"server error", status(500, `{"error":{"message":"overloaded"}}`), "", gateway.JudgeConfig{}, 500, "answered status 500"},
		{"transport error", nil, closedURL, gateway.JudgeConfig{}, 0, "could not be reached"},
		{"redirect not followed", func(w http.ResponseWriter) {
			w.Header().Set("Location", target.URL+"/v1/chat/completions")
			w.WriteHeader(http.StatusTemporaryRedirect)
		}, "", gateway.JudgeConfig{}, 307, "redirect"},
		{"not a chat completion", status(200, `<html>hi</html>`), "", gateway.JudgeConfig{}, 200, "other than a chat completion"},
		{"no content", status(200, `{"choices":[]}`), "", gateway.JudgeConfig{}, 200, "without message content"},
		{"answer over the cap", content(strings.Repeat("x", 4096)), "", gateway.JudgeConfig{MaxAnswerBytes: 1024}, 200, "more than 1024 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := tc.url
			if url == "" {
				url = newJudgeUpstream(t, tc.answer).ts.URL
			}
			f := newJudgeFixture(t, url, tc.cfg, nil)
			ans, err := ask(f, "judge")
			if err == nil || errors.Is(err, grade.ErrJudgeUnavailable) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want a call error containing %q", err, tc.wantErr)
			}
			recs := f.records()
			if len(recs) != 1 || recs[0].ID != ans.CallID || recs[0].Status != tc.wantStatus || recs[0].Error == nil ||
				!strings.Contains(*recs[0].Error, tc.wantErr) {
				t.Errorf("recorded %+v (answer id %q), want one call with status %d and the error", recs, ans.CallID, tc.wantStatus)
			}
			if int64(len(recs[0].Response)) > max(tc.cfg.MaxAnswerBytes, 0)+gateway.DefaultJudgeMaxAnswerBytes {
				t.Errorf("stored response of %d bytes", len(recs[0].Response))
			}
		})
	}
}

func TestJudge_UpstreamKeyEchoedIsNeverStored(t *testing.T) {
	t.Parallel()
	up := newJudgeUpstream(t, status(401, `{"error":{"message":"bad key Bearer `+judgeKey+`"}}`))
	f := newJudgeFixture(t, up.ts.URL, gateway.JudgeConfig{}, nil)
	_, err := ask(f, "judge")
	recs := f.records()
	if err == nil || len(recs) != 1 || strings.Contains(string(recs[0].Response), judgeKey) || strings.Contains(err.Error(), judgeKey) {
		t.Errorf("err %v, stored response %q: the upstream key must not be kept", err, recs[0].Response)
	}
}

// TestJudgeGrader_ThroughTheUpstream runs the judge grader of SPEC §8
// against the fake model: retries of malformed answers, abstentions on
// errors, and every call linked from the verdict.
func TestJudgeGrader_ThroughTheUpstream(t *testing.T) {
	t.Parallel()
	good, bad := content(`{"score":0.8,"reason":"confirms the refund"}`), content("I would say it passes.")
	// Nothing listens on port 1 (binding it needs privileges), unlike a
	// closed test server's port, which another test may take.
	closedURL := "http://127.0.0.1:1"
	for _, tc := range []struct {
		name      string
		answers   []func(w http.ResponseWriter)
		url       string
		want      string
		wantCalls int
	}{
		{"answers well", []func(http.ResponseWriter){good}, "", "pass", 1},
		{"malformed twice then well", []func(http.ResponseWriter){bad, bad, good}, "", "pass", 3},
		{"malformed three times", []func(http.ResponseWriter){bad}, "", "abstain:judge_error", 3},
		{"server error", []func(http.ResponseWriter){status(503, "down")}, "", "abstain:judge_error", 1},
		{"transport error", nil, closedURL, "abstain:judge_error", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := tc.url
			if url == "" {
				url = newJudgeUpstream(t, tc.answers...).ts.URL
			}
			f := newJudgeFixture(t, url, gateway.JudgeConfig{}, nil)
			v := gradeJudge(t, grade.Env{Judge: f.judge, Subject: judgeSubject}, "judge")
			recs := f.records()
			ids := make([]string, len(recs))
			for i, r := range recs {
				ids[i] = r.ID
				if r.Attempt != i+1 {
					t.Errorf("call %d recorded as attempt %d", i+1, r.Attempt)
				}
			}
			if got := verdictOutcome(v); got != tc.want || len(recs) != tc.wantCalls || !slices.Equal(v.GradingCallIDs, ids) {
				t.Errorf("got %s after %d recorded calls linking %v, want %s after %d linking %v", got, len(recs), v.GradingCallIDs, tc.want, tc.wantCalls, ids)
			}
		})
	}
	t.Run("no policy and no default", func(t *testing.T) {
		t.Parallel()
		up := newJudgeUpstream(t, good)
		f := newJudgeFixture(t, up.ts.URL, gateway.JudgeConfig{}, nil)
		v := gradeJudge(t, grade.Env{Judge: f.judge, Subject: judgeSubject}, "")
		if got := verdictOutcome(v); got != "abstain:judge_unavailable" || up.calls() != 0 || len(v.GradingCallIDs) != 0 {
			t.Errorf("got %s after %d calls", got, up.calls())
		}
	})
}

func gradeJudge(t *testing.T, env grade.Env, policy string) grade.Verdict {
	t.Helper()
	decl := fmt.Sprintf(`[{"judge":{"rubric":"Confirms the refund.","policy":%q}}]`, policy)
	if policy == "" {
		decl = `[{"judge":"Confirms the refund."}]`
	}
	specs, err := grade.ParseSpecs([]byte(decl))
	if err != nil {
		t.Fatal(err)
	}
	s, err := grade.Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	text := "Refunded 20 EUR."
	set, err := s.Grade(context.Background(), &grade.Item{Schema: grade.ItemSchema, Kind: grade.KindRollout, FinalText: &text}, env)
	if err != nil {
		t.Fatal(err)
	}
	return set.Verdicts[0]
}

func verdictOutcome(v grade.Verdict) string {
	switch {
	case v.Pass == nil:
		return "abstain:" + v.Reason
	case *v.Pass:
		return "pass"
	}
	return "fail"
}
