package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// nul is text holding U+0000 between two characters.
const nul = "a\x00b"

// Text a contract defines keeps U+0000 losslessly on every engine: turns,
// outputs, suite documents, policies and what a harness reports of a run
// (run id, model, answer, error and its JSON members). Text gyre defines
// (names, worker ids, harness URLs, …) holding U+0000 is refused alike
// on every engine with ErrNUL naming the field, and nothing is stored
// (issue 11, defect 2: PostgreSQL answered 500 for some and SQLite stored
// them).
func testTextHoldingNUL(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	s, ctx, tn := f.s, t.Context(), f.tenant.ID
	const jsonNUL = `"a\u0000b"`

	t.Run("turn", func(t *testing.T) {
		body := `{"turn_id":"t-nul","input_text":` + jsonNUL + `,"final_text":` + jsonNUL +
			`,"tool_calls":[{"name":"x","outcome":"ok","status_code":200,"output":` + jsonNUL + `}],"tool_calls_omitted_count":0}`
		mustInsertTurns(t, s, tn, "agent-1", newTurn(t, "t-nul", body))
		got, err := s.TurnsByID(ctx, tn, "agent-1", []string{"t-nul"})
		if err != nil || len(got) != 1 || string(got[0].Body) != body {
			t.Fatalf("turn read back = %+v, %v; want %s", got, err, body)
		}
	})
	t.Run("output", func(t *testing.T) {
		f.batch(t, store.NewBatch{})
		r, tok := f.claimOne(t, "nul")
		out := `{"final_text":` + jsonNUL + `,"tool_calls":null,"tool_calls_omitted_count":0}`
		if _, err := f.submit(t, r, tok, out, nil); err != nil {
			t.Fatalf("submit: %v", err)
		}
		if got := mustGet(t, s, tn, r.ID); string(got.Output) != out {
			t.Fatalf("output read back = %s, want %s", got.Output, out)
		}
	})
	t.Run("suite document", func(t *testing.T) {
		v := newSuiteVersion(t, tn, "nul-suite", "", 1)
		var doc map[string]any
		if err := json.Unmarshal(v.Document, &doc); err != nil {
			t.Fatal(err)
		}
		doc["description"] = nul
		v.Document, _ = json.Marshal(doc)
		sv, _ := mustPutSuite(t, s, v)
		got, err := s.SuiteVersion(ctx, tn, "nul-suite", sv.Version)
		if err != nil || string(got.Document) != string(v.Document) {
			t.Fatalf("suite read back = %s, %v; want %s", got.Document, err, v.Document)
		}
	})
	t.Run("policy", func(t *testing.T) {
		body := `{"model":` + jsonNUL + `,"name":"nul"}`
		if _, _, err := s.CreatePolicy(ctx, newPolicy(tn, "nul", body)); err != nil {
			t.Fatalf("CreatePolicy: %v", err)
		}
		got, err := s.GetPolicy(ctx, tn, "nul")
		if err != nil || string(got.Body) != body {
			t.Fatalf("policy read back = %s, %v; want %s", got.Body, err, body)
		}
	})
	t.Run("run record and experiment model", func(t *testing.T) {
		e := mustExperiment(t, s, tn)
		answer, empty := nul, ""
		started := Start
		for _, want := range []store.RunRecord{
			{TenantID: tn, ExperimentID: e.ID, CaseID: "c1", Repetition: 1, RunID: nul, Status: "completed",
				Classification: "passed", Error: nul, Model: nul, Answer: &answer, Output: json.RawMessage(`{"x":` + jsonNUL + `}`),
				Verdicts: json.RawMessage(`[{"reason":` + jsonNUL + `}]`), StartedAt: &started},
			{TenantID: tn, ExperimentID: e.ID, CaseID: "c2", Repetition: 1, Answer: &empty},
			{TenantID: tn, ExperimentID: e.ID, CaseID: "c3", Repetition: 1, RunID: "plain", Model: "m", Error: "e"},
		} {
			if _, err := s.PutRun(ctx, want); err != nil {
				t.Fatalf("PutRun(%s): %v", want.CaseID, err)
			}
			got, err := s.Run(ctx, tn, e.ID, want.CaseID, 1)
			if err != nil {
				t.Fatal(err)
			}
			want.UpdatedAt = got.UpdatedAt
			want.StartedAt = got.StartedAt
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("run %s read back differs (-sent +read):\n%s", want.CaseID, diff)
			}
		}
		done, err := s.FinishExperiment(ctx, store.ExperimentFinish{TenantID: tn, ID: e.ID, Model: nul, Summary: json.RawMessage(`{}`)})
		if err != nil || done.Model != nul {
			t.Fatalf("FinishExperiment model = %q, %v; want %q", done.Model, err, nul)
		}
		if got, err := s.Experiment(ctx, tn, e.ID); err != nil || got.Model != nul {
			t.Fatalf("experiment model read back = %q, %v; want %q", got.Model, err, nul)
		}
	})

	refused := func(t *testing.T, what, pointer string, err error) {
		t.Helper()
		var fe *store.FieldError
		if !errors.Is(err, store.ErrNUL) || !errors.As(err, &fe) || fe.Pointer != pointer {
			t.Errorf("%s: error = %v, want ErrNUL at %s", what, err, pointer)
		}
	}
	t.Run("gyre-defined text", func(t *testing.T) {
		_, err := s.CreateTenant(ctx, nul)
		refused(t, "tenant name", "/name", err)
		_, err = s.CreateKey(ctx, store.NewKey{TenantID: tn, Role: gyre.RoleReader, Name: nul, Hash: Hash("nul")})
		refused(t, "key name", "/name", err)
		_, _, err = s.CreatePolicy(ctx, newPolicy(tn, nul, `{}`))
		refused(t, "policy name", "/name", err)
		batch := store.NewBatch{TenantID: tn, AgentID: "agent-1", TaskIDs: f.tasks, GroupSize: 1, DeadlineS: 60, MaxAttempts: 1}
		for _, tc := range []struct {
			pointer string
			set     func(*store.NewBatch)
		}{
			{"/agent_id", func(b *store.NewBatch) { b.AgentID = nul }},
			{"/policy", func(b *store.NewBatch) { p := nul; b.Policy = &p }},
			{"Idempotency-Key", func(b *store.NewBatch) { b.IdempotencyKey = nul }},
		} {
			b := batch
			tc.set(&b)
			_, _, _, err = s.CreateBatch(ctx, b)
			refused(t, "batch", tc.pointer, err)
		}
		claim := store.ClaimRequest{TenantID: tn, AgentID: "agent-1", Max: 1, Lease: time.Minute, Secrets: secretsN("nul-claim", 1)}
		for _, tc := range []struct {
			pointer string
			set     func(*store.ClaimRequest)
		}{
			{"/worker_id", func(c *store.ClaimRequest) { c.WorkerID = nul }},
			{"/worker_version", func(c *store.ClaimRequest) { c.WorkerVersion = nul }},
			{"Idempotency-Key", func(c *store.ClaimRequest) { c.IdempotencyKey = nul }},
		} {
			c := claim
			tc.set(&c)
			_, err = s.Claim(ctx, c)
			refused(t, "claim", tc.pointer, err)
		}
		for _, tc := range []struct {
			pointer string
			set     func(*store.NewExperiment)
		}{
			{"/suite", func(e *store.NewExperiment) { e.Suite = nul }},
			{"/suite_version", func(e *store.NewExperiment) { e.SuiteVersion = nul }},
			{"/harness", func(e *store.NewExperiment) { e.Harness = nul }},
		} {
			e := newExperiment(tn)
			tc.set(&e)
			_, err = s.CreateExperiment(ctx, e)
			refused(t, "experiment", tc.pointer, err)
		}
		e := mustExperiment(t, s, tn)
		_, err = s.PutRun(ctx, store.RunRecord{TenantID: tn, ExperimentID: e.ID, CaseID: nul, Repetition: 1})
		refused(t, "run case id", "/case_id", err)
		_, err = s.PutRun(ctx, store.RunRecord{TenantID: tn, ExperimentID: e.ID, CaseID: "c", Repetition: 1, Status: nul})
		refused(t, "run status", "/status", err)
		// Nothing of the refused writes was stored.
		if tns, err := s.ListTenants(ctx); err != nil || len(tns) != 1 {
			t.Errorf("tenants after refused writes = %d, %v; want 1", len(tns), err)
		}
		if runs, _, err := s.ListRuns(ctx, tn, e.ID, store.Page{}); err != nil || len(runs) != 0 {
			t.Errorf("runs after refused writes = %d, %v; want none", len(runs), err)
		}
		if leased, _, err := s.ListRollouts(ctx, tn, store.RolloutFilter{State: gyre.StateLeased}, store.Page{}); err != nil || len(leased) != 0 {
			t.Errorf("leased rollouts after refused claims = %d, %v; want none", len(leased), err)
		}
	})
}
