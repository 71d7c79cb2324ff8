package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/internal/store"
)

// runGrading runs the conformance tests of the calls judge graders make
// (SPEC §8: calls of kind grading).
func runGrading(t *testing.T, open Opener) {
	t.Run("GradingCallsStoredLosslessly", func(t *testing.T) { t.Parallel(); testGradingCallsStored(t, open) })
	t.Run("GradingCallsNeverCountOnTheRollout", func(t *testing.T) { t.Parallel(); testGradingCallsNeverCount(t, open) })
}

func gradingCall(id, tenantID, rolloutID string, attempt int) store.GradingCall {
	return store.GradingCall{
		ID: id, TenantID: tenantID, SubjectKind: "rollout", SubjectID: rolloutID, Attempt: attempt,
		Policy: "judge", Upstream: "local", Model: "judge-model", Status: 200,
		Request:   json.RawMessage(`{"messages":[{"content":"a\u0000b","role":"user"}],"model":"judge-model"}`),
		Response:  []byte(`{"choices":[{"message":{"content":"{\"score\":1}"}}]}`),
		Usage:     json.RawMessage(`{"total_tokens":12}`),
		StartedAt: us(Start), DoneAt: us(Start.Add(time.Second)),
	}
}

// testGradingCallsStored: every field comes back as written — a response
// that is not UTF-8 and holds NUL bytes included, since it is the
// upstream's, not gyre's — per subject, in order, and only in its tenant.
func testGradingCallsStored(t *testing.T, open Opener) {
	s := open(t, nil)
	ctx := t.Context()
	acme, other := mustTenant(t, s, "acme"), mustTenant(t, s, "other")
	first := gradingCall("0190b7a0-0000-7000-8000-0000000000a1", acme.ID, "r1", 1)
	first.Response = []byte("not json \x00\xff\xfe")
	second := gradingCall("0190b7a0-0000-7000-8000-0000000000a2", acme.ID, "r1", 2)
	second.StartedAt, second.DoneAt = us(Start.Add(2*time.Second)), us(Start.Add(3*time.Second))
	failed := gradingCall("0190b7a0-0000-7000-8000-0000000000a3", acme.ID, "r2", 1)
	failed.Status, failed.Error, failed.Response, failed.Usage = 0, ptr("upstream local could not be reached"), nil, nil
	run := gradingCall("0190b7a0-0000-7000-8000-0000000000a4", acme.ID, "exp/case-1/1", 1)
	run.SubjectKind = "run"
	for _, c := range []store.GradingCall{second, first, failed, run} {
		if err := s.RecordGradingCall(ctx, c); err != nil {
			t.Fatalf("RecordGradingCall(%s): %v", c.ID, err)
		}
	}
	wantErr(t, "the same id again", s.RecordGradingCall(ctx, first), store.ErrConflict)

	got, err := s.GradingCalls(ctx, acme.ID, "rollout", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.GradingCall{first, second}, got); diff != "" {
		t.Errorf("GradingCalls(r1) (-want +got):\n%s", diff)
	}
	got, err = s.GradingCalls(ctx, acme.ID, "rollout", "r2")
	if err != nil || len(got) != 1 {
		t.Fatalf("GradingCalls(r2) = %+v %v", got, err)
	}
	if diff := cmp.Diff(failed, got[0]); diff != "" {
		t.Errorf("a failed call (-want +got):\n%s", diff)
	}
	if got, err := s.GradingCalls(ctx, acme.ID, "run", "exp/case-1/1"); err != nil || len(got) != 1 || got[0].ID != run.ID {
		t.Errorf("GradingCalls(run) = %+v %v", got, err)
	}
	// Kinds do not mix, and another tenant sees nothing.
	if got, _ := s.GradingCalls(ctx, acme.ID, "run", "r1"); len(got) != 0 {
		t.Errorf("kind run sees the rollout's calls: %+v", got)
	}
	if got, _ := s.GradingCalls(ctx, other.ID, "rollout", "r1"); len(got) != 0 {
		t.Errorf("another tenant sees %d grading calls", len(got))
	}
}

// testGradingCallsNeverCount: a rollout's grading calls are not among its
// gateway calls, its usage (budgets) or its counted completions.
func testGradingCallsNeverCount(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, _ := f.claimOne(t, "gc")
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a",
		Records: []store.GatewayRecord{gwRecord("0190b7a0-0000-7000-8000-0000000000b1", f.tenant.ID, r.ID, true)}}); err != nil {
		t.Fatal(err)
	}
	before, err := f.s.GatewayUsage(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c := gradingCall("0190b7a0-0000-7000-8000-0000000000c"+string(rune('1'+i)), f.tenant.ID, r.ID, i+1)
		if err := f.s.RecordGradingCall(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	calls, err := f.s.GatewayCalls(ctx, f.tenant.ID, r.ID)
	if err != nil || len(calls) != 1 {
		t.Errorf("GatewayCalls = %d calls, %v; want the 1 gateway call only", len(calls), err)
	}
	after, err := f.s.GatewayUsage(ctx, r.ID)
	if err != nil || after != before {
		t.Errorf("GatewayUsage after grading calls = %+v %v, want %+v", after, err, before)
	}
	in, err := f.s.GradingInput(ctx, r.ID)
	if err != nil || in.Completions != 1 || in.Recorded != 1 {
		t.Errorf("GradingInput counts %d/%d %v, want 1/1", in.Completions, in.Recorded, err)
	}
	if got, err := f.s.GradingCalls(ctx, f.tenant.ID, "rollout", r.ID); err != nil || len(got) != 3 {
		t.Errorf("GradingCalls = %d %v", len(got), err)
	}
}
