package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

// runTurns runs the conformance tests of the store's turns.
func runTurns(t *testing.T, open Opener) {
	t.Run("Insert", func(t *testing.T) { t.Parallel(); testInsertTurns(t, open) })
	t.Run("Duplicate", func(t *testing.T) { t.Parallel(); testTurnDuplicate(t, open) })
	t.Run("Conflict", func(t *testing.T) { t.Parallel(); testTurnConflict(t, open) })
	t.Run("RepeatsInBatch", func(t *testing.T) { t.Parallel(); testTurnRepeatsInBatch(t, open) })
	t.Run("Identity", func(t *testing.T) { t.Parallel(); testTurnIdentity(t, open) })
	t.Run("Rejects", func(t *testing.T) { t.Parallel(); testTurnRejects(t, open) })
	t.Run("ListFilters", func(t *testing.T) { t.Parallel(); testListTurnsFilters(t, open) })
	t.Run("ListPages", func(t *testing.T) { t.Parallel(); testListTurnsPages(t, open) })
	t.Run("ListBadCursor", func(t *testing.T) { t.Parallel(); testListTurnsBadCursor(t, open) })
	t.Run("ListCursorKeepsItsWindow", func(t *testing.T) { t.Parallel(); testListTurnsCursorKeepsItsWindow(t, open) })
	t.Run("ByID", func(t *testing.T) { t.Parallel(); testTurnsByID(t, open) })
	t.Run("Concurrent", func(t *testing.T) { t.Parallel(); testTurnsConcurrent(t, open) })
}

// turnBody is a minimal valid ProductionTurn with the given id; extra is
// spliced in as further members (`"conversation_id":"c"`).
func turnBody(id string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"turn_id":%q,"input_text":"hi","final_text":null,"tool_calls":[],"tool_calls_omitted_count":0`, id)
	for _, e := range extra {
		b.WriteString("," + e)
	}
	b.WriteString("}")
	return b.String()
}

// newTurn builds the store.NewTurn of body, as the API would: the members
// read from the body and the hash of its canonical form.
func newTurn(t *testing.T, id, body string) store.NewTurn {
	t.Helper()
	sum, err := jcs.Hash([]byte(body))
	if err != nil {
		t.Fatalf("hash %s: %v", body, err)
	}
	nt := store.NewTurn{TurnID: id, Body: []byte(body), SHA256: sum}
	for _, m := range []struct {
		name string
		dst  *string
	}{{"conversation_id", &nt.ConversationID}, {"task_id", &nt.TaskID}, {"occurred_at", &nt.OccurredAt}} {
		if _, v, ok := strings.Cut(body, `"`+m.name+`":"`); ok {
			*m.dst, _, _ = strings.Cut(v, `"`)
		}
	}
	return nt
}

// simpleTurn is newTurn of turnBody(id, extra...).
func simpleTurn(t *testing.T, id string, extra ...string) store.NewTurn {
	t.Helper()
	return newTurn(t, id, turnBody(id, extra...))
}

func mustInsertTurns(t *testing.T, s store.Store, tenantID, agentID string, turns ...store.NewTurn) store.TurnsResult {
	t.Helper()
	res, err := s.InsertTurns(t.Context(), tenantID, agentID, turns)
	if err != nil {
		t.Fatalf("InsertTurns(%s): %v", agentID, err)
	}
	return res
}

