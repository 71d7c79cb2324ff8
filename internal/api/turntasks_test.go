package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

// fromTurnsAnswer is the answer of POST /api/v1/tasks/from-turns.
type fromTurnsAnswer struct {
	Items              []taskRef `json:"items"`
	Matched            int       `json:"matched"`
	SkippedExisting    int       `json:"skipped_existing"`
	SkippedNoInputText int       `json:"skipped_no_input_text"`
	Sample             *int      `json:"sample"`
	Seed               *int64    `json:"seed"`
}

func (a fromTurnsAnswer) caseIDs() []string {
	out := []string{}
	for _, it := range a.Items {
		out = append(out, it.CaseID)
	}
	return out
}

// insertConversationTurn stores one turn of agentID in conversation ("" for
// none) with input_text (nil for null), received at the env's clock.
func (e *env) insertConversationTurn(agentID, turnID, conversation string, input *string) {
	e.t.Helper()
	m := map[string]any{"turn_id": turnID, "input_text": input, "final_text": "ok", "tool_calls": nil, "tool_calls_omitted_count": 0}
	if conversation != "" {
		m["conversation_id"] = conversation
	}
	body, err := json.Marshal(m)
	if err != nil {
		e.t.Fatal(err)
	}
	h, err := jcs.Hash(body)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.InsertTurns(e.t.Context(), e.tenant.ID, agentID, []store.NewTurn{{TurnID: turnID, ConversationID: conversation, Body: body, SHA256: h}}); err != nil {
		e.t.Fatalf("InsertTurns: %v", err)
	}
}

func (e *env) fromTurns(body string, wantStatus int) fromTurnsAnswer {
	e.t.Helper()
	r := e.json(http.MethodPost, "/api/v1/tasks/from-turns", e.admin, body)
	if r.status != wantStatus {
		e.t.Fatalf("from-turns %s: %d %s, want %d", body, r.status, r.body, wantStatus)
	}
	var a fromTurnsAnswer
	decodeInto(e.t, r, &a)
	return a
}

var turnTasksStart = time.Date(2031, 5, 1, 9, 0, 0, 0, time.UTC)

func TestTasksFromTurns_FiltersSelectTurnsInOrderOfReceipt(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs), withFakeClock(turnTasksStart))
			e.insertConversationTurn("bot", "c1", "conv-a", textPtr("one"))
			e.insertConversationTurn("other-bot", "x1", "conv-a", textPtr("theirs"))
			e.clk.Advance(time.Hour)
			e.insertConversationTurn("bot", "c2", "conv-b", nil)
			e.insertConversationTurn("bot", "c3", "conv-b", textPtr("three"))
			e.clk.Advance(time.Hour)
			e.insertConversationTurn("bot", "c4", "conv-a", textPtr("four"))

			for _, tc := range []struct {
				name, filters string
				want          []string
				matched, noIn int
			}{
				{"conversation_id keeps its turns", `"conversation_id":"conv-a"`, []string{"c1", "c4"}, 2, 0},
				{"since is inclusive; a null input_text is skipped and counted", `"since":"2031-05-01T10:00:00Z"`, []string{"c3", "c4"}, 3, 1},
				{"until is exclusive", `"until":"2031-05-01T11:00:00Z"`, []string{"c1", "c3"}, 3, 1},
				{"since and until make a window", `"since":"2031-05-01T09:30:00+00:00","until":"2031-05-01T10:30:00Z"`, []string{"c3"}, 2, 1},
				{"no filter selects every turn of the agent", `"skip_existing":false`, []string{"c1", "c3", "c4"}, 4, 1},
			} {
				a := e.fromTurns(`{"agent_id":"bot",`+tc.filters+`,"graders":[]}`, http.StatusCreated)
				if diff := cmp.Diff(tc.want, a.caseIDs()); diff != "" {
					t.Errorf("%s (-want +got):\n%s", tc.name, diff)
				}
				if a.Matched != tc.matched || a.SkippedNoInputText != tc.noIn || a.SkippedExisting != 0 || a.Sample != nil || a.Seed != nil {
					t.Errorf("%s: answer %+v, want matched %d, %d without input", tc.name, a, tc.matched, tc.noIn)
				}
			}
			// A window with no turn creates nothing: 200, not an error.
			a := e.fromTurns(`{"agent_id":"bot","since":"2040-01-01T00:00:00Z","graders":[]}`, http.StatusOK)
			if len(a.Items) != 0 || a.Matched != 0 {
				t.Errorf("empty window: %+v", a)
			}
		})
	}
}

