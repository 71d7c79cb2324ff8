package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/harnesskit"
)

// kitHarness serves a harnesskit server whose agent answers at once,
// through wrap (nil: as is), and returns its URL.
func kitHarness(t *testing.T, opts harnesskit.Options, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	opts.Agent, opts.Model, opts.WorkspaceDir = "cli-test", "test-model", t.TempDir()
	agent := harnesskit.AgentFunc(func(ctx context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		if err := run.AddUserMessage(run.Question()); err != nil {
			return harnesskit.Result{}, err
		}
		if _, err := run.AddAgentStep(harnesskit.AgentStep{Message: "ok"}); err != nil {
			return harnesskit.Result{}, err
		}
		return harnesskit.Result{Answer: "ok"}, run.WriteFile("out.txt", []byte("ok"))
	})
	srv, err := harnesskit.New(agent, opts)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.Close()
		_ = srv.Close()
	})
	return hs.URL
}

// runGyre runs the CLI with args and env and returns its exit code and
// output.
func runGyre(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(t.Context(), args, strings.NewReader(""), &stdout, &stderr, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	return code, stdout.String(), stderr.String()
}

func TestHarnessCheckCommand(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","required":["question"],"properties":{"question":{"type":"string"}}}`)
	tests := []struct {
		name string
		opts harnesskit.Options
		wrap func(http.Handler) http.Handler
		code int
		want []string
	}{
		{
			name: "conforming harness",
			opts: harnesskit.Options{InputSchema: schema, CheckInput: json.RawMessage(`{"question":"Hello there"}`), APIKey: "k1"},
			code: ExitOK,
			want: []string{"PASS capabilities: ", "PASS run: ", "PASS trajectory: ", "PASS listing.query: ", "PASS workspace: "},
		},
		{
			name: "listing ignores query",
			opts: harnesskit.Options{InputSchema: schema, CheckInput: json.RawMessage(`{"question":"Hello there"}`), APIKey: "k1"},
			wrap: func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Method == http.MethodGet && r.URL.Path == "/runs" {
						q := r.URL.Query()
						q.Del("query")
						r.URL.RawQuery = q.Encode()
					}
					h.ServeHTTP(w, r)
				})
			},
			code: ExitError,
			want: []string{"FAIL listing.query: ", "PASS listing.pagination: "},
		},
		{
			name: "check_input violates its own input_schema",
			opts: harnesskit.Options{InputSchema: schema, CheckInput: json.RawMessage(`{"question":"Hello there"}`), APIKey: "k1"},
			wrap: func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/capabilities" {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, r)
						var caps map[string]any
						if err := json.Unmarshal(rec.Body.Bytes(), &caps); err != nil {
							t.Error(err)
						}
						caps["check_input"] = map[string]any{"question": 42}
						w.Header().Set("Content-Type", "application/json")
						_ = json.NewEncoder(w).Encode(caps)
						return
					}
					h.ServeHTTP(w, r)
				})
			},
			code: ExitError,
			want: []string{"FAIL check_input: check_input does not pass the declared input_schema: at /question", "SKIP run: "},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := kitHarness(t, tc.opts, tc.wrap)
			code, stdout, stderr := runGyre(t, map[string]string{"GYRE_HARNESS_KEY": "k1"}, "harness", "check", url, "--timeout", "30s")
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			if len(lines) != 12 {
				t.Fatalf("%d lines, want 12:\n%s", len(lines), stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, "\n"+w) && !strings.HasPrefix(stdout, w) {
					t.Errorf("stdout lacks a line starting %q:\n%s", w, stdout)
				}
			}
			if strings.Contains(stdout+stderr, "k1\n") || strings.Contains(stdout+stderr, `"k1"`) {
				t.Error("the api key shows in the output")
			}
		})
	}
}

func TestHarnessCheckJSON(t *testing.T) {
	t.Parallel()
	url := kitHarness(t, harnesskit.Options{}, nil)
	code, stdout, stderr := runGyre(t, nil, "harness", "check", "--json", url)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var checks []struct {
		Check, Result, Detail string
	}
	if err := json.Unmarshal([]byte(stdout), &checks); err != nil {
		t.Fatalf("stdout is not a JSON list: %v\n%s", err, stdout)
	}
	if len(checks) != 12 || checks[0].Check != "capabilities" || checks[11].Check != "workspace" {
		t.Fatalf("checks = %+v", checks)
	}
	for _, c := range checks {
		if c.Result == "" || c.Detail == "" {
			t.Errorf("check %+v lacks a result or detail", c)
		}
	}
}
