package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

// A promotion's cases are held out of dataset exports (SPEC §9, §10): a
// dataset records, at creation, which of its members' tasks share a case
// with a task of a promotion batch of the same tenant and agent.
func runHoldout(t *testing.T, open Opener) {
	t.Run("HeldOutTasksByRule", func(t *testing.T) { t.Parallel(); testHeldOutTasksByRule(t, open) })
	t.Run("HoldoutIsFrozenAtCreation", func(t *testing.T) { t.Parallel(); testHoldoutFrozenAtCreation(t, open) })
	t.Run("HoldoutRecordedWhateverTheFilters", func(t *testing.T) { t.Parallel(); testHoldoutWhateverTheFilters(t, open) })
}

// holdoutFixture is agent-1's submitted rollouts of five tasks, each in
// one batch of its own kind:
//
//	gate[c0], gate[c1]  suite "gate", cases c0 and c1
//	other[c0]           suite "other", case c0 (the same case id)
//	turnA, turnB        tasks made from agent-1's turns turn-a and turn-b
//
// and agent-2's submitted rollout of another task of other[c0].
type holdoutFixture struct {
	*rolloutFixture
	gate, other            store.SuiteVersion
	gate0, gate1, other0   string
	turnA, turnB, agent2Of string
	claims                 int
}

func newHoldoutFixture(t *testing.T, open Opener) *holdoutFixture {
	t.Helper()
	clk := clock.NewFake(Start)
	s := open(t, clk)
	f := &holdoutFixture{rolloutFixture: &rolloutFixture{s: s, clk: clk, tenant: mustTenant(t, s, "acme")}}
	ctx := t.Context()
	for _, name := range []string{"p1", "p2"} {
		if _, _, err := f.s.CreatePolicy(ctx, newPolicy(f.tenant.ID, name, `{"name":"`+name+`"}`)); err != nil {
			t.Fatalf("CreatePolicy: %v", err)
		}
	}
	f.gate, _ = mustPutSuite(t, f.s, newSuiteVersion(t, f.tenant.ID, "gate", "", 2))
	f.other, _ = mustPutSuite(t, f.s, newSuiteVersion(t, f.tenant.ID, "other", "", 1))
	gate := f.suiteTasks(t, f.gate, 2)
	f.gate0, f.gate1 = gate[0], gate[1]
	f.other0 = f.suiteTasks(t, f.other, 1)[0]
	putConversationTurn(t, f.s, f.tenant.ID, "agent-1", "turn-a", "", textOf("refund order 7"))
	putConversationTurn(t, f.s, f.tenant.ID, "agent-1", "turn-b", "", textOf("refund order 8"))
	turns := f.turnTasks(t, "turn-a", "turn-b")
	f.turnA, f.turnB = turns[0], turns[1]
	f.batch(t, store.NewBatch{TaskIDs: []string{f.gate0, f.gate1, f.other0, f.turnA, f.turnB}})
	f.submitAll(t, "agent-1")
	f.agent2Of = f.suiteTasks(t, f.other, 1)[0]
	f.batch(t, store.NewBatch{AgentID: "agent-2", TaskIDs: []string{f.agent2Of}})
	f.submitAll(t, "agent-2")
	return f
}

func (f *holdoutFixture) suiteTasks(t *testing.T, sv store.SuiteVersion, n int) []string {
	t.Helper()
	tasks, err := f.s.CreateSuiteTasks(t.Context(), suiteTasks(f.tenant.ID, sv, n))
	if err != nil {
		t.Fatalf("CreateSuiteTasks: %v", err)
	}
	ids := make([]string, len(tasks))
	for i, tk := range tasks {
		ids[i] = tk.ID
	}
	return ids
}

// turnTasks makes a new task of each of agent-1's turns (a second call
// makes new task ids for the same turns).
func (f *holdoutFixture) turnTasks(t *testing.T, turnIDs ...string) []string {
	t.Helper()
	tasks, err := f.s.CreateTurnTasks(t.Context(), store.TurnTasks{TenantID: f.tenant.ID, AgentID: "agent-1",
		TurnIDs: turnIDs, Graders: json.RawMessage(`[{"contains":"refund"}]`)})
	if err != nil {
		t.Fatalf("CreateTurnTasks: %v", err)
	}
	ids := make([]string, len(tasks))
	for i, tk := range tasks {
		ids[i] = tk.ID
	}
	return ids
}

