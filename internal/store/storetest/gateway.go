package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// runGateway runs the conformance tests of policies and what the LLM
// gateway records (SPEC §6).
func runGateway(t *testing.T, open Opener) {
	t.Run("Policies", func(t *testing.T) { t.Parallel(); testPolicies(t, open) })
	t.Run("GatewayAccess", func(t *testing.T) { t.Parallel(); testGatewayAccess(t, open) })
	t.Run("TouchGateway", func(t *testing.T) { t.Parallel(); testTouchGateway(t, open) })
	t.Run("RecordGateway", func(t *testing.T) { t.Parallel(); testRecordGateway(t, open) })
	t.Run("GatewayProtocolAndResponseID", func(t *testing.T) { t.Parallel(); testGatewayProtocolAndResponseID(t, open) })
	t.Run("GatewayCallsInOrderOfArrival", func(t *testing.T) { t.Parallel(); testGatewayCallsInOrderOfArrival(t, open) })
	t.Run("GatewayLeaseExtension", func(t *testing.T) { t.Parallel(); testGatewayLeaseExtension(t, open) })
	t.Run("SealGateway", func(t *testing.T) { t.Parallel(); testSealGateway(t, open) })
	t.Run("FinishReconciliation", func(t *testing.T) { t.Parallel(); testFinishReconciliation(t, open) })
	t.Run("ReleaseAfterGatewayCompletion", func(t *testing.T) { t.Parallel(); testReleaseAfterGatewayCompletion(t, open) })
}

func newPolicy(tenantID, name, body string) store.Policy {
	return store.Policy{TenantID: tenantID, Name: name, Body: json.RawMessage(body), SHA256: fixtureSum(body)}
}