// allTurns lists every turn of the tenant matching f, following cursors.
func allTurns(t *testing.T, s store.Store, tenantID string, f store.TurnFilter) []store.Turn {
	t.Helper()
	var out []store.Turn
	p := store.Page{Limit: 500}
	for range 1000 {
		page, next, err := s.ListTurns(t.Context(), tenantID, f, p)
		if err != nil {
			t.Fatalf("ListTurns(%+v): %v", f, err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		p.Cursor = next
	}
	t.Fatal("ListTurns never ends")
	return nil
}

// storedTurn is what a stored NewTurn lists as.
func storedTurn(tenantID, agentID string, nt store.NewTurn, received time.Time) store.Turn {
	return store.Turn{
		TenantID: tenantID, AgentID: agentID, TurnID: nt.TurnID,
		ConversationID: nt.ConversationID, TaskID: nt.TaskID, OccurredAt: nt.OccurredAt,
		Body: nt.Body, SHA256: nt.SHA256, ReceivedAt: us(received),
	}
}

// cmpTurns compares bodies as bytes (nil and empty alike never occur).
var cmpTurns = cmp.Options{cmp.Comparer(func(a, b []byte) bool { return string(a) == string(b) })}

func wantTurns(t *testing.T, what string, want, got []store.Turn) {
	t.Helper()
	if len(want) == 0 && len(got) == 0 {
		return
	}
	if diff := cmp.Diff(want, got, cmpTurns); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

func testInsertTurns(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	tn := mustTenant(t, s, "acme")

	// Bodies are kept byte for byte: whitespace, member order, number
	// spelling, escapes, null and [] included.
	odd := `{ "final_text" : null, "turn_id":"t-2", "input_text": "caf\u00e9 \"q\" 😀",` + "\n" +
		`"tool_calls": null, "tool_calls_omitted_count": 1.0E0, "turn_index": 10e-1, "agent_fingerprint": {"b":1,"a":[]} }`
	turns := []store.NewTurn{
		simpleTurn(t, "t-1", `"conversation_id":"conv 1"`, `"task_id":"ticket/7"`, `"occurred_at":"1999-12-31T23:59:59.123+05:30"`),
		newTurn(t, "t-2", odd),
		simpleTurn(t, "café ü 7"),
	}
	res := mustInsertTurns(t, s, tn.ID, "support-bot", turns...)
	if res != (store.TurnsResult{Accepted: 3}) {
		t.Errorf("InsertTurns = %+v, want 3 accepted, 0 duplicates", res)
	}
	var want []store.Turn
	for _, nt := range turns {
		want = append(want, storedTurn(tn.ID, "support-bot", nt, Start))
	}
	got := allTurns(t, s, tn.ID, store.TurnFilter{})
	wantTurns(t, "ListTurns after one batch", want, got)
	for _, g := range got {
		if g.ReceivedAt.Location() != time.UTC {
			t.Errorf("ReceivedAt location = %v, want UTC", g.ReceivedAt.Location())
		}
	}

	// The store's clock, not the customer's occurred_at, stamps receipt.
	clk.Advance(time.Hour)
	later := simpleTurn(t, "t-3", `"occurred_at":"2001-01-01T00:00:00Z"`)
	mustInsertTurns(t, s, tn.ID, "support-bot", later)
	want = append(want, storedTurn(tn.ID, "support-bot", later, Start.Add(time.Hour)))
	wantTurns(t, "ListTurns after a second batch", want, allTurns(t, s, tn.ID, store.TurnFilter{}))
}

func testTurnDuplicate(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	tn := mustTenant(t, s, "acme")
	a, b := simpleTurn(t, "a"), simpleTurn(t, "b")
	mustInsertTurns(t, s, tn.ID, "bot", a, b)

	// Resending is not an error; the first receipt is kept.
	clk.Advance(time.Minute)
	c := simpleTurn(t, "c")
	if res := mustInsertTurns(t, s, tn.ID, "bot", b, c, a); res != (store.TurnsResult{Accepted: 1, Duplicates: 2}) {
		t.Errorf("resend with one new turn = %+v, want 1 accepted, 2 duplicates", res)
	}
	if res := mustInsertTurns(t, s, tn.ID, "bot", a, b, c); res != (store.TurnsResult{Duplicates: 3}) {
		t.Errorf("full resend = %+v, want 3 duplicates", res)
	}
	// A body with the same canonical hash but other bytes (member order,
	// spacing) is a duplicate too, and the stored bytes stay the first.
	respelled := newTurn(t, "a", `{"tool_calls_omitted_count":0, "tool_calls":[],"final_text":null,"input_text":"hi","turn_id":"a"}`)
	if respelled.SHA256 != a.SHA256 {
		t.Fatal("test bodies do not share a canonical form")
	}
	if res := mustInsertTurns(t, s, tn.ID, "bot", respelled); res != (store.TurnsResult{Duplicates: 1}) {
		t.Errorf("respelled resend = %+v, want 1 duplicate", res)
	}
	want := []store.Turn{
		storedTurn(tn.ID, "bot", a, Start), storedTurn(tn.ID, "bot", b, Start),
		storedTurn(tn.ID, "bot", c, Start.Add(time.Minute)),
	}
	wantTurns(t, "ListTurns after resends", want, allTurns(t, s, tn.ID, store.TurnFilter{}))
}

func wantConflict(t *testing.T, err error, index int, turnID string) {
	t.Helper()
	var ce *store.TurnConflictError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("error = %v, want a *TurnConflictError wrapping ErrConflict", err)
	}
	if ce.Index != index || ce.TurnID != turnID {
		t.Errorf("conflict at index %d (%q), want %d (%q)", ce.Index, ce.TurnID, index, turnID)
	}
}

func testTurnConflict(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	a, b := simpleTurn(t, "a"), simpleTurn(t, "b")
	mustInsertTurns(t, s, tn.ID, "bot", a, b)
	before := allTurns(t, s, tn.ID, store.TurnFilter{})

	changedA := simpleTurn(t, "a", `"task_id":"other"`)
	changedB := simpleTurn(t, "b", `"turn_index":1`)
	tests := []struct {
		name   string
		batch  []store.NewTurn
		index  int
		turnID string
	}{
		{"alone", []store.NewTurn{changedA}, 0, "a"},
		{"after new turns", []store.NewTurn{simpleTurn(t, "n1"), simpleTurn(t, "n2"), changedB}, 2, "b"},
		{"after a duplicate", []store.NewTurn{a, changedB}, 1, "b"},
		{"first of two", []store.NewTurn{simpleTurn(t, "n1"), changedB, changedA}, 1, "b"},
		{"first of two, ids in other order", []store.NewTurn{changedA, simpleTurn(t, "n1"), changedB}, 0, "a"},
	}
	for _, tc := range tests {
		clk.Advance(time.Second)
		_, err := s.InsertTurns(ctx, tn.ID, "bot", tc.batch)
		wantConflict(t, err, tc.index, tc.turnID)
		// Nothing of a refused batch is stored, not even its new turns.
		wantTurns(t, tc.name+": turns after a refused batch", before, allTurns(t, s, tn.ID, store.TurnFilter{}))
	}
	// The refused new turns can be sent afterwards.
	if res := mustInsertTurns(t, s, tn.ID, "bot", simpleTurn(t, "n1"), simpleTurn(t, "n2")); res.Accepted != 2 {
		t.Errorf("new turns after refused batches = %+v, want 2 accepted", res)
	}
}

func testTurnRepeatsInBatch(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	x := simpleTurn(t, "x")
	mustInsertTurns(t, s, tn.ID, "bot", x)

	a := simpleTurn(t, "a")
	a2 := simpleTurn(t, "a", `"turn_index":2`)
	xb := simpleTurn(t, "x", `"turn_index":3`)
	// Identical repeats are duplicates of the first occurrence.
	if res := mustInsertTurns(t, s, tn.ID, "bot", a, simpleTurn(t, "b"), a, a); res != (store.TurnsResult{Accepted: 2, Duplicates: 2}) {
		t.Errorf("batch with identical repeats = %+v, want 2 accepted, 2 duplicates", res)
	}
	if res := mustInsertTurns(t, s, tn.ID, "bot", simpleTurn(t, "c"), x, x); res != (store.TurnsResult{Accepted: 1, Duplicates: 2}) {
		t.Errorf("batch repeating a stored turn = %+v, want 1 accepted, 2 duplicates", res)
	}
	before := allTurns(t, s, tn.ID, store.TurnFilter{})

	tests := []struct {
		name   string
		batch  []store.NewTurn
		index  int
		turnID string
	}{
		// A differing repeat conflicts at the later occurrence.
		{"differing repeat of a new turn", []store.NewTurn{simpleTurn(t, "d"), simpleTurn(t, "e"), simpleTurn(t, "d", `"turn_index":1`)}, 2, "d"},
		{"differing repeat of a stored turn", []store.NewTurn{x, simpleTurn(t, "f"), xb}, 2, "x"},
		// A stored conflict earlier in the batch comes first...
		{"stored conflict first", []store.NewTurn{a2, simpleTurn(t, "g"), simpleTurn(t, "g", `"turn_index":1`)}, 0, "a"},
		// ...and an in-batch one earlier than a stored one.
		{"in-batch conflict first", []store.NewTurn{simpleTurn(t, "h"), simpleTurn(t, "h", `"turn_index":1`), a2}, 1, "h"},
		// A repeat equal to a conflicting first occurrence: the first
		// occurrence is the conflict.
		{"repeated conflict", []store.NewTurn{a2, a2}, 0, "a"},
	}
	for _, tc := range tests {
		_, err := s.InsertTurns(ctx, tn.ID, "bot", tc.batch)
		wantConflict(t, err, tc.index, tc.turnID)
		wantTurns(t, tc.name+": turns after a refused batch", before, allTurns(t, s, tn.ID, store.TurnFilter{}))
	}
}

func testTurnIdentity(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	a := mustTenant(t, s, "a")
	b := mustTenant(t, s, "b")
	t1 := simpleTurn(t, "t1")
	other := simpleTurn(t, "t1", `"task_id":"other body"`)
	mustInsertTurns(t, s, a.ID, "bot", t1)
	// The same turn id is another identity for another agent or tenant.
	if res := mustInsertTurns(t, s, a.ID, "bot-2", other); res.Accepted != 1 {
		t.Errorf("same turn id, other agent = %+v, want accepted", res)
	}
	if res := mustInsertTurns(t, s, b.ID, "bot", other); res.Accepted != 1 {
		t.Errorf("same turn id, other tenant = %+v, want accepted", res)
	}
	// Ids are exact: no case folding, trimming or normalisation.
	for _, id := range []string{"T1", "t1 ", "ｔ1"} {
		if res := mustInsertTurns(t, s, a.ID, "bot", simpleTurn(t, id, `"task_id":"x"`)); res.Accepted != 1 {
			t.Errorf("turn id %q = %+v, want a new turn", id, res)
		}
	}
	// Each tenant sees only its own turns.
	for tid, want := range map[string]int{a.ID: 5, b.ID: 1, uuid.Must(uuid.NewV7()).String(): 0, "": 0} {
		if got := allTurns(t, s, tid, store.TurnFilter{}); len(got) != want {
			t.Errorf("tenant %q lists %d turns, want %d", tid, len(got), want)
		}
		for _, g := range allTurns(t, s, tid, store.TurnFilter{}) {
			if g.TenantID != tid {
				t.Errorf("tenant %q lists a turn of tenant %q", tid, g.TenantID)
			}
		}
	}
	got, err := s.TurnsByID(ctx, b.ID, "bot", []string{"t1"})
	if err != nil || len(got) != 1 || string(got[0].Body) != string(other.Body) {
		t.Errorf("TurnsByID in tenant b = %+v, %v; want its own t1", got, err)
	}
}

func testTurnRejects(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	ok := simpleTurn(t, "ok")
	many := make([]store.NewTurn, store.MaxTurnsPerBatch+1)
	for i := range many {
		many[i] = simpleTurn(t, fmt.Sprint("m", i))
	}
	noHash := ok
	noHash.SHA256 = ""
	upperHash := ok
	upperHash.SHA256 = strings.ToUpper(ok.SHA256)
	noBody := ok
	noBody.Body = nil
	noID := ok
	noID.TurnID = ""
	tests := []struct {
		name     string
		tenant   string
		agent    string
		batch    []store.NewTurn
		notFound bool
	}{
		{"no turns", tn.ID, "bot", nil, false},
		{"too many turns", tn.ID, "bot", many, false},
		{"no agent", tn.ID, "", []store.NewTurn{ok}, false},
		{"no hash", tn.ID, "bot", []store.NewTurn{noHash}, false},
		{"uppercase hash", tn.ID, "bot", []store.NewTurn{upperHash}, false},
		{"no body", tn.ID, "bot", []store.NewTurn{noBody}, false},
		{"no turn id", tn.ID, "bot", []store.NewTurn{noID}, false},
		{"unknown tenant", uuid.Must(uuid.NewV7()).String(), "bot", []store.NewTurn{ok}, true},
	}
	for _, tc := range tests {
		_, err := s.InsertTurns(ctx, tc.tenant, tc.agent, tc.batch)
		switch {
		case err == nil:
			t.Errorf("%s: InsertTurns succeeded, want an error", tc.name)
		case errors.Is(err, store.ErrConflict):
			t.Errorf("%s: error = %v, want no conflict", tc.name, err)
		case tc.notFound != errors.Is(err, store.ErrNotFound):
			t.Errorf("%s: error = %v, want ErrNotFound %v", tc.name, err, tc.notFound)
		}
	}
	if got := allTurns(t, s, tn.ID, store.TurnFilter{}); len(got) != 0 {
		t.Errorf("refused batches stored %d turns", len(got))
	}
	// A batch of exactly the maximum is fine.
	if res := mustInsertTurns(t, s, tn.ID, "bot", many[:store.MaxTurnsPerBatch]...); res.Accepted != store.MaxTurnsPerBatch {
		t.Errorf("full batch = %+v", res)
	}
}

func testListTurnsFilters(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")

	type sent struct {
		agent string
		turn  store.NewTurn
		at    time.Time
	}
	var all []sent
	send := func(agent string, turns ...store.NewTurn) {
		mustInsertTurns(t, s, tn.ID, agent, turns...)
		mustInsertTurns(t, s, other.ID, agent, turns...) // noise in another tenant
		for _, nt := range turns {
			all = append(all, sent{agent, nt, clk.Now()})
		}
		clk.Advance(1500 * time.Nanosecond) // 1.5 µs: receipt times straddle microseconds
	}
	send("bot-a", simpleTurn(t, "1", `"conversation_id":"c1"`), simpleTurn(t, "2", `"conversation_id":"c2"`))
	send("bot-b", simpleTurn(t, "1", `"conversation_id":"c1"`), simpleTurn(t, "3"))
	send("bot-a", simpleTurn(t, "4", `"conversation_id":"c1"`), simpleTurn(t, "5", `"occurred_at":"2000-01-01T00:00:00Z"`))
	mid := clk.Now()
	send("bot-b", simpleTurn(t, "6", `"conversation_id":"C1"`))
	send("bot-a", simpleTurn(t, "7", `"conversation_id":"c1"`))

	filter := func(keep func(sent) bool) []store.Turn {
		var out []store.Turn
		for _, x := range all {
			if keep(x) {
				out = append(out, storedTurn(tn.ID, x.agent, x.turn, x.at))
			}
		}
		return out
	}
	third := us(all[4].at) // the first turn of the third batch, as listed
	since := func(at time.Time) func(sent) bool {
		return func(x sent) bool { return !us(x.at).Before(at) }
	}
	until := func(at time.Time) func(sent) bool {
		return func(x sent) bool { return us(x.at).Before(at) }
	}
	fourth := us(all[6].at) // the turn of the fourth batch, as listed
	tests := []struct {
		name string
		f    store.TurnFilter
		keep func(sent) bool
	}{
		{"none", store.TurnFilter{}, func(sent) bool { return true }},
		{"agent", store.TurnFilter{AgentID: "bot-a"}, func(x sent) bool { return x.agent == "bot-a" }},
		{"unknown agent", store.TurnFilter{AgentID: "bot"}, func(sent) bool { return false }},
		{"conversation", store.TurnFilter{ConversationID: "c1"}, func(x sent) bool { return x.turn.ConversationID == "c1" }},
		{"agent and conversation", store.TurnFilter{AgentID: "bot-a", ConversationID: "c1"}, func(x sent) bool {
			return x.agent == "bot-a" && x.turn.ConversationID == "c1"
		}},
		// Since is inclusive and compares with the stored (microsecond)
		// receipt time, exactly, whatever the precision it was given in.
		{"since a listed receipt time", store.TurnFilter{Since: third}, since(third)},
		{"since a nanosecond after it", store.TurnFilter{Since: third.Add(time.Nanosecond)}, since(third.Add(time.Nanosecond))},
		{"since a nanosecond before it", store.TurnFilter{Since: third.Add(-time.Nanosecond)}, since(third.Add(-time.Nanosecond))},
		{"since mid", store.TurnFilter{Since: mid}, since(mid)},
		{"since the future", store.TurnFilter{Since: clk.Now().Add(time.Hour)}, func(sent) bool { return false }},
		{"since long ago", store.TurnFilter{Since: time.Unix(0, 0)}, func(sent) bool { return true }},
		{"agent since", store.TurnFilter{AgentID: "bot-b", Since: third}, func(x sent) bool { return x.agent == "bot-b" && since(third)(x) }},
		// Until is exclusive, compared as exactly as Since.
		{"until a listed receipt time", store.TurnFilter{Until: third}, until(third)},
		{"until a nanosecond after it", store.TurnFilter{Until: third.Add(time.Nanosecond)}, until(third.Add(time.Nanosecond))},
		{"until a nanosecond before it", store.TurnFilter{Until: third.Add(-time.Nanosecond)}, until(third.Add(-time.Nanosecond))},
		{"until mid", store.TurnFilter{Until: mid}, until(mid)},
		{"until long ago", store.TurnFilter{Until: time.Unix(0, 0)}, func(sent) bool { return false }},
		{"until the future", store.TurnFilter{Until: clk.Now().Add(time.Hour)}, func(sent) bool { return true }},
		{"since until: one batch", store.TurnFilter{Since: third, Until: fourth}, func(x sent) bool { return since(third)(x) && until(fourth)(x) }},
		{"agent conversation since until", store.TurnFilter{AgentID: "bot-a", ConversationID: "c1", Since: third, Until: clk.Now().Add(time.Hour)},
			func(x sent) bool { return x.agent == "bot-a" && x.turn.ConversationID == "c1" && since(third)(x) }},
	}
	if n := len(filter(since(third.Add(time.Nanosecond)))); n == len(filter(since(third))) {
		t.Fatal("test times do not separate the batches")
	}
	if n := len(filter(until(third.Add(time.Nanosecond)))); n == len(filter(until(third))) {
		t.Fatal("test times do not separate the batches at the window's end")
	}
	for _, tc := range tests {
		want := filter(tc.keep)
		wantTurns(t, "ListTurns "+tc.name, want, allTurns(t, s, tn.ID, tc.f))
		// Page by page, the same turns in the same order.
		var paged []store.Turn
		p := store.Page{Limit: 2}
		for range 100 {
			page, next, err := s.ListTurns(t.Context(), tn.ID, tc.f, p)
			if err != nil {
				t.Fatalf("%s: ListTurns: %v", tc.name, err)
			}
			if len(page) > 2 || (next != "" && len(page) != 2) {
				t.Errorf("%s: page of %d with next %q", tc.name, len(page), next)
			}
			paged = append(paged, page...)
			if next == "" {
				break
			}
			p.Cursor = next
		}
		wantTurns(t, "ListTurns "+tc.name+" in pages of 2", want, paged)
	}
}

func testListTurnsPages(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	var want []store.Turn
	// Many turns share one receipt time (one batch): pages split batches.
	for b := range 5 {
		var batch []store.NewTurn
		for i := range 13 {
			batch = append(batch, simpleTurn(t, fmt.Sprintf("b%d-%02d", b, 12-i)))
		}
		mustInsertTurns(t, s, tn.ID, "bot", batch...)
		for _, nt := range batch {
			want = append(want, storedTurn(tn.ID, "bot", nt, clk.Now()))
		}
		clk.Advance(time.Millisecond)
	}
	for _, lim := range []int{1, 3, 13, 50, 65, 500, 0, -1, 501} {
		var got []store.Turn
		p := store.Page{Limit: lim}
		pageSize := lim
		switch {
		case lim <= 0:
			pageSize = 50
		case lim > 500:
			pageSize = 500
		}
		for range 200 {
			page, next, err := s.ListTurns(ctx, tn.ID, store.TurnFilter{}, p)
			if err != nil {
				t.Fatalf("limit %d: %v", lim, err)
			}
			if next != "" && len(page) != pageSize {
				t.Errorf("limit %d: a page before the last holds %d, want %d", lim, len(page), pageSize)
			}
			if next == "" && len(got)+len(page) != len(want) {
				t.Errorf("limit %d: last page leaves %d turns unlisted", lim, len(want)-len(got)-len(page))
			}
			got = append(got, page...)
			if next == "" {
				break
			}
			p.Cursor = next
		}
		wantTurns(t, fmt.Sprintf("limit %d", lim), want, got)
	}
	// An exact multiple ends without an empty trailing page.
	page, next, err := s.ListTurns(ctx, tn.ID, store.TurnFilter{}, store.Page{Limit: len(want)})
	if err != nil || len(page) != len(want) || next != "" {
		t.Errorf("one exact page = %d turns, next %q, %v; want %d and no cursor", len(page), next, err, len(want))
	}
	// An empty list.
	page, next, err = s.ListTurns(ctx, tn.ID, store.TurnFilter{AgentID: "nobody"}, store.Page{})
	if err != nil || len(page) != 0 || next != "" {
		t.Errorf("empty list = %v, %q, %v", page, next, err)
	}
}

func testListTurnsBadCursor(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	for i := range 3 {
		mustInsertTurns(t, s, tn.ID, "bot", simpleTurn(t, fmt.Sprint(i)))
	}
	_, good, err := s.ListTurns(ctx, tn.ID, store.TurnFilter{}, store.Page{Limit: 1})
	if err != nil || good == "" {
		t.Fatalf("first page: %q, %v", good, err)
	}
	// A key list's cursor is not a turn cursor.
	mustKey(t, s, store.NewKey{TenantID: tn.ID, Role: gyre.RoleReader, Hash: Hash("k1")})
	mustKey(t, s, store.NewKey{TenantID: tn.ID, Role: gyre.RoleReader, Hash: Hash("k2")})
	_, keyCursor, err := s.ListKeys(ctx, tn.ID, store.Page{Limit: 1})
	if err != nil || keyCursor == "" {
		t.Fatalf("key cursor: %q, %v", keyCursor, err)
	}
	for _, c := range []string{
		"not base64!",
		keyCursor,
		good + "A",
		good[:len(good)-2],
		"dHVybjox",              // "turn:1"
		"dHVybjoxOjI6Mw",        // "turn:1:2:3"
		"dHVybjp4OjE",           // "turn:x:1"
		"dHVybjoxOi0x",          // "turn:1:-1"
		"dHVybjowMToy",          // "turn:01:2", not canonical
		"a2V5OjE6Mg",            // "key:1:2"
		strings.Repeat("A", 40), // junk
	} {
		if _, _, err := s.ListTurns(ctx, tn.ID, store.TurnFilter{}, store.Page{Cursor: c}); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("ListTurns(cursor %q) error = %v, want ErrInvalidCursor", c, err)
		}
	}
}

// A cursor pages the window it was cut under: the same list with another
// end, or with none, refuses it, so a page never mixes two windows.
func testListTurnsCursorKeepsItsWindow(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	for i := range 3 {
		mustInsertTurns(t, s, tn.ID, "bot", simpleTurn(t, fmt.Sprint(i)))
		clk.Advance(time.Second)
	}
	end := Start.Add(1500 * time.Millisecond) // between the second and the third turn
	_, next, err := s.ListTurns(ctx, tn.ID, store.TurnFilter{Until: end}, store.Page{Limit: 1})
	if err != nil || next == "" {
		t.Fatalf("first page: %q, %v", next, err)
	}
	page, last, err := s.ListTurns(ctx, tn.ID, store.TurnFilter{Until: end}, store.Page{Limit: 1, Cursor: next})
	if err != nil || len(page) != 1 || page[0].TurnID != "1" || last != "" {
		t.Fatalf("second page under the same window: %+v, next %q, %v; want turn 1 and the end", page, last, err)
	}
	for name, f := range map[string]store.TurnFilter{
		"no end":      {},
		"another end": {Until: end.Add(time.Second)},
	} {
		if _, _, err := s.ListTurns(ctx, tn.ID, f, store.Page{Limit: 1, Cursor: next}); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("%s: error = %v, want ErrInvalidCursor", name, err)
		}
	}
}

