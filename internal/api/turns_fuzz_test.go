package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/jsonpointer"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// turnsFuzzForbidden is the agent_id the fuzzed key may not act for.
const turnsFuzzForbidden = "forbidden"

// FuzzTurnsIntake feeds arbitrary bodies to POST /turns, in process: the
// decoder and validator alone, then the whole handler on a SQLite store
// that keeps what earlier inputs stored, so resends and conflicts occur.
// It checks that nothing panics or answers 5xx; that a 422 points at a
// member of the input (or, for a missing member, into its parent object);
// that an accepted body decodes into the flywheel types, each turn's bytes
// being a turn of the body with the hash of its canonical form; and that
// every 200 and 409 is the decision the stored turns call for.
func FuzzTurnsIntake(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("..", "..", "flywheel", "testdata", "valid", "ProductionTurnBatch", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range seeds {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		turnBatchJSON("bot", turnJSON("a"), turnJSON("b", `"tool_calls":null`), turnJSON("a")),
		turnBatchJSON("bot", turnJSON("a", `"turn_index":1`)),
		turnBatchJSON("bot", turnJSON("c"), turnJSON("c", `"task_id":"x"`)),
		turnBatchJSON(turnsFuzzForbidden, turnJSON("a")),
		turnBatchJSON("bot", turnJSON("t", `"tool_calls":[`+turnToolCall(`"outcome":"unknown"`)+`]`)),
		turnBatchJSON("bot", turnJSON("t", `"tool_calls":[`+turnToolCall(`"entity_ids":{"id":"1","x":""}`)+`]`, `"occurred_at":"2025-01-31T12:00:00Z"`)),
		"{ \"turns\" : [ " + turnJSON("sp") + " ] , \"agent_id\" : \"bot\" }",
		`{"agent_id":"bot","turns":[{"turn_id":"t","turn_id":"u"}]}`,
		`{"\u0061gent_id":"bot","tu\u0072ns":[` + turnJSON("esc") + `]}`,
		`{"agent_id":"bot","turns":[{"turn_id":"\ud800","input_text":null,"final_text":null,"tool_calls":[],"tool_calls_omitted_count":1e400}]}`,
		`[]`, ``, `{`, `{"agent_id":"bot","turns":[]}`,
	} {
		f.Add([]byte(s))
	}

	st := sqliteEngine.open(f, clock.Real{})
	srv, err := New(Config{}, Deps{Store: st, Logger: telemetry.Discard(), Clock: clock.Real{}, Metrics: telemetry.NewMetrics()})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	tn, err := st.CreateTenant(ctx, "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	_, key, err := auth.CreateKey(ctx, st, tn.ID, auth.KeyRequest{Role: gyre.RoleAgent})
	if err != nil {
		f.Fatal(err)
	}
	allows := func(id string) bool { return id != turnsFuzzForbidden }

	f.Fuzz(func(t *testing.T, body []byte) {
		// The handler's key may act for every agent; a key that may not act
		// for turnsFuzzForbidden gets the same verdict, or 403 for that agent.
		batch, derr := decodeTurnBatch(body, func(string) bool { return true })
		turnCheckDecoded(t, body, batch, derr)
		var ge *gyre.Error
		if _, ferr := decodeTurnBatch(body, allows); errors.As(ferr, &ge) && ge.Code == gyre.CodeForbidden {
			if derr != nil && gyre.ErrorCode(derr) != gyre.CodeInvalidBody {
				t.Fatalf("403 for a limited key, %v for an unlimited one", derr)
			}
			if !bytes.Contains(body, []byte(turnsFuzzForbidden)) && !bytes.Contains(body, []byte(`\u`)) {
				t.Fatalf("403 for a body that names no forbidden agent: %s", body)
			}
		} else if (ferr == nil) != (derr == nil) || (ferr != nil && ferr.Error() != derr.Error()) {
			t.Fatalf("a limited key gets %v, an unlimited one %v", ferr, derr)
		}

		req := httptest.NewRequest(http.MethodPost, "/turns", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)

		var eb errorBody
		if rec.Code != http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil {
				t.Fatalf("status %d answer %q is not an error body", rec.Code, rec.Body)
			}
		}
		ge = nil
		switch {
		case rec.Code >= 500:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		case derr != nil && errors.As(derr, &ge):
			// The handler answers what the decoder decided.
			if rec.Code != ge.Status() || eb.Error.Code != ge.Code || eb.Error.Pointer != ge.Pointer {
				t.Fatalf("handler answered %d %+v, decoder %d %+v", rec.Code, eb.Error, ge.Status(), ge)
			}
		case rec.Code == http.StatusOK:
			var a turnsAnswer
			if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || a.Accepted < 0 || a.Duplicates < 0 || a.Accepted+a.Duplicates != len(batch.turns) {
				t.Fatalf("200 answer %s for %d turns", rec.Body, len(batch.turns))
			}
			// Every turn is now stored with exactly its canonical hash.
			for _, nt := range batch.turns {
				got, err := st.TurnsByID(ctx, tn.ID, batch.agentID, []string{nt.TurnID})
				if err != nil || len(got) != 1 || got[0].SHA256 != nt.SHA256 {
					t.Fatalf("after a 200, turn %q is stored as %+v (%v), want hash %s", nt.TurnID, got, err, nt.SHA256)
				}
			}
		case rec.Code == http.StatusConflict:
			turnCheckConflict(t, st, tn.ID, batch, eb.Error)
		default:
			t.Fatalf("status %d %s for a body the decoder accepted", rec.Code, rec.Body)
		}
	})
}

// turnCheckDecoded checks decodeTurnBatch's verdict on body.
func turnCheckDecoded(t *testing.T, body []byte, batch turnBatch, err error) {
	t.Helper()
	if err != nil {
		var ge *gyre.Error
		if !errors.As(err, &ge) {
			t.Fatalf("decoder failed without a client error: %v", err)
		}
		switch ge.Code {
		case gyre.CodeInvalidBody:
			if ge.Message == "" {
				t.Fatal("422 without a message")
			}
			turnCheckPointer(t, body, ge.Pointer, ge.Message)
			if flywheel.Validate(flywheel.DefProductionTurnBatch, body) == nil {
				t.Fatalf("422 %v for a body the validator accepts", ge)
			}
		default:
			t.Fatalf("decoder answered %v", ge)
		}
		return
	}
	var fb flywheel.ProductionTurnBatch
	if err := json.Unmarshal(body, &fb); err != nil {
		t.Fatalf("accepted body does not decode into ProductionTurnBatch: %v", err)
	}
	if fb.AgentID != batch.agentID || len(fb.Turns) != len(batch.turns) || len(fb.Turns) < 1 || len(fb.Turns) > store.MaxTurnsPerBatch {
		t.Fatalf("decoded %q with %d turns, decoder said %q with %d", fb.AgentID, len(fb.Turns), batch.agentID, len(batch.turns))
	}
	for i, nt := range batch.turns {
		var ft flywheel.ProductionTurn
		if err := json.Unmarshal(nt.Body, &ft); err != nil {
			t.Fatalf("turn %d bytes %q do not decode into ProductionTurn: %v", i, nt.Body, err)
		}
		if err := flywheel.Validate(flywheel.DefProductionTurn, nt.Body); err != nil {
			t.Fatalf("turn %d bytes %q are not a valid turn: %v", i, nt.Body, err)
		}
		if ft.TurnID != nt.TurnID || ft.TurnID != fb.Turns[i].TurnID {
			t.Fatalf("turn %d: id %q, decoder said %q", i, ft.TurnID, nt.TurnID)
		}
		sum, err := jcs.Hash(nt.Body)
		if err != nil || sum != nt.SHA256 {
			t.Fatalf("turn %d hash %s, canonical form hashes to %s (%v)", i, nt.SHA256, sum, err)
		}
		if opt := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}; opt(ft.ConversationID) != nt.ConversationID || opt(ft.TaskID) != nt.TaskID {
			t.Fatalf("turn %d: correlation ids differ from the body", i)
		}
	}
}