func testPolicies(t *testing.T, open Opener) {
	s := open(t, nil)
	ctx := t.Context()
	acme, other := mustTenant(t, s, "acme"), mustTenant(t, s, "other")
	p, created, err := s.CreatePolicy(ctx, newPolicy(acme.ID, "p1", `{"model":"a","name":"p1"}`))
	if err != nil || !created || p.Name != "p1" || string(p.Body) != `{"model":"a","name":"p1"}` || p.CreatedAt.IsZero() {
		t.Fatalf("CreatePolicy = %+v %v %v", p, created, err)
	}
	again, created, err := s.CreatePolicy(ctx, newPolicy(acme.ID, "p1", `{"model":"a","name":"p1"}`))
	if err != nil || created || !again.CreatedAt.Equal(p.CreatedAt) {
		t.Fatalf("identical again = %+v %v %v, want the stored one", again, created, err)
	}
	_, _, err = s.CreatePolicy(ctx, newPolicy(acme.ID, "p1", `{"model":"b","name":"p1"}`))
	wantErr(t, "a different body", err, store.ErrPolicyExists)
	// Names are per tenant.
	if _, created, err := s.CreatePolicy(ctx, newPolicy(other.ID, "p1", `{"model":"z","name":"p1"}`)); err != nil || !created {
		t.Fatalf("same name in another tenant: %v %v", created, err)
	}
	got, err := s.GetPolicy(ctx, acme.ID, "p1")
	if err != nil || string(got.Body) != `{"model":"a","name":"p1"}` {
		t.Fatalf("GetPolicy = %+v %v", got, err)
	}
	_, err = s.GetPolicy(ctx, acme.ID, "missing")
	wantErr(t, "GetPolicy(missing)", err, store.ErrNotFound)
	for _, n := range []string{"p3", "p0", "p2"} {
		if _, _, err := s.CreatePolicy(ctx, newPolicy(acme.ID, n, `{"name":"`+n+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	cursor := ""
	for {
		ps, next, err := s.ListPolicies(ctx, acme.ID, store.Page{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			names = append(names, p.Name)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if !slices.Equal(names, []string{"p0", "p1", "p2", "p3"}) {
		t.Errorf("ListPolicies = %v", names)
	}
	_, _, err = s.ListPolicies(ctx, acme.ID, store.Page{Cursor: "garbage"})
	wantErr(t, "a bad cursor", err, store.ErrInvalidCursor)
	if p, err := s.AgentPolicy(ctx, acme.ID, "nobody"); err != nil || p != nil {
		t.Errorf("AgentPolicy of an unknown agent = %v, %v", p, err)
	}
}

func testGatewayAccess(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	if _, _, err := f.s.CreatePolicy(ctx, newPolicy(f.tenant.ID, "p1", `{}`)); err != nil {
		t.Fatal(err)
	}
	b, _ := f.batch(t, store.NewBatch{Policy: ptr("p1"), Limits: json.RawMessage(`{"max_completions":2}`)})
	r, tok := f.claimOne(t, "ga")
	sec := secretsN("ga", 1)[0]
	a, err := f.s.GatewayAccess(ctx, sec.GatewayToken)
	if err != nil {
		t.Fatal(err)
	}
	if a.RolloutID != r.ID || a.TenantID != f.tenant.ID || a.AgentID != "agent-1" || a.BatchID != b.ID || a.Policy == nil ||
		*a.Policy != "p1" || string(a.Limits) != `{"max_completions":2}` || a.KeyHash != sec.GatewayKey || a.State != gyre.StateLeased ||
		a.Revoked || a.LeaseExpires == nil || !a.Now.Equal(us(Start)) || !a.Usable() {
		t.Errorf("GatewayAccess = %+v", a)
	}
	_, err = f.s.GatewayAccess(ctx, Hash("no such token"))
	wantErr(t, "unknown token", err, store.ErrNotFound)
	live, err := f.s.GatewayLive(ctx, []string{r.ID, "0190b7a0-0000-7000-8000-000000000000"})
	if err != nil || !cmp.Equal(live, map[string]bool{r.ID: true}) {
		t.Errorf("GatewayLive = %v %v", live, err)
	}
	// Past the lease, the credential no longer admits requests.
	f.clk.Advance(2 * time.Minute)
	if a, _ := f.s.GatewayAccess(ctx, sec.GatewayToken); a.Usable() {
		t.Error("usable after the lease lapsed")
	}
	if live, _ := f.s.GatewayLive(ctx, []string{r.ID}); live[r.ID] {
		t.Error("live after the lease lapsed")
	}
	f.clk.Set(Start)
	if _, err := f.submit(t, r, tok, `{"final_text":"x"}`, nil); err != nil {
		t.Fatal(err)
	}
	a, _ = f.s.GatewayAccess(ctx, sec.GatewayToken)
	if !a.Revoked || a.Usable() || a.State != gyre.StateSubmitted {
		t.Errorf("after submission: %+v", a)
	}
	if now, err := f.s.LeaseClock(ctx); err != nil || !now.Equal(us(Start)) {
		t.Errorf("LeaseClock = %v %v", now, err)
	}
}

func testTouchGateway(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, _ := f.claimOne(t, "tg1")
	for range 2 { // idempotent
		if err := f.s.TouchGateway(ctx, r.ID, "replica-a"); err != nil {
			t.Fatal(err)
		}
	}
	r2, _ := f.claimOne(t, "tg2")
	if _, err := f.s.CancelRollout(ctx, f.tenant.ID, r2.ID); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "touch after cancel", f.s.TouchGateway(ctx, r2.ID, "replica-a"), store.ErrGatewayClosed)
	wantErr(t, "touch of an unknown rollout", f.s.TouchGateway(ctx, "0190b7a0-0000-7000-8000-000000000000", "replica-a"), store.ErrNotFound)
}

func gwRecord(id, tenantID, rolloutID string, counted bool) store.GatewayRecord {
	rec := store.GatewayRecord{ID: id, TenantID: tenantID, AgentID: "agent-1", ReplicaID: "replica-a", Protocol: "chat", Status: 200, Counted: counted,
		Stream: true, ReceivedAt: us(Start), Policy: ptr("p1"), Upstream: ptr("u"), Model: ptr("served"), RequestedModel: ptr("asked")}
	if rolloutID != "" {
		rec.RolloutID = &rolloutID
	}
	return rec
}

func testRecordGateway(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, _ := f.claimOne(t, "rg")
	first := gwRecord("0190b7a0-0000-7000-8000-000000000001", f.tenant.ID, r.ID, false)
	first.Status, first.Reason = 500, ptr("upstream_error")
	second := gwRecord("0190b7a0-0000-7000-8000-000000000002", f.tenant.ID, r.ID, true)
	fb, done := us(Start.Add(time.Millisecond)), us(Start.Add(time.Second))
	second.FirstByteAt, second.DoneAt = &fb, &done
	second.Usage, second.TotalTokens, second.CostUSD = json.RawMessage(`{"total_tokens":18}`), ptr(int64(18)), ptr(0.25)
	second.Fingerprint = json.RawMessage(`{"prompt_sha256":"x"}`)
	second.EmittedIDs, second.ConsumedIDs = []string{"call_1"}, []string{"call_0"}
	second.RequestBlob, second.ResponseBlob = ptr("gateway/t/requests/a"), ptr("gateway/t/responses/b")
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: []store.GatewayRecord{first}}); err != nil {
		t.Fatal(err)
	}
	prod := gwRecord("0190b7a0-0000-7000-8000-000000000003", f.tenant.ID, "", true)
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: []store.GatewayRecord{second, prod},
		Beat: &store.ReplicaBeat{FlushedThrough: us(Start), TTL: 10 * time.Second, Started: us(Start)}}); err != nil {
		t.Fatal(err)
	}
	calls, err := f.s.GatewayCalls(ctx, f.tenant.ID, r.ID)
	if err != nil || len(calls) != 2 {
		t.Fatalf("GatewayCalls = %+v %v", calls, err)
	}
	if calls[0].Seq != 1 || calls[0].ID != first.ID || calls[1].Seq != 2 {
		t.Errorf("sequence numbers %d %d", calls[0].Seq, calls[1].Seq)
	}
	want := store.GatewayCall{GatewayRecord: second, Seq: 2}
	want.ReplicaID = "replica-a"
	if diff := cmp.Diff(want, calls[1]); diff != "" {
		t.Errorf("stored record (-want +got):\n%s", diff)
	}
	// Writing a record again (its final form) updates it in place: its
	// number stays, blobs already stored stay.
	final := first
	final.Status, final.Counted, final.Reason = 200, true, nil
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: []store.GatewayRecord{final}}); err != nil {
		t.Fatal(err)
	}
	calls, _ = f.s.GatewayCalls(ctx, f.tenant.ID, r.ID)
	if len(calls) != 2 || calls[0].Seq != 1 || !calls[0].Counted || calls[0].Reason != nil || calls[0].Status != 200 {
		t.Errorf("after the update: %+v", calls)
	}
	u, err := f.s.GatewayUsage(ctx, r.ID)
	if err != nil || u != (store.GatewayUsage{Completions: 2, Calls: 2, TotalTokens: 18, CostUSD: 0.25}) {
		t.Errorf("GatewayUsage = %+v %v", u, err)
	}
	models, err := f.s.GatewayRequestedModels(ctx, r.ID)
	if err != nil || !slices.Equal(models, []string{"asked"}) {
		t.Errorf("GatewayRequestedModels = %v %v", models, err)
	}
	// Another tenant sees nothing.
	other := mustTenant(t, f.s, "other")
	if cs, _ := f.s.GatewayCalls(ctx, other.ID, r.ID); len(cs) != 0 {
		t.Errorf("another tenant sees %d calls", len(cs))
	}
	in, err := f.s.GradingInput(ctx, r.ID)
	if err != nil || in.Completions != 2 || in.Recorded != 2 {
		t.Errorf("GradingInput counts %d/%d %v", in.Completions, in.Recorded, err)
	}
}

