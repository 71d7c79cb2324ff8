package cli

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEvalRegrade_Server records an experiment into a running gyre serve
// and regrades it there (gyre eval regrade --server): the server grades
// the stored runs again and keeps the new summary.
func TestEvalRegrade_Server(t *testing.T) {
	t.Parallel()
	bin := buildGyre(t)
	dir := t.TempDir()
	s := startServe(t, bin, "--data", filepath.Join(dir, "data"))
	raw, err := os.ReadFile(filepath.Join(dir, "data", "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(raw))
	h := httptest.NewServer(&scriptHarness{runs: map[string]string{}})
	defer h.Close()
	for name, content := range map[string]string{
		"suite.yaml": `name: mixed
cases:
  - id: fine
    input: {question: "Refund order 1"}
    graders: [{contains: "Refund"}]
  - id: broken
    input: {question: "Refund the broken order"}
    graders: [{contains: "Refund"}]
`,
		"lenient.yaml": "- not_contains: chargeback\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	gyre := func(wantCode int, args ...string) map[string]any {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = cleanEnv()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != wantCode {
			t.Fatalf("gyre %v exited %d, want %d\nstdout %s\nstderr %s", args, code, wantCode, out, stderr.String())
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("gyre %v printed no JSON object: %s", args, out)
		}
		return m
	}
	run := gyre(100, "eval", "run", filepath.Join(dir, "suite.yaml"), "--harness", h.URL+"/mixed", "--server", s.base, "--key", key, "--json")
	id, _ := run["experiment_id"].(string)
	if id == "" || run["passed"] != float64(1) {
		t.Fatalf("eval run = %v", run)
	}

	re := gyre(0, "eval", "regrade", id, "--graders", filepath.Join(dir, "lenient.yaml"), "--server", s.base, "--key", key, "--json")
	if re["experiment_id"] != id || re["passed"] != float64(2) || re["regraded"] != float64(2) || re["pass_rate"] != float64(1) {
		t.Fatalf("regrade with lenient graders on the server = %v, want both passing", re)
	}
	code, body := get(t, s.base+"/api/v1/experiments/"+id, key)
	if code != 200 || !strings.Contains(body, `"passed":2`) {
		t.Fatalf("the server's stored summary after the regrade: %d %s", code, body)
	}
	// The runs' own graders, as recorded through the server.
	re = gyre(0, "eval", "regrade", id, "--server", s.base, "--key", key, "--json")
	if re["passed"] != float64(1) || re["failed"] != float64(1) || re["exit_code"] != float64(100) {
		t.Fatalf("regrade with the runs' graders = %v, want one failure again", re)
	}
	s.stop(t)
}
