package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// scriptHarness is a Harness API v1 server for the eval scripts. Its
// behaviour is chosen by the base path of the harness URL:
//
//	/ok      answers "Refund issued", fetches file_urls fixtures and says
//	         how many bytes it got
//	/mixed   answers "Sorry" when the question mentions "broken"
//	/v2      declares contract_version v2
//	/schema  declares an input_schema that requires order_id
//	/flaky   answers POST /runs with 500 until the file $FLAKY_MARKER exists
type scriptHarness struct {
	marker string
	mu     sync.Mutex
	n      int
	runs   map[string]string // run id -> answer
}

func (h *scriptHarness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mode, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	rest = "/" + rest
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && rest == "/capabilities":
		caps := map[string]string{
			"ok":     `{"agent":"script-bot","revision":"r1","provides":{"trajectory":true,"tool_calls":true},"accepts":{"file_urls":true,"stop":true}}`,
			"mixed":  `{"agent":"script-bot","revision":"r2","provides":{"trajectory":true}}`,
			"v2":     `{"agent":"script-bot","contract_version":"v2"}`,
			"schema": `{"agent":"script-bot","input_schema":{"type":"object","required":["order_id"]}}`,
			"flaky":  `{"agent":"script-bot"}`,
		}[mode]
		if caps == "" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, caps)
	case r.Method == http.MethodPost && rest == "/runs":
		if mode == "flaky" {
			if _, err := os.Stat(h.marker); err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
		}
		var req struct {
			Input map[string]any `json:"input"`
			Files []struct {
				Name string `json:"name"`
				URL  string `json:"url"`
			} `json:"files"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		answer := "Refund issued"
		if q, _ := req.Input["question"].(string); mode == "mixed" && strings.Contains(q, "broken") {
			answer = "Sorry"
		}
		for _, f := range req.Files {
			resp, err := http.Get(f.URL)
			if err != nil {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answer += fmt.Sprintf(" (%s: %d bytes, status %d)", f.Name, len(b), resp.StatusCode)
		}
		h.mu.Lock()
		h.n++
		id := "run-" + strconv.Itoa(h.n)
		h.runs[id] = answer
		h.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run_id":%q}`, id)
	case r.Method == http.MethodGet && strings.HasSuffix(rest, "/trajectory"):
		io.WriteString(w, `{"schema_version":"ATIF-v1.7","session_id":"s","agent":{"name":"script-bot","version":"1"},"steps":[{"step_id":1,"source":"agent","message":"done"}]}`)
	case r.Method == http.MethodGet && strings.HasPrefix(rest, "/runs/"):
		h.mu.Lock()
		answer, ok := h.runs[strings.TrimPrefix(rest, "/runs/")]
		h.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		b, _ := json.Marshal(answer)
		fmt.Fprintf(w, `{"status":"completed","answer":%s,"model":"script-model"}`, b)
	default:
		http.NotFound(w, r)
	}
}

// TestEvalScripts runs the gyre eval scripts in testdata/eval against a
// scripted harness ($HARNESS). They have the commands of TestScripts.
func TestEvalScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/eval",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			h := &scriptHarness{marker: filepath.Join(env.WorkDir, "flaky-fixed"), runs: map[string]string{}}
			srv := httptest.NewServer(h)
			env.Defer(srv.Close)
			env.Setenv("HARNESS", srv.URL)
			env.Setenv("FLAKY_MARKER", h.marker)
			return nil
		},
		Cmds: scriptCmds,
	})
}