func testTurnsByID(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	other := mustTenant(t, s, "other")
	var batch []store.NewTurn
	for i := range 40 {
		batch = append(batch, simpleTurn(t, fmt.Sprintf("t%02d", i), `"task_id":"case-1"`))
	}
	mustInsertTurns(t, s, tn.ID, "bot", batch[:20]...)
	clk.Advance(time.Second)
	mustInsertTurns(t, s, tn.ID, "bot", batch[20:]...)
	mustInsertTurns(t, s, tn.ID, "bot-2", simpleTurn(t, "only-bot-2"))
	mustInsertTurns(t, s, other.ID, "bot", simpleTurn(t, "only-other"))

	at := func(i int) time.Time {
		if i < 20 {
			return Start
		}
		return Start.Add(time.Second)
	}
	ids := []string{"t31", "t02", "missing", "t31", "only-bot-2", "only-other", "t19", "t20"}
	var want []store.Turn
	for _, i := range []int{31, 2, 19, 20} {
		want = append(want, storedTurn(tn.ID, "bot", batch[i], at(i)))
	}
	got, err := s.TurnsByID(ctx, tn.ID, "bot", ids)
	if err != nil {
		t.Fatalf("TurnsByID: %v", err)
	}
	wantTurns(t, "TurnsByID", want, got)

	// More ids than one statement takes.
	many := make([]string, 0, 700)
	for i := range 700 {
		many = append(many, fmt.Sprintf("t%02d", 39-i%40))
	}
	got, err = s.TurnsByID(ctx, tn.ID, "bot", many)
	if err != nil || len(got) != 40 || got[0].TurnID != "t39" || got[39].TurnID != "t00" {
		t.Errorf("TurnsByID(700 ids) = %d turns, %v", len(got), err)
	}
	for _, tc := range []struct {
		tenant, agent string
		ids           []string
	}{
		{tn.ID, "bot", nil},
		{tn.ID, "bot", []string{"missing"}},
		{other.ID, "bot", []string{"t01"}},
		{tn.ID, "bot-2", []string{"t01"}},
		{uuid.Must(uuid.NewV7()).String(), "bot", []string{"t01"}},
	} {
		got, err := s.TurnsByID(ctx, tc.tenant, tc.agent, tc.ids)
		if err != nil || len(got) != 0 {
			t.Errorf("TurnsByID(%s, %s, %v) = %v, %v; want none", tc.tenant, tc.agent, tc.ids, got, err)
		}
	}
}

