package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/pflag"

	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/grade"
)

func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gyre.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// evalFlags is a non-serve command's flag set, with --config.
func evalFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("eval", pflag.ContinueOnError)
	fs.String("config", "", "")
	bindFlags(fs, false)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestConfig_GradersCommandAllow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		doc  string
		want grade.CommandAllowList
		err  string // "" = valid
	}{
		{"absolute path for every tenant", "graders:\n  command:\n    allow: [/usr/local/bin/check-refund]\n",
			grade.CommandAllowList{{Path: "/usr/local/bin/check-refund"}}, ""},
		{"per tenant", "graders:\n  command:\n    allow:\n      - path: /opt/score\n        tenants: [acme, globex]\n      - /bin/check\n",
			grade.CommandAllowList{{Path: "/opt/score", Tenants: []string{"acme", "globex"}}, {Path: "/bin/check"}}, ""},
		{"relative path refused", "graders:\n  command:\n    allow: [python3]\n", nil, `"python3" is not an absolute path`},
		{"dot path refused", "graders:\n  command:\n    allow: [./bin/check]\n", nil, "not an absolute path"},
		{"unclean path refused", "graders:\n  command:\n    allow: [/usr/bin/../bin/sh]\n", nil, "not a clean path"},
		{"not a list", "graders:\n  command:\n    allow: /bin/sh\n", nil, "must be a list"},
		{"unknown grader key", "graders:\n  judge: {}\n", nil, `unknown key "judge"`},
		{"unknown command key", "graders:\n  command:\n    deny: []\n", nil, `unknown key "deny"`},
		{"unknown entry key", "graders:\n  command:\n    allow:\n      - path: /bin/sh\n        tenant: [a]\n", nil, `unknown key "tenant"`},
		{"a number", "graders:\n  command:\n    allow: [7]\n", nil, "must be an absolute executable path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := resolver{lookupEnv: func(string) (string, bool) { return "", false }}
			c, _, err := r.resolve(serveFlags(t, "--config", writeConfig(t, tc.doc)), true)
			if err == nil {
				err = c.Validate()
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("config error: %v", err)
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if fmt.Sprint(c.CommandAllow) != fmt.Sprint(tc.want) {
				t.Errorf("CommandAllow = %+v, want %+v", c.CommandAllow, tc.want)
			}
		})
	}
}

const policiesDoc = `upstreams:
  - name: stub
    base_url: %s
    api_key_env: JUDGE_KEY
    allow_private: true
    tenants: [someone-else]
  - name: unused
    base_url: http://10.0.0.9/v1
    api_key_env: UNUSED_KEY
policies:
  - name: judge
    upstream: stub
    model: judge-model
    sampling_overrides: {temperature: 0}
`

