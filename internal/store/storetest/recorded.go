package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/store"
)

// runRecorded runs the conformance tests of reading back what was
// recorded (SPEC §4.8): a rollout's calls by page, production calls and
// the blobs a tenant references.
func runRecorded(t *testing.T, open Opener) {
	t.Run("RolloutCallsPages", func(t *testing.T) { t.Parallel(); testRolloutCallsPages(t, open) })
	t.Run("RolloutCallsForeign", func(t *testing.T) { t.Parallel(); testRolloutCallsForeign(t, open) })
	t.Run("ProductionCallsPages", func(t *testing.T) { t.Parallel(); testProductionCallsPages(t, open) })
	t.Run("ProductionCallsFilters", func(t *testing.T) { t.Parallel(); testProductionCallsFilters(t, open) })
	t.Run("ProductionCallsCursorBound", func(t *testing.T) { t.Parallel(); testProductionCallsCursorBound(t, open) })
	t.Run("TenantBlob", func(t *testing.T) { t.Parallel(); testTenantBlob(t, open) })
}

func callID(n int) string { return fmt.Sprintf("0190b7a0-0000-7000-8000-%012d", n) }

// testRolloutCallsPages: pages follow the order and numbering of
// GatewayCalls, whatever order the records were written in, and every
// call appears exactly once.
func testRolloutCallsPages(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, _ := f.claimOne(t, "pages")
	// Written newest first: sequence numbers follow arrival, not writing.
	for i := 7; i >= 1; i-- {
		rec := gwRecord(callID(i), f.tenant.ID, r.ID, i%2 == 0)
		rec.ReceivedAt, rec.Arrival = us(Start.Add(time.Duration(i)*time.Millisecond)), uint64(i)
		if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: []store.GatewayRecord{rec}}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := f.s.GatewayCalls(ctx, f.tenant.ID, r.ID)
	if err != nil || len(all) != 7 {
		t.Fatalf("GatewayCalls = %d, %v", len(all), err)
	}
	for _, size := range []int{1, 3, 7, 50} {
		var got []store.GatewayCall
		cursor, pages := "", 0
		for {
			page, next, err := f.s.RolloutCalls(ctx, f.tenant.ID, r.ID, store.Page{Limit: size, Cursor: cursor})
			if err != nil {
				t.Fatalf("limit %d: RolloutCalls: %v", size, err)
			}
			pages++
			if len(page) > size {
				t.Fatalf("limit %d: a page of %d", size, len(page))
			}
			got = append(got, page...)
			if next == "" {
				break
			}
			cursor = next
		}
		if want := (7 + size - 1) / size; pages != want {
			t.Errorf("limit %d: %d pages, want %d", size, pages, want)
		}
		if len(got) != len(all) {
			t.Fatalf("limit %d: %d calls, want %d", size, len(got), len(all))
		}
		for i := range got {
			if got[i].ID != all[i].ID || got[i].Seq != all[i].Seq || got[i].Seq != i+1 || got[i].Counted != all[i].Counted {
				t.Errorf("limit %d: call %d = %s seq %d, want %s seq %d", size, i, got[i].ID, got[i].Seq, all[i].ID, all[i].Seq)
			}
		}
	}
	// A rollout without calls is an empty list, not an error.
	f.batch(t, store.NewBatch{})
	empty, _ := f.claimOne(t, "empty")
	page, next, err := f.s.RolloutCalls(ctx, f.tenant.ID, empty.ID, store.Page{})
	if err != nil || len(page) != 0 || next != "" {
		t.Errorf("RolloutCalls(no calls) = %d %q %v", len(page), next, err)
	}
	// A cursor of one rollout is refused for another, as is a made-up one.
	_, next, _ = f.s.RolloutCalls(ctx, f.tenant.ID, r.ID, store.Page{Limit: 2})
	for _, c := range []string{next, "garbage", catalogCursor("rollout-calls:00:1"), catalogCursor("rollout-calls::x")} {
		_, _, err := f.s.RolloutCalls(ctx, f.tenant.ID, empty.ID, store.Page{Cursor: c})
		wantErr(t, "RolloutCalls(foreign cursor "+c+")", err, store.ErrInvalidCursor)
	}
}

// testRolloutCallsForeign: another tenant's rollout, or no rollout at all,
// is ErrNotFound — never an empty list that would confirm it exists.
func testRolloutCallsForeign(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, _ := f.claimOne(t, "foreign")
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a",
		Records: []store.GatewayRecord{gwRecord(callID(1), f.tenant.ID, r.ID, true)}}); err != nil {
		t.Fatal(err)
	}
	other := mustTenant(t, f.s, "other")
	_, _, err := f.s.RolloutCalls(ctx, other.ID, r.ID, store.Page{})
	wantErr(t, "RolloutCalls(another tenant's rollout)", err, store.ErrNotFound)
	_, _, err = f.s.RolloutCalls(ctx, f.tenant.ID, callID(99), store.Page{})
	wantErr(t, "RolloutCalls(unknown rollout)", err, store.ErrNotFound)
}