// turnCheckPointer asserts that a 422 pointer resolves in the body, or names a
// missing member of an object that does, or is the parser's pointer when
// the body is not I-JSON.
func turnCheckPointer(t *testing.T, body []byte, pointer, msg string) {
	t.Helper()
	tree, perr := jcs.Parse(body)
	if perr != nil {
		var je *jcs.Error
		if !errors.As(perr, &je) {
			t.Fatalf("parse error %v is not a *jcs.Error", perr)
		}
		if pointer != "" && pointer != je.Pointer {
			t.Fatalf("pointer %q for a body the parser refuses at %q", pointer, je.Pointer)
		}
		return
	}
	toks, err := jsonpointer.Split(pointer)
	if err != nil {
		t.Fatalf("malformed pointer %q: %v", pointer, err)
	}
	if _, found := jsonpointer.Resolve(tree, toks); found {
		return
	}
	if len(toks) == 0 {
		t.Fatal("the root pointer does not resolve")
	}
	parent, found := jsonpointer.Resolve(tree, toks[:len(toks)-1])
	if _, isObj := parent.(map[string]any); !found || !isObj || !strings.Contains(msg, "required") {
		t.Fatalf("pointer %q (%s) points nowhere in the body", pointer, msg)
	}
}

// turnCheckConflict asserts that a 409 names the first turn of the batch that
// differs from what is stored (the refused batch stored nothing, so the
// store shows what it was compared with) or from an earlier turn of the
// batch with its id.
func turnCheckConflict(t *testing.T, st store.Store, tenantID string, b turnBatch, e errorDetail) {
	t.Helper()
	if e.Code != gyre.CodeTurnConflict {
		t.Fatalf("409 with code %q", e.Code)
	}
	want := -1
	known := map[string]string{}
	for i, nt := range b.turns {
		sum, ok := known[nt.TurnID]
		if !ok {
			got, err := st.TurnsByID(context.Background(), tenantID, b.agentID, []string{nt.TurnID})
			if err != nil {
				t.Fatal(err)
			}
			sum = nt.SHA256
			if len(got) == 1 {
				sum = got[0].SHA256
			}
			known[nt.TurnID] = sum
		}
		if sum != nt.SHA256 {
			want = i
			break
		}
	}
	if want < 0 || e.Pointer != "/turns/"+strconv.Itoa(want) {
		t.Fatalf("409 at %q, want the first conflicting turn, /turns/%d", e.Pointer, want)
	}
}

// TestDecodeTurnBatch_BenchBatch checks the benchmark's realistic batch
// as FuzzTurnsIntake checks every body it accepts: each turn's bytes, its
// identifiers and the hash of its canonical form.
func TestDecodeTurnBatch_BenchBatch(t *testing.T) {
	t.Parallel()
	body := newTurnsBenchBatch().body(7)
	batch, err := decodeTurnBatch(body, nil)
	if err != nil {
		t.Fatal(err)
	}
	turnCheckDecoded(t, body, batch, nil)
	if batch.agentID != turnsBenchAgent || len(batch.turns) != turnsBenchTurns {
		t.Fatalf("decoded %q with %d turns, want %q with %d", batch.agentID, len(batch.turns), turnsBenchAgent, turnsBenchTurns)
	}
}
