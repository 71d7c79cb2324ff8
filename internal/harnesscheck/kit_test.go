package harnesscheck_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/harnesscheck"
)

// kitAgent answers the question, records a short trajectory and writes a
// workspace file; it waits for a stop when the run has a "wait" input.
func kitAgent(ctx context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
	if err := run.AddUserMessage(run.Question()); err != nil {
		return harnesskit.Result{}, err
	}
	if _, err := run.AddAgentStep(harnesskit.AgentStep{Message: "ok"}); err != nil {
		return harnesskit.Result{}, err
	}
	if err := run.WriteFile("notes/answer.txt", []byte("ok\n")); err != nil {
		return harnesskit.Result{}, err
	}
	for _, f := range run.Files() {
		if err := run.WriteFile("in/"+f.Name, f.Data); err != nil {
			return harnesskit.Result{}, err
		}
	}
	return harnesskit.Result{Answer: strings.ToUpper(run.Question())}, nil
}

// newKitHarness serves a harnesskit Server around kitAgent.
func newKitHarness(t *testing.T, opts harnesskit.Options) string {
	t.Helper()
	if opts.Agent == "" {
		opts.Agent = "kit"
	}
	if opts.Model == "" {
		opts.Model = "test-model"
	}
	opts.WorkspaceDir = t.TempDir()
	srv, err := harnesskit.New(harnesskit.AgentFunc(kitAgent), opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		_ = srv.Close()
	})
	return hs.URL
}

func TestKitHarnessPasses(t *testing.T) {
	t.Parallel()
	url := newKitHarness(t, harnesskit.Options{
		InputSchema: json.RawMessage(`{"type":"object","required":["question"],"properties":{"question":{"type":"string","minLength":1}}}`),
		CheckInput:  json.RawMessage(`{"question":"Where is order 1042?"}`),
		APIKey:      "secret-key",
	})
	rep := check(t, url, func(c *harnesscheck.Config) { c.APIKey = "secret-key" })
	if rep.Failed() {
		dump(t, rep)
		t.Fatal("a harnesskit server fails gyre harness check")
	}
	for _, name := range []string{harnesscheck.CheckCapabilities, harnesscheck.CheckContractVersion, harnesscheck.CheckInput,
		harnesscheck.CheckRun, harnesscheck.CheckFixtures, harnesscheck.CheckTrajectory, harnesscheck.CheckListingQuery,
		harnesscheck.CheckListingPagination, harnesscheck.CheckListingTimeRange, harnesscheck.CheckWorkspace} {
		if c, _ := rep.Get(name); c.Result != harnesscheck.Pass {
			dump(t, rep)
			t.Fatalf("%s = %s, want PASS", name, c.Result)
		}
	}
}
