//go:build unix

package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre/examples/agent/supportdesk"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/worker"
	"github.com/gyrehq/gyre/internal/worker/workertest"
)

// agentArg turns the test binary into the example agent itself: the
// worker spawns os.Executable() with it, so the e2e test runs this
// package's agent as a real child process, exactly as built.
const agentArg = "gyre-example-agent"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == agentArg {
		os.Exit(supportdesk.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestE2E_WorkerGatewayReconciliation is the whole loop for the example
// agent: a batch on a real gyre server with the gateway in front of a
// controllable upstream that emits tool calls; gyre worker runs the agent
// per rollout; the agent calls the model through its rollout's gateway URL,
// runs the tools, records them and reports; the server grades the output
// and reconciles the agent's llm_call_count with what the gateway counted.
func TestE2E_WorkerGatewayReconciliation(t *testing.T) {
	t.Parallel()
	model := newScriptedModel(t)
	ctx := context.Background()
	srv := workertest.Start(t, workertest.Options{Background: true, Deps: func(d *api.Deps) {
		blobs, err := blobstore.Open(ctx, "", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { blobs.Close() })
		gw, err := gateway.New(gateway.Config{
			Upstreams:     []gateway.Upstream{{Name: "scripted", BaseURL: model.srv.URL + "/v1", AllowPrivate: true}},
			FlushInterval: 20 * time.Millisecond,
		}, gateway.Deps{Store: d.Store, Blobs: blobs, Clock: d.Clock, Logger: d.Logger})
		if err != nil {
			t.Fatal(err)
		}
		if err := gw.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = gw.Stop(ctx) })
		d.Blobs, d.Gateway = blobs, gw
	}})
	if st, b := srv.Do(http.MethodPost, "/api/v1/policies", srv.Admin,
		`{"name":"support-v1","upstream":"scripted","model":"served-model","sampling_overrides":{"temperature":1.0}}`); st != http.StatusCreated {
		t.Fatalf("create policy: %d %s", st, b)
	}
	refund := []string{
		`{"tool_called":{"name":"issue_refund"}}`,
		`{"all_tools_ok":{}}`,
		`{"contains":"rf_C3_0001"}`,
	}
	cancelShipped := []string{
		`{"tool_called":{"name":"cancel_order"}}`,
		`{"contains":"cannot cancel"}`,
	}
	_, ids := srv.Batch(workertest.BatchOptions{AgentID: "support-bot", Policy: "support-v1", DeadlineS: 60},
		workertest.Case{Question: "Please refund order C3, it arrived broken.", Graders: refund},
		workertest.Case{Question: "Cancel order A1 please.", Graders: cancelShipped},
	)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runner, err := worker.NewRunner(worker.Config{
		Argv: []string{exe, agentArg}, Env: worker.EnvSpec{Set: map[string]string{"AGENT_MODEL": "gpt-4o-mini"}},
		LookupEnv: lookup(map[string]string{"PATH": os.Getenv("PATH"), "OPENAI_API_KEY": "the-workers-own-key"}),
		Preflight: true, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	client, err := flywheel.NewClient(srv.URL, srv.Agent)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- flywheel.Serve(sctx, flywheel.ServeConfig{Client: client, AgentID: "support-bot", Concurrency: 2,
			Root: t.TempDir(), PollWait: time.Second, Logger: log}, runner)
	}()
	t.Cleanup(func() { stop(); <-done })

	reconciled := func(r workertest.Rollout) bool {
		return r.State == "graded" && r.Reconciliation != nil
	}
	for i, id := range ids {
		r := srv.WaitRollout(id, 90*time.Second, reconciled)
		if *r.Reconciliation != "on_policy" {
			t.Errorf("rollout %d: reconciliation = %s (%v), want on_policy; %s", i, *r.Reconciliation, r.ReconciliationReason, r.Raw)
		}
		out := r.OutputMap()
		if n, _ := out["llm_call_count"].(float64); n != 3 {
			t.Errorf("rollout %d: llm_call_count = %v, want the agent's own count, 3", i, out["llm_call_count"])
		}
		var gw struct {
			Completions int `json:"completions"`
		}
		_ = json.Unmarshal(r.Gateway, &gw)
		if gw.Completions != 3 {
			t.Errorf("rollout %d: the gateway counted %d completions", i, gw.Completions)
		}
		var verdicts []map[string]any
		if err := json.Unmarshal(r.Verdicts, &verdicts); err != nil || len(verdicts) == 0 {
			t.Fatalf("rollout %d: verdicts = %s", i, r.Verdicts)
		}
		for _, v := range verdicts {
			if v["pass"] != true {
				t.Errorf("rollout %d: verdict %v did not pass", i, v)
			}
		}
		if r.TrainingGrade == nil || !*r.TrainingGrade {
			t.Errorf("rollout %d: training_grade = %v (%v), want true: reported, reconciled, graded", i, r.TrainingGrade, r.NotTrainingGrade)
		}
		var joins []struct {
			ToolCallID    *string `json:"tool_call_id"`
			CompletionSeq *int    `json:"completion_seq"`
		}
		_ = json.Unmarshal(r.ToolCallJoins, &joins)
		if len(joins) != 2 {
			t.Errorf("rollout %d: tool_call_joins = %s, want both calls", i, r.ToolCallJoins)
		}
		for _, j := range joins {
			if j.ToolCallID == nil || j.CompletionSeq == nil {
				t.Errorf("rollout %d: a reported call did not join the completion that emitted it: %s", i, r.ToolCallJoins)
			}
		}
		arts, _ := out["artifacts"].(map[string]any)
		if _, ok := arts["transcript.json"]; !ok {
			t.Errorf("rollout %d: artifacts = %v", i, arts)
		}
	}
	// The worker's own OPENAI_API_KEY never reached the model: the agent
	// used its rollout's gateway key, and the upstream saw only the
	// gateway.
	model.mu.Lock()
	defer model.mu.Unlock()
	if len(model.requests) != 6 {
		t.Errorf("the upstream saw %d requests, want 6", len(model.requests))
	}
	for _, req := range model.requests {
		if req["model"] != "served-model" {
			t.Errorf("the upstream got model %v: the gateway did not apply the policy", req["model"])
		}
	}
	if strings.Contains(srv.Logs.String(), "the-workers-own-key") {
		t.Errorf("the worker's own key reached the server's logs")
	}
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func lookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}