// testGatewayProtocolAndResponseID: each record keeps its protocol (an
// unset one is chat) and its Responses answer id, and a response id is
// found only among the records of its own rollout and tenant.
func testGatewayProtocolAndResponseID(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 2)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, _ := f.claimOne(t, "proto")
	r2, _ := f.claimOne(t, "proto2")
	unset := gwRecord("0190b7a0-0000-7000-8000-000000000011", f.tenant.ID, r.ID, true)
	unset.Protocol = ""
	resp := gwRecord("0190b7a0-0000-7000-8000-000000000012", f.tenant.ID, r.ID, true)
	resp.Protocol, resp.ResponseID, resp.ReceivedAt = "responses", ptr("resp_1"), us(Start.Add(time.Second))
	again := gwRecord("0190b7a0-0000-7000-8000-000000000013", f.tenant.ID, r.ID, false)
	again.Protocol, again.ResponseID, again.ReceivedAt = "responses", ptr("resp_1"), us(Start.Add(2*time.Second))
	other := gwRecord("0190b7a0-0000-7000-8000-000000000014", f.tenant.ID, r2.ID, true)
	other.Protocol, other.ResponseID = "responses", ptr("resp_2")
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: []store.GatewayRecord{unset, resp, again, other}}); err != nil {
		t.Fatal(err)
	}
	calls, err := f.s.GatewayCalls(ctx, f.tenant.ID, r.ID)
	if err != nil || len(calls) != 3 {
		t.Fatalf("GatewayCalls = %+v %v", calls, err)
	}
	if calls[0].Protocol != "chat" || calls[0].ResponseID != nil || calls[1].Protocol != "responses" ||
		calls[1].ResponseID == nil || *calls[1].ResponseID != "resp_1" {
		t.Errorf("protocols %q %q, response ids %v %v", calls[0].Protocol, calls[1].Protocol, calls[0].ResponseID, calls[1].ResponseID)
	}
	got, err := f.s.GatewayCallByResponse(ctx, f.tenant.ID, r.ID, "resp_1")
	if err != nil || got.ID != again.ID {
		t.Errorf("GatewayCallByResponse(resp_1) = %s %v, want the latest record %s", got.ID, err, again.ID)
	}
	_, err = f.s.GatewayCallByResponse(ctx, f.tenant.ID, r.ID, "resp_2")
	wantErr(t, "a response of another rollout", err, store.ErrNotFound)
	stranger := mustTenant(t, f.s, "stranger")
	_, err = f.s.GatewayCallByResponse(ctx, stranger.ID, r.ID, "resp_1")
	wantErr(t, "a response of another tenant", err, store.ErrNotFound)
}