// prodRecord is a production call (no rollout) of agent, received at t.
func prodRecord(n int, tenantID, agent string, received time.Time, arrival uint64) store.GatewayRecord {
	rec := gwRecord(callID(n), tenantID, "", true)
	rec.AgentID, rec.ReceivedAt, rec.Arrival = agent, us(received), arrival
	return rec
}

func ids(calls []store.GatewayCall) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.ID
	}
	return out
}

// allProduction pages through ProductionCalls with the given page size.
func allProduction(t *testing.T, s store.Store, tenantID string, f store.CallFilter, size int) []store.GatewayCall {
	t.Helper()
	var out []store.GatewayCall
	cursor := ""
	for range 1000 {
		page, next, err := s.ProductionCalls(t.Context(), tenantID, f, store.Page{Limit: size, Cursor: cursor})
		if err != nil {
			t.Fatalf("ProductionCalls(%+v, limit %d): %v", f, size, err)
		}
		if len(page) > size {
			t.Fatalf("a page of %d, limit %d", len(page), size)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		cursor = next
	}
	t.Fatal("ProductionCalls never ends")
	return nil
}

// testProductionCallsPages: production calls come in order of receipt
// (time, then arrival count, then id), each once whatever the page size,
// and rollout calls never appear among them.
func testProductionCallsPages(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, _ := f.claimOne(t, "prod")
	same := Start.Add(time.Second)
	recs := []store.GatewayRecord{
		prodRecord(5, f.tenant.ID, "agent-1", Start.Add(2*time.Second), 1),
		prodRecord(3, f.tenant.ID, "agent-2", same, 4),
		prodRecord(1, f.tenant.ID, "agent-1", Start, 9),
		prodRecord(4, f.tenant.ID, "agent-1", same, 4), // same time and arrival as 3 (two replicas): id decides
		prodRecord(2, f.tenant.ID, "agent-1", same, 2),
		gwRecord(callID(6), f.tenant.ID, r.ID, true), // a rollout's call
	}
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: recs}); err != nil {
		t.Fatal(err)
	}
	want := []string{callID(1), callID(2), callID(3), callID(4), callID(5)}
	for _, size := range []int{1, 2, 5, 500} {
		got := allProduction(t, f.s, f.tenant.ID, store.CallFilter{}, size)
		if !slices.Equal(ids(got), want) {
			t.Errorf("limit %d: %v, want %v", size, ids(got), want)
		}
		for _, c := range got {
			if c.RolloutID != nil || c.Seq != 0 {
				t.Errorf("production call %s has rollout %v seq %d", c.ID, c.RolloutID, c.Seq)
			}
		}
	}
	got := allProduction(t, f.s, f.tenant.ID, store.CallFilter{}, 50)
	if got[1].AgentID != "agent-1" || got[2].AgentID != "agent-2" || got[1].Status != 200 || !got[1].Counted ||
		got[1].Model == nil || *got[1].Model != "served" {
		t.Errorf("stored fields lost: %+v", got[1])
	}
	// Another tenant lists none of them.
	other := mustTenant(t, f.s, "other")
	if got := allProduction(t, f.s, other.ID, store.CallFilter{}, 50); len(got) != 0 {
		t.Errorf("another tenant lists %v", ids(got))
	}
}

// testProductionCallsFilters: agent_id keeps one agent's calls; since is
// inclusive, to the microsecond, and rounds a finer time up.
func testProductionCallsFilters(t *testing.T, open Opener) {
	s := open(t, nil)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	recs := []store.GatewayRecord{
		prodRecord(1, tn.ID, "agent-1", Start, 1),
		prodRecord(2, tn.ID, "agent-2", Start.Add(time.Second), 2),
		prodRecord(3, tn.ID, "agent-1", Start.Add(2*time.Second), 3),
	}
	if err := s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: recs}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		f    store.CallFilter
		want []string
	}{
		{"no filter", store.CallFilter{}, []string{callID(1), callID(2), callID(3)}},
		{"one agent", store.CallFilter{AgentID: "agent-1"}, []string{callID(1), callID(3)}},
		{"unknown agent", store.CallFilter{AgentID: "agent-9"}, []string{}},
		{"since is inclusive", store.CallFilter{Since: us(Start.Add(time.Second))}, []string{callID(2), callID(3)}},
		{"since rounds up", store.CallFilter{Since: us(Start.Add(time.Second)).Add(time.Nanosecond)}, []string{callID(3)}},
		{"agent and since", store.CallFilter{AgentID: "agent-1", Since: Start.Add(time.Millisecond)}, []string{callID(3)}},
		{"since after all", store.CallFilter{Since: Start.Add(time.Hour)}, []string{}},
	}
	for _, tc := range cases {
		for _, size := range []int{1, 50} {
			if got := ids(allProduction(t, s, tn.ID, tc.f, size)); !slices.Equal(got, tc.want) {
				t.Errorf("%s (limit %d): %v, want %v", tc.name, size, got, tc.want)
			}
		}
	}
}