func TestTasksFromTurns_SkipExistingMakesEachTurnATaskOnce(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs), withFakeClock(turnTasksStart))
			e.insertTurns(e.tenant.ID, "bot", []string{"a", "b"}, map[string]*string{"a": textPtr("A"), "b": textPtr("B")})
			first := e.fromTurns(`{"agent_id":"bot","skip_existing":true,"graders":[]}`, http.StatusCreated)
			if diff := cmp.Diff([]string{"a", "b"}, first.caseIDs()); diff != "" {
				t.Fatalf("first call (-want +got):\n%s", diff)
			}
			e.clk.Advance(time.Minute)
			e.insertTurns(e.tenant.ID, "bot", []string{"c"}, map[string]*string{"c": textPtr("C")})
			second := e.fromTurns(`{"agent_id":"bot","skip_existing":true,"graders":[]}`, http.StatusCreated)
			if diff := cmp.Diff([]string{"c"}, second.caseIDs()); diff != "" || second.Matched != 3 || second.SkippedExisting != 2 {
				t.Errorf("second call made %v (matched %d, skipped_existing %d), want only c, 3 matched, 2 skipped", second.caseIDs(), second.Matched, second.SkippedExisting)
			}
			third := e.fromTurns(`{"agent_id":"bot","skip_existing":true,"graders":[]}`, http.StatusOK)
			if len(third.Items) != 0 || third.SkippedExisting != 3 {
				t.Errorf("third call: %+v, want nothing made and 3 skipped", third)
			}
			// Listed turns skip the same way, in the listed order.
			e.insertTurns(e.tenant.ID, "bot", []string{"d"}, map[string]*string{"d": textPtr("D")})
			listed := e.fromTurns(`{"agent_id":"bot","turn_ids":["d","a"],"skip_existing":true,"graders":[]}`, http.StatusCreated)
			if diff := cmp.Diff([]string{"d"}, listed.caseIDs()); diff != "" || listed.Matched != 2 || listed.SkippedExisting != 1 {
				t.Errorf("listed with skip_existing: %+v", listed)
			}
			// Without skip_existing a turn gets another task, as before.
			again := e.fromTurns(`{"agent_id":"bot","turn_ids":["a"],"graders":[]}`, http.StatusCreated)
			if diff := cmp.Diff([]string{"a"}, again.caseIDs()); diff != "" {
				t.Errorf("without skip_existing (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTasksFromTurns_SampleIsDeterministicBySeed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs), withFakeClock(turnTasksStart))
	var ids []string
	inputs := map[string]*string{}
	for i := range 40 {
		id := fmt.Sprintf("t-%02d", i)
		ids = append(ids, id)
		inputs[id] = textPtr("q" + id)
	}
	e.insertTurns(e.tenant.ID, "bot", ids, inputs)
	draw := func(seed string) fromTurnsAnswer {
		return e.fromTurns(`{"agent_id":"bot","sample":5`+seed+`,"graders":[]}`, http.StatusCreated)
	}
	a, b := draw(`,"seed":42`), draw(`,"seed":42`)
	if len(a.Items) != 5 || a.Matched != 40 || a.Sample == nil || *a.Sample != 5 || a.Seed == nil || *a.Seed != 42 {
		t.Fatalf("sample answer %+v, want 5 of 40 matched, sample 5, seed 42", a)
	}
	if !cmp.Equal(a.caseIDs(), b.caseIDs()) {
		t.Errorf("seed 42 drew %v, then %v: want the same sample", a.caseIDs(), b.caseIDs())
	}
	// Ordered by receipt, not by draw.
	for i := 1; i < len(a.Items); i++ {
		if a.Items[i-1].CaseID > a.Items[i].CaseID {
			t.Errorf("sample not in order of receipt: %v", a.caseIDs())
		}
	}
	if c := draw(`,"seed":43`); cmp.Equal(a.caseIDs(), c.caseIDs()) {
		t.Errorf("seeds 42 and 43 drew the same 5 of 40: %v", a.caseIDs())
	}
	if d := draw(``); d.Seed == nil || *d.Seed != 0 || !cmp.Equal(d.caseIDs(), draw(`,"seed":0`).caseIDs()) {
		t.Errorf("sample without seed: seed %v, want 0 and the seed-0 sample", d.Seed)
	}
	// With skip_existing a sample draws only turns without a task.
	fresh := e.fromTurns(`{"agent_id":"bot","sample":5,"seed":42,"skip_existing":true,"graders":[]}`, http.StatusCreated)
	for _, id := range fresh.caseIDs() {
		for _, old := range a.caseIDs() {
			if id == old {
				t.Errorf("skip_existing sample drew %s, which already had a task", id)
			}
		}
	}
	if len(fresh.Items) != 5 || fresh.SkippedExisting == 0 {
		t.Errorf("skip_existing sample: %+v", fresh)
	}
}

func TestTasksFromTurns_SelectionIsBoundedPerCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs), withFakeClock(turnTasksStart))
	var all []store.NewTurn
	for i := range maxTurnTasks + 1 {
		id := fmt.Sprintf("t-%04d", i)
		body := fmt.Sprintf(`{"turn_id":%q,"input_text":"q","final_text":"ok","tool_calls":null,"tool_calls_omitted_count":0}`, id)
		h, err := jcs.Hash([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, store.NewTurn{TurnID: id, Body: []byte(body), SHA256: h})
	}
	for start := 0; start < len(all); start += store.MaxTurnsPerBatch {
		if _, err := e.st.InsertTurns(t.Context(), e.tenant.ID, "bot", all[start:min(start+store.MaxTurnsPerBatch, len(all))]); err != nil {
			t.Fatal(err)
		}
	}
	r := e.json(http.MethodPost, "/api/v1/tasks/from-turns", e.admin, `{"agent_id":"bot","graders":[]}`)
	r.wantError(t, http.StatusUnprocessableEntity, gyre.CodeInvalidBody, "/sample")
	if msg := r.errorBody(t).Message; !strings.Contains(msg, fmt.Sprint(maxTurnTasks)) {
		t.Errorf("message %q does not name the bound", msg)
	}
	if items := e.listAll("/api/v1/tasks", e.admin, 500); len(items) != 0 {
		t.Errorf("refused selection created %d tasks", len(items))
	}
	a := e.fromTurns(`{"agent_id":"bot","sample":3,"graders":[]}`, http.StatusCreated)
	if len(a.Items) != 3 || a.Matched != maxTurnTasks+1 {
		t.Errorf("a sample bounds the selection: %d items of %d matched", len(a.Items), a.Matched)
	}
}