// testGatewayCallsInOrderOfArrival: a rollout's calls are numbered by
// arrival (received time, then the replica's arrival count, then order of
// writing), not by when their records were written (SPEC §6.2: a
// tool_call_id joins to the latest completion *before* the request that
// consumed it).
func testGatewayCallsInOrderOfArrival(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, _ := f.claimOne(t, "order")
	rec := func(n int, received time.Time, arrival uint64) store.GatewayRecord {
		g := gwRecord(fmt.Sprintf("0190b7a0-0000-7000-8000-%012d", n), f.tenant.ID, r.ID, true)
		g.ReceivedAt, g.Arrival = us(received), arrival
		return g
	}
	same := Start.Add(time.Second)
	// Written in the order a flush would see them finish: the call that
	// arrived first (a long stream) is written last.
	writes := [][]store.GatewayRecord{
		{rec(4, same, 9)},                        // 4th: same microsecond as the 3rd, later arrival
		{rec(2, Start.Add(time.Millisecond), 2)}, // 2nd
		{rec(5, Start.Add(2*time.Second), 1)},    // 5th: a later time beats a smaller arrival count (another replica)
		{rec(3, same, 8), rec(1, Start, 1)},      // 3rd and 1st
	}
	for _, w := range writes {
		if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: w}); err != nil {
			t.Fatal(err)
		}
	}
	calls, err := f.s.GatewayCalls(ctx, f.tenant.ID, r.ID)
	if err != nil || len(calls) != 5 {
		t.Fatalf("GatewayCalls = %d calls, %v", len(calls), err)
	}
	for i, c := range calls {
		if want := fmt.Sprintf("0190b7a0-0000-7000-8000-%012d", i+1); c.ID != want || c.Seq != i+1 {
			t.Errorf("call %d = %s seq %d, want %s seq %d", i, c.ID, c.Seq, want, i+1)
		}
	}
	// Writing a record again (its final form) keeps its place.
	final := rec(2, Start.Add(time.Millisecond), 2)
	final.Status = 201
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: []store.GatewayRecord{final}}); err != nil {
		t.Fatal(err)
	}
	calls, _ = f.s.GatewayCalls(ctx, f.tenant.ID, r.ID)
	if len(calls) != 5 || calls[1].ID != final.ID || calls[1].Seq != 2 || calls[1].Status != 201 || calls[1].Arrival != 2 {
		t.Errorf("after rewriting the 2nd: %+v", calls[1])
	}
}