// testProductionCallsCursorBound: a cursor answers only the list it was
// issued for — same tenant, same agent_id, same since.
func testProductionCallsCursorBound(t *testing.T, open Opener) {
	s := open(t, nil)
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	for _, tn := range []string{a.ID, b.ID} {
		recs := []store.GatewayRecord{prodRecord(1, tn, "agent-1", Start, 1), prodRecord(2, tn, "agent-1", Start.Add(time.Second), 2)}
		if tn == b.ID {
			recs = []store.GatewayRecord{prodRecord(3, tn, "agent-1", Start, 1), prodRecord(4, tn, "agent-1", Start.Add(time.Second), 2)}
		}
		if err := s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	issued := store.CallFilter{AgentID: "agent-1"}
	_, next, err := s.ProductionCalls(ctx, a.ID, issued, store.Page{Limit: 1})
	if err != nil || next == "" {
		t.Fatalf("first page: %q %v", next, err)
	}
	if page, _, err := s.ProductionCalls(ctx, a.ID, issued, store.Page{Limit: 1, Cursor: next}); err != nil ||
		!slices.Equal(ids(page), []string{callID(2)}) {
		t.Fatalf("second page = %v %v", ids(page), err)
	}
	for _, tc := range []struct {
		name   string
		tenant string
		f      store.CallFilter
		cursor string
	}{
		{"another tenant", b.ID, issued, next},
		{"another agent_id", a.ID, store.CallFilter{AgentID: "agent-2"}, next},
		{"no agent_id", a.ID, store.CallFilter{}, next},
		{"a since", a.ID, store.CallFilter{AgentID: "agent-1", Since: Start}, next},
		{"not base64", a.ID, issued, "%%%"},
		{"another list's cursor", a.ID, issued, catalogCursor("turns:" + callID(1))},
	} {
		_, _, err := s.ProductionCalls(ctx, tc.tenant, tc.f, store.Page{Limit: 1, Cursor: tc.cursor})
		if !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("%s: error = %v, want ErrInvalidCursor", tc.name, err)
		}
	}
}

// testTenantBlob: a tenant references the blobs it uploaded (or a run
// record listed) and its fixture revisions' contents; a digest only
// another tenant references is ErrNotFound.
func testTenantBlob(t *testing.T, open Opener) {
	s := open(t, nil)
	ctx := t.Context()
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	traj, fix, both := fixtureSum("trajectory"), fixtureSum("fixture"), fixtureSum("both")
	if _, err := s.PutBlobRef(ctx, a.ID, traj, 10); err != nil {
		t.Fatal(err)
	}
	mustPutFixture(t, s, a.ID, "data.csv", "fixture")
	mustPutFixture(t, s, a.ID, "again.csv", "fixture") // one content under two names
	if _, err := s.PutBlobRef(ctx, a.ID, both, 4); err != nil {
		t.Fatal(err)
	}
	mustPutFixture(t, s, a.ID, "both.bin", "both")
	cases := []struct {
		name   string
		tenant string
		sha    string
		want   store.TenantBlob
		err    error
	}{
		{"uploaded", a.ID, traj, store.TenantBlob{SHA256: traj, Kind: store.BlobUploaded, Size: 10}, nil},
		{"fixture content", a.ID, fix, store.TenantBlob{SHA256: fix, Kind: store.BlobFixture, Size: 7}, nil},
		{"uploaded wins over a fixture", a.ID, both, store.TenantBlob{SHA256: both, Kind: store.BlobUploaded, Size: 4}, nil},
		{"another tenant's upload", b.ID, traj, store.TenantBlob{}, store.ErrNotFound},
		{"another tenant's fixture", b.ID, fix, store.TenantBlob{}, store.ErrNotFound},
		{"never stored", a.ID, fixtureSum("nothing"), store.TenantBlob{}, store.ErrNotFound},
	}
	for _, tc := range cases {
		got, err := s.TenantBlob(ctx, tc.tenant, tc.sha)
		if tc.err != nil {
			wantErr(t, tc.name, err, tc.err)
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: TenantBlob = %+v %v, want %+v", tc.name, got, err, tc.want)
		}
	}
}
