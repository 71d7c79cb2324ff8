package storetest

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

// runTurnTasks runs the conformance tests of selecting production turns
// by filter and making tasks of them once (POST /api/v1/tasks/from-turns).
func runTurnTasks(t *testing.T, open Opener) {
	t.Run("TurnSelectionFilters", func(t *testing.T) { t.Parallel(); testTurnSelectionFilters(t, open) })
	t.Run("TurnTasksSkipExisting", func(t *testing.T) { t.Parallel(); testTurnTasksSkipExisting(t, open) })
	t.Run("ConcurrentTurnTasksSkipExisting", func(t *testing.T) { t.Parallel(); testConcurrentTurnTasksSkipExisting(t, open) })
}

// putConversationTurn stores one production turn of agentID in a
// conversation ("" for none), with input_text (nil for null).
func putConversationTurn(t *testing.T, s store.Store, tenantID, agentID, turnID, conversation string, input *string) {
	t.Helper()
	m := map[string]any{
		"turn_id": turnID, "input_text": input, "final_text": "done",
		"tool_calls": nil, "tool_calls_omitted_count": 0,
	}
	if conversation != "" {
		m["conversation_id"] = conversation
	}
	body, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	h, err := jcs.Hash(body)
	if err != nil {
		t.Fatal(err)
	}
	nt := store.NewTurn{TurnID: turnID, ConversationID: conversation, Body: body, SHA256: h}
	if _, err := s.InsertTurns(t.Context(), tenantID, agentID, []store.NewTurn{nt}); err != nil {
		t.Fatalf("InsertTurns: %v", err)
	}
}

// turnRefs collects what EachTurnRef selects.
func turnRefs(t *testing.T, s store.Store, sel store.TurnSelection) []store.TurnRef {
	t.Helper()
	var out []store.TurnRef
	if err := s.EachTurnRef(t.Context(), sel, func(r store.TurnRef) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatalf("EachTurnRef(%+v): %v", sel, err)
	}
	return out
}