func testGatewayLeaseExtension(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, _ := f.claimOne(t, "le") // lease: one minute from Start
	f.clk.Advance(40 * time.Second)
	failed := gwRecord("0190b7a0-0000-7000-8000-000000000011", f.tenant.ID, r.ID, false)
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "x", Records: []store.GatewayRecord{failed}}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, f.s, f.tenant.ID, r.ID); !got.LeaseExpiresAt.Equal(us(Start.Add(time.Minute))) {
		t.Errorf("a failed call extended the lease to %v", got.LeaseExpiresAt)
	}
	counted := gwRecord("0190b7a0-0000-7000-8000-000000000012", f.tenant.ID, r.ID, true)
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "x", Records: []store.GatewayRecord{counted}}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, f.s, f.tenant.ID, r.ID); !got.LeaseExpiresAt.Equal(us(Start.Add(100 * time.Second))) {
		t.Errorf("a counted completion extended the lease to %v, want now + the granted minute", got.LeaseExpiresAt)
	}
	// A lapsed lease is not revived.
	f.clk.Advance(5 * time.Minute)
	late := gwRecord("0190b7a0-0000-7000-8000-000000000013", f.tenant.ID, r.ID, true)
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "x", Records: []store.GatewayRecord{late}}); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, f.s, f.tenant.ID, r.ID); !got.LeaseExpiresAt.Equal(us(Start.Add(100 * time.Second))) {
		t.Errorf("a lapsed lease was revived to %v", got.LeaseExpiresAt)
	}
}