// submitAll claims and submits every queued rollout of agent.
func (f *holdoutFixture) submitAll(t *testing.T, agent string) {
	t.Helper()
	for {
		f.claims++
		seed := fmt.Sprintf("holdout-%d", f.claims)
		res := f.claim(t, agent, 1, time.Minute, seed)
		if len(res.Rollouts) == 0 {
			return
		}
		r := res.Rollouts[0].Rollout
		if _, err := f.submit(t, r, secretsN(seed, 1)[0].LeaseToken, `{"final_text":"refund"}`, nil); err != nil {
			t.Fatalf("submit: %v", err)
		}
		f.clk.Advance(time.Second)
	}
}

// promote starts a promotion of p2 against p1 for agent over a suite's
// cases (new tasks) or the given tasks, and ends it failed: a promotion
// holds its cases out whatever became of it, and the next one of the
// agent may start.
func (f *holdoutFixture) promote(t *testing.T, agent string, suite *store.SuiteVersion, n int, taskIDs ...string) store.Promotion {
	t.Helper()
	np := store.NewPromotion{ID: uuid.Must(uuid.NewV7()).String(), TenantID: f.tenant.ID, AgentID: agent,
		Candidate: "p2", Baseline: "p1", TaskIDs: taskIDs, Repetitions: 2, MinDelta: 0.02, MaxExcludedRate: 0.05,
		DeadlineS: 3600, Seed: 7, CreatedBy: "key k", BatchDeadlineS: 600, MaxAttempts: 2, RetryOn: gyre.DefaultRetryOn}
	if suite != nil {
		st := suiteTasks(f.tenant.ID, *suite, n)
		np.SuiteTasks, np.TaskIDs = &st, nil
	}
	p, err := f.s.CreatePromotion(t.Context(), np)
	if err != nil {
		t.Fatalf("CreatePromotion: %v", err)
	}
	if _, err := f.s.EndPromotion(t.Context(), f.tenant.ID, p.ID, store.PromotionEnd{State: promotion.StateFailed,
		Reasons: []string{"cancelled"}}); err != nil {
		t.Fatalf("EndPromotion: %v", err)
	}
	return p
}

// datasetOf creates a dataset of agent with filters and returns it with
// its members' task ids.
func (f *holdoutFixture) datasetOf(t *testing.T, agent, filters string) (store.Dataset, []string) {
	t.Helper()
	d := f.dataset(t, store.NewDataset{AgentID: agent, Filters: json.RawMessage(filters)})
	var tasks []string
	for _, m := range f.allMembers(t, d.ID) {
		tasks = append(tasks, m.TaskID)
	}
	return d, tasks
}

func sortedIDs(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// Each rule of the holdout, checked on one dataset of each agent created
// after agent-1's promotions over suite "gate" and over a new task of
// turn-a, and agent-2's over a new task of other[c0]. Every batch makes
// its own task ids, so none of the exported rollouts ran a promotion's
// own task: the cases are matched, not the ids. Held-out rollouts stay
// members (the manifest counts them under held_out).
func testHeldOutTasksByRule(t *testing.T, open Opener) {
	f := newHoldoutFixture(t, open)
	suiteGate := f.promote(t, "agent-1", &f.gate, 2)
	turnGate := f.promote(t, "agent-1", nil, 0, f.turnTasks(t, "turn-a")...)
	other := f.promote(t, "agent-2", nil, 0, f.suiteTasks(t, f.other, 1)...)
	for _, p := range []store.Promotion{suiteGate, turnGate, other} {
		for _, id := range p.TaskIDs {
			if slices.Contains([]string{f.gate0, f.gate1, f.other0, f.turnA, f.turnB, f.agent2Of}, id) {
				t.Fatalf("promotion %s runs task %s of an exported rollout: the test would not show matching by case", p.ID, id)
			}
		}
	}
	d1, members1 := f.datasetOf(t, "agent-1", `{}`)
	d2, _ := f.datasetOf(t, "agent-2", `{}`)
	if d1.Members != 5 || d2.Members != 1 {
		t.Fatalf("members: agent-1 %d (%v), agent-2 %d; want 5 and 1: held-out rollouts stay members", d1.Members, members1, d2.Members)
	}
	for _, tc := range []struct {
		rule    string
		ds      store.Dataset
		task    string
		heldOut bool
	}{
		{"a case of the promotion's suite is held out though its batch made another task id", d1, f.gate0, true},
		{"every case of the promotion's suite is held out", d1, f.gate1, true},
		{"a task made from a turn a promotion ran is held out by its source turn", d1, f.turnA, true},
		{"a task of a turn no promotion ran is not held out", d1, f.turnB, false},
		{"another suite's case with the same case id is not held out", d1, f.other0, false},
		{"another agent's promotion over a case does not hold out this agent's rollouts of it", d1, f.other0, false},
		{"another agent's promotion over a case holds out that agent's rollouts", d2, f.agent2Of, true},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			if got := slices.Contains(tc.ds.HoldoutTaskIDs, tc.task); got != tc.heldOut {
				t.Errorf("task %s held out = %v, want %v (holdout %v)", tc.task, got, tc.heldOut, tc.ds.HoldoutTaskIDs)
			}
		})
	}
	want := map[string][]string{d1.ID: sortedIDs(f.gate0, f.gate1, f.turnA), d2.ID: {f.agent2Of}}
	for _, d := range []store.Dataset{d1, d2} {
		got, err := f.s.GetDataset(t.Context(), f.tenant.ID, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want[d.ID], got.HoldoutTaskIDs); diff != "" {
			t.Errorf("stored holdout of %s's dataset (-want +got):\n%s", d.AgentID, diff)
		}
	}

	// A promotion's own rollouts, once submitted, are held out too.
	promo := f.submitPromotionRollout(t, suiteGate)
	d3, _ := f.datasetOf(t, "agent-1", `{}`)
	if !slices.Contains(d3.HoldoutTaskIDs, promo) || len(d3.HoldoutTaskIDs) != 4 {
		t.Errorf("holdout %v, want the promotion's own task %s besides the three held out before", d3.HoldoutTaskIDs, promo)
	}
}