func TestTasksFromTurns_FilterRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withBlobs(fileBlobs))
	e.insertTurns(e.tenant.ID, "bot", []string{"a"}, map[string]*string{"a": textPtr("A")})
	tests := []struct {
		name, body, ptr string
	}{
		{"turn_ids with conversation_id", `{"agent_id":"bot","turn_ids":["a"],"conversation_id":"c","graders":[]}`, "/conversation_id"},
		{"turn_ids with since", `{"agent_id":"bot","turn_ids":["a"],"since":"2030-01-01T00:00:00Z","graders":[]}`, "/since"},
		{"turn_ids with until", `{"agent_id":"bot","turn_ids":["a"],"until":"2030-01-01T00:00:00Z","graders":[]}`, "/until"},
		{"turn_ids with sample", `{"agent_id":"bot","turn_ids":["a"],"sample":1,"graders":[]}`, "/sample"},
		{"turn_ids with seed", `{"agent_id":"bot","turn_ids":["a"],"seed":1,"graders":[]}`, "/seed"},
		{"empty conversation_id", `{"agent_id":"bot","conversation_id":"","graders":[]}`, "/conversation_id"},
		{"conversation_id not a string", `{"agent_id":"bot","conversation_id":7,"graders":[]}`, "/conversation_id"},
		{"since not RFC 3339", `{"agent_id":"bot","since":"yesterday","graders":[]}`, "/since"},
		{"until a date only", `{"agent_id":"bot","until":"2030-01-01","graders":[]}`, "/until"},
		{"until before since", `{"agent_id":"bot","since":"2030-01-02T00:00:00Z","until":"2030-01-01T00:00:00Z","graders":[]}`, "/until"},
		{"until equal to since", `{"agent_id":"bot","since":"2030-01-01T00:00:00Z","until":"2030-01-01T00:00:00Z","graders":[]}`, "/until"},
		{"sample zero", `{"agent_id":"bot","sample":0,"graders":[]}`, "/sample"},
		{"sample negative", `{"agent_id":"bot","sample":-3,"graders":[]}`, "/sample"},
		{"sample above the bound", fmt.Sprintf(`{"agent_id":"bot","sample":%d,"graders":[]}`, maxTurnTasks+1), "/sample"},
		{"sample not an integer", `{"agent_id":"bot","sample":2.5,"graders":[]}`, "/sample"},
		{"sample a string", `{"agent_id":"bot","sample":"5","graders":[]}`, "/sample"},
		{"seed without sample", `{"agent_id":"bot","seed":4,"graders":[]}`, "/seed"},
		{"seed not an integer", `{"agent_id":"bot","sample":1,"seed":1.5,"graders":[]}`, "/seed"},
		{"seed beyond int64", `{"agent_id":"bot","sample":1,"seed":99999999999999999999,"graders":[]}`, "/seed"},
		{"skip_existing not a boolean", `{"agent_id":"bot","skip_existing":"yes","graders":[]}`, "/skip_existing"},
		{"filters still need graders", `{"agent_id":"bot","since":"2030-01-01T00:00:00Z"}`, "/graders"},
	}
	for _, tc := range tests {
		r := e.json(http.MethodPost, "/api/v1/tasks/from-turns", e.admin, tc.body)
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %s, want 422", tc.name, r.status, r.body)
			continue
		}
		r.wantError(t, http.StatusUnprocessableEntity, gyre.CodeInvalidBody, tc.ptr)
	}
	if items := e.listAll("/api/v1/tasks", e.admin, 50); len(items) != 0 {
		t.Errorf("refused requests created tasks: %s", items)
	}
}