func testTurnSelectionFilters(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")
	t0 := us(clk.Now()) // the store keeps microseconds
	putConversationTurn(t, s, tn.ID, "bot", "c1", "conv-a", textOf("one"))
	putConversationTurn(t, s, tn.ID, "other-bot", "x1", "conv-a", textOf("theirs"))
	putConversationTurn(t, s, other.ID, "bot", "f1", "conv-a", textOf("foreign"))
	clk.Advance(time.Minute)
	putConversationTurn(t, s, tn.ID, "bot", "c2", "conv-b", nil)
	clk.Advance(time.Minute)
	putConversationTurn(t, s, tn.ID, "bot", "c3", "conv-a", textOf(""))
	putConversationTurn(t, s, tn.ID, "bot", "c4", "", textOf("no conversation"))
	// A turn holding U+0000 (sent as \u0000) is selected like any other.
	putConversationTurn(t, s, tn.ID, "bot", "c5", "conv-nul", textOf("nul\x00inside"))
	putConversationTurn(t, s, tn.ID, "bot", "c6", "conv-nul", textOf(`a backslash, then u0000: \u0000`))
	if _, err := s.CreateTurnTasks(ctx, store.TurnTasks{TenantID: tn.ID, AgentID: "bot", TurnIDs: []string{"c1"}, Graders: json.RawMessage(`[]`)}); err != nil {
		t.Fatal(err)
	}

	c1 := store.TurnRef{TurnID: "c1", HasInput: true, HasTask: true}
	c2 := store.TurnRef{TurnID: "c2"} // input_text null
	c3 := store.TurnRef{TurnID: "c3", HasInput: true}
	c4 := store.TurnRef{TurnID: "c4", HasInput: true}
	c5 := store.TurnRef{TurnID: "c5", HasInput: true}
	c6 := store.TurnRef{TurnID: "c6", HasInput: true}
	for _, tc := range []struct {
		name string
		sel  store.TurnSelection
		want []store.TurnRef
	}{
		{"every turn of the agent, in order of receipt", store.TurnSelection{}, []store.TurnRef{c1, c2, c3, c4, c5, c6}},
		{"conversation keeps only its turns", store.TurnSelection{ConversationID: "conv-a"}, []store.TurnRef{c1, c3}},
		{"since is inclusive", store.TurnSelection{Since: t0.Add(time.Minute)}, []store.TurnRef{c2, c3, c4, c5, c6}},
		{"turns holding U+0000 or an escaped backslash before u0000", store.TurnSelection{ConversationID: "conv-nul"}, []store.TurnRef{c5, c6}},
		{"until is exclusive", store.TurnSelection{Until: t0.Add(2 * time.Minute)}, []store.TurnRef{c1, c2}},
		{"since and until make a window", store.TurnSelection{Since: t0.Add(time.Second), Until: t0.Add(2 * time.Minute)}, []store.TurnRef{c2}},
		{"an empty window selects nothing", store.TurnSelection{Since: t0.Add(time.Hour)}, nil},
		{"an unknown conversation selects nothing", store.TurnSelection{ConversationID: "nope"}, nil},
	} {
		sel := tc.sel
		sel.TenantID, sel.AgentID = tn.ID, "bot"
		if diff := cmp.Diff(tc.want, turnRefs(t, s, sel)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	if got := turnRefs(t, s, store.TurnSelection{TenantID: tn.ID, AgentID: "ghost"}); len(got) != 0 {
		t.Errorf("an unknown agent selected %v, want nothing", got)
	}

	stop := errors.New("stop")
	calls := 0
	err := s.EachTurnRef(ctx, store.TurnSelection{TenantID: tn.ID, AgentID: "bot"}, func(store.TurnRef) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("EachTurnRef with a failing fn = %v after %d calls, want the fn's error after 1", err, calls)
	}
}

func testTurnTasksSkipExisting(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	putCatalogTurns(t, s, tn.ID, "bot", []string{"a", "b", "c"}, map[string]*string{"a": textOf("A"), "b": textOf("B"), "c": textOf("C")})
	graders := json.RawMessage(`[]`)
	req := func(skip bool, ids ...string) store.TurnTasks {
		return store.TurnTasks{TenantID: tn.ID, AgentID: "bot", TurnIDs: ids, Graders: graders, SkipExisting: skip}
	}
	caseIDs := func(tasks []store.Task) []string {
		out := []string{}
		for _, k := range tasks {
			out = append(out, k.CaseID)
		}
		return out
	}
	steps := []struct {
		name string
		req  store.TurnTasks
		want []string
	}{
		{"a first call makes every task", req(true, "b"), []string{"b"}},
		{"a turn with a task is skipped, the others made in order", req(true, "c", "b", "a"), []string{"c", "a"}},
		{"nothing left to make is an empty result", req(true, "a", "b", "c"), []string{}},
		{"without skip_existing a turn gets another task", req(false, "a"), []string{"a"}},
	}
	for _, st := range steps {
		got, err := s.CreateTurnTasks(ctx, st.req)
		if err != nil {
			t.Fatalf("%s: CreateTurnTasks: %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, caseIDs(got)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
	}
	// An unknown turn still fails the call, skip_existing or not.
	_, err := s.CreateTurnTasks(ctx, req(true, "a", "never"))
	var re *store.TurnRefError
	if !errors.As(err, &re) || re.Index != 1 || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an unknown turn with skip_existing: %v, want a TurnRefError at 1 wrapping ErrNotFound", err)
	}
	all, _, err := s.ListTasks(ctx, tn.ID, store.TaskFilter{}, store.Page{Limit: 100})
	if err != nil || len(all) != 4 {
		t.Errorf("ListTasks = %d tasks, %v; want 4", len(all), err)
	}
}

func testConcurrentTurnTasksSkipExisting(t *testing.T, open Opener) {
	s := open(t, clock.Real{})
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	ids := []string{"t1", "t2", "t3", "t4", "t5", "t6"}
	inputs := map[string]*string{}
	for _, id := range ids {
		inputs[id] = textOf("q " + id)
	}
	putCatalogTurns(t, s, tn.ID, "bot", ids, inputs)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			// Each caller lists the turns in its own order.
			mine := append(append([]string{}, ids[i%len(ids):]...), ids[:i%len(ids)]...)
			_, err := s.CreateTurnTasks(ctx, store.TurnTasks{TenantID: tn.ID, AgentID: "bot", TurnIDs: mine, Graders: json.RawMessage(`[]`), SkipExisting: true})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("CreateTurnTasks: %v", err)
		}
	}
	all, _, err := s.ListTasks(ctx, tn.ID, store.TaskFilter{}, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, k := range all {
		per[k.SourceTurnID]++
	}
	for _, id := range ids {
		if per[id] != 1 {
			t.Errorf("turn %s has %d tasks after concurrent calls skipping existing ones, want exactly 1", id, per[id])
		}
	}
}