// submitPromotionRollout runs one task of p's in a new batch of its agent
// and submits it, returning the task id.
func (f *holdoutFixture) submitPromotionRollout(t *testing.T, p store.Promotion) string {
	t.Helper()
	f.batch(t, store.NewBatch{AgentID: p.AgentID, TaskIDs: p.TaskIDs[:1]})
	f.submitAll(t, p.AgentID)
	return p.TaskIDs[0]
}

// A dataset created before a promotion keeps the holdout (none) and the
// members it was created with: the holdout is decided with the members,
// in the same transaction, and never again.
func testHoldoutFrozenAtCreation(t *testing.T, open Opener) {
	f := newHoldoutFixture(t, open)
	before, _ := f.datasetOf(t, "agent-1", `{}`)
	members := f.allMembers(t, before.ID)
	if len(before.HoldoutTaskIDs) != 0 || before.HoldoutTaskIDs == nil {
		t.Fatalf("holdout before any promotion = %#v, want []", before.HoldoutTaskIDs)
	}
	f.promote(t, "agent-1", &f.gate, 2)
	got, err := f.s.GetDataset(t.Context(), f.tenant.ID, before.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.HoldoutTaskIDs) != 0 || got.Members != before.Members {
		t.Errorf("after a promotion the earlier dataset holds out %v with %d members, want none of %d",
			got.HoldoutTaskIDs, got.Members, before.Members)
	}
	if diff := cmp.Diff(members, f.allMembers(t, before.ID), jsonEqual()); diff != "" {
		t.Errorf("members changed after a promotion (-before +after):\n%s", diff)
	}
	after, _ := f.datasetOf(t, "agent-1", `{}`)
	if diff := cmp.Diff(sortedIDs(f.gate0, f.gate1), after.HoldoutTaskIDs); diff != "" {
		t.Errorf("a dataset created after the promotion holds out (-want +got):\n%s", diff)
	}
}

// The store records the held-out tasks whatever the filters say:
// include_holdout decides whether the build exports their rollouts, and
// the manifest lists them either way.
func testHoldoutWhateverTheFilters(t *testing.T, open Opener) {
	f := newHoldoutFixture(t, open)
	f.promote(t, "agent-1", &f.gate, 2)
	d, _ := f.datasetOf(t, "agent-1", `{"include_holdout":true}`)
	if diff := cmp.Diff(sortedIDs(f.gate0, f.gate1), d.HoldoutTaskIDs); diff != "" {
		t.Errorf("holdout with include_holdout (-want +got):\n%s", diff)
	}
	// A selection that leaves the held-out rollouts out lists none.
	b, _ := f.batch(t, store.NewBatch{TaskIDs: []string{f.turnB}})
	f.submitAll(t, "agent-1")
	only, _ := f.datasetOf(t, "agent-1", `{}`)
	byBatch := f.dataset(t, store.NewDataset{Filters: json.RawMessage(`{}`), BatchIDs: []string{b.ID}})
	if len(byBatch.HoldoutTaskIDs) != 0 || byBatch.Members != 1 || len(only.HoldoutTaskIDs) != 2 {
		t.Errorf("holdout of a selection of batch %s = %v (%d members), of everything %v", b.ID, byBatch.HoldoutTaskIDs,
			byBatch.Members, only.HoldoutTaskIDs)
	}
}