func TestConfig_PoliciesAreForTheCLIEvaluatorOnly(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, fmt.Sprintf(policiesDoc, "http://127.0.0.1:1/v1"))
	env := map[string]string{"JUDGE_KEY": "sk-judge"}
	r := resolver{lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}

	// gyre serve refuses the section, saying where its policies live.
	if _, _, err := r.resolve(serveFlags(t, "--config", path), true); err == nil ||
		!strings.Contains(err.Error(), "in gyre serve, policies live in the store") || !strings.Contains(err.Error(), "POST /api/v1/policies") {
		t.Errorf("serve: %v", err)
	}
	// The CLI reads them, and only the keys of the upstreams they use.
	c, _, err := r.resolve(evalFlags(t, "--config", path), false)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	pols, err := c.JudgePolicies()
	if err != nil || len(pols) != 1 || pols["judge"].Model != "judge-model" || string(pols["judge"].SamplingOverrides["temperature"]) != "0" {
		t.Fatalf("JudgePolicies = %+v, %v", pols, err)
	}
	if c.Upstreams[0].APIKey != "sk-judge" {
		t.Errorf("the judge upstream's key was not read")
	}
	// Without policies the upstreams are not read at all.
	plain := writeConfig(t, "upstreams:\n  - name: u\n    base_url: http://x/v1\n    api_key_env: MISSING\n")
	if _, _, err := r.resolve(evalFlags(t, "--config", plain), false); err != nil {
		t.Errorf("non-serve without policies: %v", err)
	}

	for _, tc := range []struct {
		name, doc, want string
	}{
		{"unknown upstream", "policies:\n  - {name: j, upstream: nope, model: m}\n", `policies[0] (j) at line 2: upstream "nope" is not in the config file's upstreams: section`},
		{"no model", "upstreams:\n  - {name: u, base_url: 'http://x/v1'}\npolicies:\n  - {name: j, upstream: u}\n", "model is required"},
		{"bad override", "upstreams:\n  - {name: u, base_url: 'http://x/v1'}\npolicies:\n  - {name: j, upstream: u, model: m, sampling_overrides: {messages: []}}\n", `"messages" cannot be overridden`},
		{"unknown key", "policies:\n  - {name: j, upstream: u, model: m, modle: x}\n", `unknown key "modle"`},
		{"duplicate", "upstreams:\n  - {name: u, base_url: 'http://x/v1'}\npolicies:\n  - {name: j, upstream: u, model: m}\n  - {name: j, upstream: u, model: n}\n", `name "j" is used twice`},
		{"not a list", "policies: {name: j}\n", "policies must be a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := r.resolve(evalFlags(t, "--config", writeConfig(t, tc.doc)), false)
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestServe_RefusesPolicies(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, fmt.Sprintf(policiesDoc, "http://127.0.0.1:1/v1"))
	code, _, stderr := runGyre(t, map[string]string{"JUDGE_KEY": "k"}, "serve", "--config", path, "--data", t.TempDir(), "--addr", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "policies: is a setting of gyre eval run; in gyre serve, policies live in the store") {
		t.Errorf("gyre serve with policies: exit %d, stderr %q", code, stderr)
	}
}

// judgeModel is a fake model for the CLI judge: it answers every chat
// completion with content and records the requests.
type judgeModel struct {
	mu      sync.Mutex
	content string
	models  []string
	auth    []string
}

func (m *judgeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Model string `json:"model"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	m.mu.Lock()
	m.models = append(m.models, body.Model)
	m.auth = append(m.auth, r.Header.Get("Authorization"))
	c := m.content
	m.mu.Unlock()
	out, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": c}}}})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// TestEvalRun_JudgeThroughConfigPolicies: gyre eval run grades a judge
// through a gyre.yaml policy (SPEC §8, CLI mode), records the call in the
// embedded store and links it from the verdict.
func TestEvalRun_JudgeThroughConfigPolicies(t *testing.T) {
	t.Parallel()
	model := &judgeModel{content: `{"score":0.75,"reason":"the agent says ok"}`}
	ms := httptest.NewServer(model)
	t.Cleanup(ms.Close)
	harness := kitHarness(t, harnesskit.Options{}, nil)
	dir := t.TempDir()
	cfg := writeConfig(t, fmt.Sprintf(policiesDoc, ms.URL+"/v1"))
	suitePath := filepath.Join(dir, "suite.yaml")
	suiteDoc := "name: judged\ncases:\n  - id: c1\n    input: {question: \"say ok\"}\n    graders:\n" +
		"      - judge: {rubric: \"Says ok.\", policy: judge}\n      - judge: {rubric: \"Says ok.\", policy: missing}\n"
	if err := os.WriteFile(suitePath, []byte(suiteDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"JUDGE_KEY": "sk-judge-123"}
	data := filepath.Join(dir, "data")
	code, stdout, stderr := runGyre(t, env, "--config", cfg, "--data", data, "eval", "run", suitePath, "--harness", harness, "--json")
	if code != 0 {
		t.Fatalf("eval run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	var sum struct {
		ExperimentID string `json:"experiment_id"`
		Passed       int    `json:"passed"`
	}
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil || sum.Passed != 1 {
		t.Fatalf("summary %s: %v", stdout, err)
	}
	model.mu.Lock()
	models, auth := model.models, model.auth
	model.mu.Unlock()
	if len(models) != 1 || models[0] != "judge-model" || auth[0] != "Bearer sk-judge-123" {
		t.Errorf("the model got models %v with auth %v, want one call for judge-model with the upstream key", models, auth)
	}
	code, stdout, stderr = runGyre(t, env, "--config", cfg, "--data", data, "eval", "show", sum.ExperimentID, "--json")
	if code != 0 {
		t.Fatalf("eval show: exit %d: %s", code, stderr)
	}
	idRE := regexp.MustCompile(`"grading_call_ids": \[\s*"([0-9a-f-]{36})"`)
	m := idRE.FindStringSubmatch(stdout)
	if m == nil || !strings.Contains(stdout, `"judge_unavailable"`) || !strings.Contains(stdout, "the agent says ok") {
		t.Fatalf("eval show lacks the linked judge verdict and the unavailable one:\n%s", stdout)
	}
	// The call is in the embedded store, against the run.
	st, err := openStore(context.Background(), Config{Data: data}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tn, err := st.TenantByName(context.Background(), "default")
	if err != nil {
		t.Fatal(err)
	}
	calls, err := st.GradingCalls(context.Background(), tn.ID, "run", sum.ExperimentID+"/c1/1")
	if err != nil || len(calls) != 1 || calls[0].ID != m[1] || calls[0].Model != "judge-model" || calls[0].Status != 200 {
		t.Errorf("grading calls = %+v, %v; want the linked call %s", calls, err, m[1])
	}
	if strings.Contains(string(calls[0].Request), "sk-judge-123") || strings.Contains(stdout, "sk-judge-123") {
		t.Error("the upstream key was stored or shown")
	}
}