func testSealGateway(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 5)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	beat := func(replica string, through time.Time) {
		t.Helper()
		if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: replica,
			Beat: &store.ReplicaBeat{FlushedThrough: through, TTL: 10 * time.Second, Started: us(Start)}}); err != nil {
			t.Fatal(err)
		}
	}
	submitted := func(seed string, replicas ...string) store.Rollout {
		t.Helper()
		r, tok := f.claimOne(t, seed)
		for _, rp := range replicas {
			if err := f.s.TouchGateway(ctx, r.ID, rp); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.submit(t, r, tok, `{"final_text":"x"}`, nil); err != nil {
			t.Fatal(err)
		}
		return r
	}
	beat("a", us(Start))
	beat("b", us(Start))
	quiet := submitted("s0")
	if s, err := f.s.SealGateway(ctx, quiet.ID); err != nil || !s.Ready || s.Lost || !s.SealedAt.Equal(us(Start)) {
		t.Fatalf("a rollout no replica touched: %+v %v", s, err)
	}
	f.clk.Advance(time.Second)
	r := submitted("s1", "a", "b")
	f.clk.Advance(time.Second)
	s, err := f.s.SealGateway(ctx, r.ID)
	if err != nil || s.Ready || s.Lost || !slices.Equal(s.Waiting, []string{"a", "b"}) || !s.SealedAt.Equal(us(Start.Add(2*time.Second))) {
		t.Fatalf("before any flush: %+v %v", s, err)
	}
	// The seal is fixed at the first call.
	f.clk.Advance(time.Second)
	beat("a", us(Start.Add(2*time.Second)))
	s, _ = f.s.SealGateway(ctx, r.ID)
	if s.Ready || !slices.Equal(s.Waiting, []string{"b"}) || !s.SealedAt.Equal(us(Start.Add(2*time.Second))) {
		t.Fatalf("a flushed through the seal: %+v", s)
	}
	// A watermark never moves back.
	beat("a", us(Start))
	beat("b", us(Start.Add(3*time.Second)))
	if s, _ = f.s.SealGateway(ctx, r.ID); !s.Ready || s.Lost {
		t.Fatalf("both flushed through the seal: %+v", s)
	}
	// A replica that dies before flushing makes records lost; one that
	// stopped drained does not.
	lost := submitted("s2", "a")
	drained := submitted("s3", "b")
	f.clk.Advance(time.Second)
	if s, _ := f.s.SealGateway(ctx, lost.ID); s.Ready {
		t.Fatalf("ready while a is alive and behind: %+v", s)
	}
	if err := f.s.StopReplica(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	if s, _ := f.s.SealGateway(ctx, drained.ID); !s.Ready || s.Lost {
		t.Errorf("a drained replica: %+v", s)
	}
	f.clk.Advance(11 * time.Second) // a's heartbeat expires
	if s, _ := f.s.SealGateway(ctx, lost.ID); !s.Ready || !s.Lost {
		t.Errorf("a dead replica behind the seal: %+v", s)
	}
	if err := f.s.StopReplica(ctx, "c", false); err != nil {
		t.Fatal(err) // stopping an unknown replica is a no-op
	}
	leased, _ := f.claimOne(t, "s4")
	if _, err := f.s.SealGateway(ctx, leased.ID); err == nil {
		t.Error("sealed a leased rollout")
	}
}

func testFinishReconciliation(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, tok := f.claimOne(t, "fr")
	if _, err := f.submit(t, r, tok, `{"final_text":"x"}`, nil); err != nil {
		t.Fatal(err)
	}
	// Grading without a reconciliation leaves the decision null.
	if err := f.s.SaveGrade(ctx, store.GradeResult{RolloutID: r.ID, Verdicts: json.RawMessage(`[]`), GraderVersions: json.RawMessage(`[]`),
		Reasons: []string{"reconciliation_pending"}}); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, f.s, f.tenant.ID, r.ID)
	if got.State != gyre.StateGraded || got.TrainingGrade != nil || got.Reconciliation != nil ||
		!slices.Equal(got.NotTrainingGradeReasons, []string{"reconciliation_pending"}) {
		t.Fatalf("graded, reconciliation pending: %+v", got)
	}
	if err := f.s.FinishReconciliation(ctx, store.ReconcileResult{RolloutID: r.ID, Reconciliation: "off_policy",
		ReconciliationReason: ptr("agent reported 2"), ServerFingerprint: json.RawMessage(`{"prompt_sha256":[]}`),
		TrainingGrade: false, Reasons: []string{"off_policy"}}); err != nil {
		t.Fatal(err)
	}
	got = mustGet(t, f.s, f.tenant.ID, r.ID)
	if got.Reconciliation == nil || *got.Reconciliation != "off_policy" || *got.ReconciliationReason != "agent reported 2" ||
		string(got.ServerFingerprint) != `{"prompt_sha256":[]}` || got.TrainingGrade == nil || *got.TrainingGrade ||
		!slices.Equal(got.NotTrainingGradeReasons, []string{"off_policy"}) {
		t.Errorf("after reconciliation: %+v", got)
	}
	wantErr(t, "unknown rollout", f.s.FinishReconciliation(ctx, store.ReconcileResult{RolloutID: "0190b7a0-0000-7000-8000-000000000000",
		Reconciliation: "on_policy"}), store.ErrNotFound)
}

func testReleaseAfterGatewayCompletion(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, tok := f.claimOne(t, "ra")
	failed := gwRecord("0190b7a0-0000-7000-8000-000000000021", f.tenant.ID, r.ID, false)
	counted := gwRecord("0190b7a0-0000-7000-8000-000000000022", f.tenant.ID, r.ID, true)
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "x", Records: []store.GatewayRecord{failed}}); err != nil {
		t.Fatal(err)
	}
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "x", Records: []store.GatewayRecord{counted}}); err != nil {
		t.Fatal(err)
	}
	_, err := f.s.Release(ctx, f.tenant.ID, r.ID, tok)
	wantErr(t, "release after a counted completion", err, store.ErrAlreadyStarted)
}