// testTurnsConcurrent sends overlapping batches at once: every turn is
// stored exactly once, every identical resend is a duplicate, and of
// concurrent different bodies for one identity exactly one is kept.
func testTurnsConcurrent(t *testing.T, open Opener) {
	s := open(t, clock.NewFake(Start))
	ctx := t.Context()
	tn := mustTenant(t, s, "acme")
	const senders = 8
	shared := make([]store.NewTurn, 16)
	for i := range shared {
		shared[i] = simpleTurn(t, fmt.Sprint("shared-", i))
	}
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		accepted   int
		duplicates int
		conflicts  int
		errs       []error
	)
	for w := range senders {
		wg.Go(func() {
			// Each sender: the shared turns in its own order plus its own.
			batch := []store.NewTurn{simpleTurn(t, fmt.Sprint("own-", w))}
			for i := range shared {
				k := (i + 3*w) % len(shared)
				if w%2 == 1 {
					k = len(shared) - 1 - k
				}
				batch = append(batch, shared[k])
			}
			// ...and a contested identity with a body of its own.
			batch = append(batch, simpleTurn(t, "contested", fmt.Sprintf(`"task_id":"%d"`, w)))
			res, err := s.InsertTurns(ctx, tn.ID, "bot", batch)
			mu.Lock()
			defer mu.Unlock()
			var ce *store.TurnConflictError
			switch {
			case errors.As(err, &ce):
				conflicts++
				if ce.TurnID != "contested" {
					errs = append(errs, fmt.Errorf("sender %d: conflict on %q", w, ce.TurnID))
				}
			case err != nil:
				errs = append(errs, fmt.Errorf("sender %d: %w", w, err))
			default:
				accepted += res.Accepted
				duplicates += res.Duplicates
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	// Exactly one sender's batch went in; the others conflicted on
	// "contested" and stored nothing.
	if conflicts != senders-1 {
		t.Errorf("%d conflicting senders, want %d", conflicts, senders-1)
	}
	if want := 1 + len(shared) + 1; accepted != want || duplicates != 0 {
		t.Errorf("accepted %d, duplicates %d; want %d and 0", accepted, duplicates, want)
	}
	if got := allTurns(t, s, tn.ID, store.TurnFilter{}); len(got) != 1+len(shared)+1 {
		t.Errorf("%d turns stored, want %d", len(got), 1+len(shared)+1)
	}

	// Without a contested identity, all go in, and resends are duplicates.
	var total store.TurnsResult
	for w := range senders {
		wg.Go(func() {
			batch := []store.NewTurn{simpleTurn(t, fmt.Sprint("again-", w))}
			batch = append(batch, shared...)
			res, err := s.InsertTurns(ctx, tn.ID, "bot", batch)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("sender %d: %v", w, err)
				return
			}
			total.Accepted += res.Accepted
			total.Duplicates += res.Duplicates
		})
	}
	wg.Wait()
	if total != (store.TurnsResult{Accepted: senders, Duplicates: senders * len(shared)}) {
		t.Errorf("second round = %+v, want %d accepted, %d duplicates", total, senders, senders*len(shared))
	}
}
