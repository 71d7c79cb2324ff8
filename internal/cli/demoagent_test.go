package cli

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/demo/scripted"
)

// gyre demo agent runs the example agent's own code: its flags, its
// answer on stdout, its exit code (1 when the model call fails).
func TestDemoAgent_RunsTheExampleAgent(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(scripted.NewHandler())
	t.Cleanup(srv.Close)
	env := map[string]string{"OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "k"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct {
		model string
		code  int
		out   string
	}{
		{scripted.Candidate, ExitOK, "refund id rf_C3_0001"},
		{"no-such-model", ExitError, ""},
	} {
		var stdout, stderr strings.Builder
		code := Run(t.Context(), []string{"demo", "agent", "-model", tc.model, "Please refund order C3, it arrived broken."},
			strings.NewReader(""), &stdout, &stderr, lookup)
		if code != tc.code || !strings.Contains(stdout.String(), tc.out) {
			t.Errorf("model %s: exit %d, stdout %q, stderr %q", tc.model, code, stdout.String(), stderr.String())
		}
	}
}
