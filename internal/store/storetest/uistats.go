package storetest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/store"
)

// The web UI's bounded summaries.
func runUIStats(t *testing.T, open Opener) {
	t.Run("AgentCallsReadsTheNewestCallsOfTheWindow", func(t *testing.T) { t.Parallel(); testAgentCalls(t, open) })
	t.Run("BatchExclusionsCountLikeTheAgentSummary", func(t *testing.T) { t.Parallel(); testBatchExclusions(t, open) })
	t.Run("AgentsSeenListsAgentsWithoutCounting", func(t *testing.T) { t.Parallel(); testAgentsSeen(t, open) })
}

func testBatchExclusions(t *testing.T, open Opener) {
	f := newFilterFixture(t, open)
	got, err := f.s.BatchExclusions(t.Context(), f.tenant.ID, []string{f.batch.ID})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"capacity": 1, "state:cancelled": 1}
	if !maps.Equal(got, want) {
		t.Errorf("BatchExclusions = %v, want %v", got, want)
	}
	agents, err := f.s.ListAgents(t.Context(), f.tenant.ID)
	if err != nil || len(agents) != 1 || !maps.Equal(agents[0].Exclusions, got) {
		t.Errorf("ListAgents exclusions = %+v (%v), want the same counts %v", agents, err, got)
	}
	other := mustTenant(t, f.s, "other")
	if got, err := f.s.BatchExclusions(t.Context(), other.ID, []string{f.batch.ID}); err != nil || len(got) != 0 {
		t.Errorf("another tenant's batch: %v, %v; want nothing", got, err)
	}
	if got, err := f.s.BatchExclusions(t.Context(), f.tenant.ID, nil); err != nil || got == nil || len(got) != 0 {
		t.Errorf("no batch: %v, %v; want an empty map", got, err)
	}
}

func testAgentsSeen(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	f.batch(t, store.NewBatch{AgentID: "zeta"})
	f.clk.Advance(time.Second)
	f.batch(t, store.NewBatch{AgentID: "alpha"})
	got, err := f.s.AgentsSeen(t.Context(), f.tenant.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].AgentID != "alpha" || got[1].AgentID != "zeta" || !got[1].FirstSeenAt.Before(got[0].FirstSeenAt) {
		t.Errorf("AgentsSeen = %+v, want alpha then zeta, zeta seen first", got)
	}
	if got, err := f.s.AgentsSeen(t.Context(), f.tenant.ID, 1); err != nil || len(got) != 1 || got[0].AgentID != "alpha" {
		t.Errorf("AgentsSeen(limit 1) = %+v, %v", got, err)
	}
	other := mustTenant(t, f.s, "other")
	if got, err := f.s.AgentsSeen(t.Context(), other.ID, 10); err != nil || got == nil || len(got) != 0 {
		t.Errorf("another tenant: %+v, %v; want an empty list", got, err)
	}
}

func testAgentCalls(t *testing.T, open Opener) {
	f := newRolloutFixture(t, open, 1)
	ctx := t.Context()
	f.batch(t, store.NewBatch{})
	r, _ := f.claimOne(t, "ac")
	// Calls received 0..5 minutes after Start, each taking (i+1)·100 ms;
	// the third failed and the fourth never finished.
	var recs []store.GatewayRecord
	for i := range 6 {
		rollout := ""
		if i%2 == 0 {
			rollout = r.ID // rollout calls and production calls count alike
		}
		rec := gwRecord(fmt.Sprintf("0190b7a0-0000-7000-8000-0000000000%02d", i), f.tenant.ID, rollout, i != 2)
		rec.ReceivedAt = us(Start.Add(time.Duration(i) * time.Minute))
		if i != 3 {
			done := rec.ReceivedAt.Add(time.Duration(i+1) * 100 * time.Millisecond)
			rec.DoneAt = &done
		}
		recs = append(recs, rec)
	}
	other := gwRecord("0190b7a0-0000-7000-8000-000000000099", f.tenant.ID, "", true)
	other.AgentID = "agent-2"
	if err := f.s.RecordGateway(ctx, store.GatewayFlush{ReplicaID: "replica-a", Records: append(recs, other)}); err != nil {
		t.Fatal(err)
	}
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		since time.Time
		limit int
		want  store.AgentCalls
	}{
		{"the whole window", Start, 10, store.AgentCalls{Calls: 6, Failed: 1, Latencies: ms(100, 200, 300, 500, 600)}},
		{"a window that starts later", Start.Add(2 * time.Minute), 10, store.AgentCalls{Calls: 4, Failed: 1, Latencies: ms(300, 500, 600)}},
		{"the newest calls up to the limit", Start, 2, store.AgentCalls{Calls: 2, Latencies: ms(500, 600), Truncated: true}},
		{"a limit the window fits exactly", Start, 6, store.AgentCalls{Calls: 6, Failed: 1, Latencies: ms(100, 200, 300, 500, 600)}},
	} {
		got, err := f.s.AgentCalls(ctx, f.tenant.ID, "agent-1", tc.since, tc.limit)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.Calls != tc.want.Calls || got.Failed != tc.want.Failed || got.Truncated != tc.want.Truncated || !slices.Equal(got.Latencies, tc.want.Latencies) {
			t.Errorf("%s: AgentCalls = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	other2 := mustTenant(t, f.s, "other")
	if got, err := f.s.AgentCalls(ctx, other2.ID, "agent-1", Start, 10); err != nil || got.Calls != 0 {
		t.Errorf("another tenant: %+v, %v; want no calls", got, err)
	}
}
