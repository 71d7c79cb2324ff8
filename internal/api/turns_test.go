package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// Contract rules of ProductionTurnBatch, ProductionTurn and ToolCallRecord
// (contracts/flywheel-1.json) and the server rules of SPEC §4.1, one test
// per rule. Validation-only rules run on SQLite; rules about what is
// stored run on both engines.

func TestTurns_StatusCodeMustBeNullWhenOutcomeUnknown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	tests := []struct {
		call string
		ok   bool
	}{
		{turnToolCall(`"outcome":"unknown"`, `"status_code":200`), false},
		{turnToolCall(`"outcome":"unknown"`, `"status_code":500`), false},
		{turnToolCall(`"outcome":"unknown"`, `"status_code":null`), true},
		{turnToolCall(`"outcome":"ok"`, `"status_code":200`), true},
		{turnToolCall(`"outcome":"ok"`, `"status_code":null`), true},
		{turnToolCall(`"outcome":"failed"`, `"status_code":200`), true}, // a status may contradict an outcome
		{turnToolCall(`"outcome":"failed"`, `"status_code":null`), true},
	}
	for i, tc := range tests {
		r := e.postTurns(e.admin, turnBatchJSON("bot", turnJSON(fmt.Sprint("t", i), `"tool_calls":[`+turnToolCall()+`,`+tc.call+`]`)))
		if tc.ok {
			r.wantTurnsAccepted(t, 1, 0)
		} else {
			r.wantTurnsInvalid(t, "/turns/0/tool_calls/1/status_code")
		}
	}
}

func TestTurns_StatusCodeIsAnHTTPStatusOrNull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	for i, v := range []string{"99", "600", "0", "-200", "200.5", `"200"`, "true", "{}"} {
		r := e.postTurns(e.admin, turnBatchJSON("bot", turnJSON(fmt.Sprint("bad", i), `"tool_calls":[`+turnToolCall(`"status_code":`+v)+`]`)))
		r.wantTurnsInvalid(t, "/turns/0/tool_calls/0/status_code")
	}
	for i, v := range []string{"100", "599", "404", "2e2", "200.0"} {
		r := e.postTurns(e.admin, turnBatchJSON("bot", turnJSON(fmt.Sprint("ok", i), `"tool_calls":[`+turnToolCall(`"outcome":"failed"`, `"status_code":`+v)+`]`)))
		r.wantTurnsAccepted(t, 1, 0)
	}
}

func TestTurns_StatusCodeKeyRequired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	for _, outcome := range []string{"ok", "failed", "unknown"} {
		r := e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("t", `"tool_calls":[`+turnToolCall(`"outcome":"`+outcome+`"`, "-status_code")+`]`)))
		r.wantTurnsInvalid(t, "/turns/0/tool_calls/0/status_code")
	}
}

func TestTurns_OutcomeRequiredNoDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	// Absent, null, empty or anything outside ok|failed|unknown is refused:
	// nothing is defaulted.
	for _, edit := range []string{"-outcome", `"outcome":null`, `"outcome":""`, `"outcome":"OK"`, `"outcome":"success"`, `"outcome":"unknown "`, `"outcome":true`} {
		r := e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("t", `"tool_calls":[`+turnToolCall(edit)+`]`)))
		r.wantTurnsInvalid(t, "/turns/0/tool_calls/0/outcome")
	}
	// "unknown" is first-class and kept as sent, never rounded up to "ok".
	turn := turnJSON("u", `"tool_calls":[`+turnToolCall(`"outcome":"unknown"`, `"status_code":null`)+`]`)
	e.postTurns(e.admin, turnBatchJSON("bot", turn)).wantTurnsAccepted(t, 1, 0)
	wantTurnsListed(t, e.listTurns(e.admin, ""), turnListed("bot", turn, turnStart))
}

func TestTurns_ToolCallsNullAndEmptyAreDistinct(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			notReported := turnJSON("not-reported", `"tool_calls":null`)
			zeroCalls := turnJSON("zero-calls", `"tool_calls":[]`)
			e.postTurns(e.admin, turnBatchJSON("bot", notReported, zeroCalls)).wantTurnsAccepted(t, 2, 0)
			// Stored and listed distinctly: null stays null, [] stays [].
			wantTurnsListed(t, e.listTurns(e.admin, ""), turnListed("bot", notReported, turnStart), turnListed("bot", zeroCalls, turnStart))
			for _, id := range []string{"not-reported", "zero-calls"} {
				got, err := e.st.TurnsByID(t.Context(), e.tenant.ID, "bot", []string{id})
				if err != nil || len(got) != 1 {
					t.Fatalf("TurnsByID(%s) = %v, %v", id, got, err)
				}
				var m map[string]json.RawMessage
				if err := json.Unmarshal(got[0].Body, &m); err != nil {
					t.Fatal(err)
				}
				if want := map[string]string{"not-reported": "null", "zero-calls": "[]"}[id]; string(m["tool_calls"]) != want {
					t.Errorf("%s: stored tool_calls = %s, want %s", id, m["tool_calls"], want)
				}
			}
			// They are different bodies: swapping one for the other under
			// the same identity is a conflict, not a duplicate.
			e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("not-reported", `"tool_calls":[]`))).
				wantError(t, http.StatusConflict, gyre.CodeTurnConflict, "/turns/0")
			e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("zero-calls", `"tool_calls":null`))).
				wantError(t, http.StatusConflict, gyre.CodeTurnConflict, "/turns/0")
		})
	}
}

func TestTurns_ToolCallsKeyRequired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("t", "-tool_calls"))).wantTurnsInvalid(t, "/turns/0/tool_calls")
	for _, v := range []string{`{}`, `"none"`, `0`, `[null]`, `[1]`} {
		e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("t", `"tool_calls":`+v))).wantTurnsInvalid(t, "/turns/0/tool_calls"+map[bool]string{true: "/0", false: ""}[strings.HasPrefix(v, "[")])
	}
}

func TestTurns_RequiredTurnMembers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	for _, name := range []string{"turn_id", "input_text", "final_text", "tool_calls", "tool_calls_omitted_count"} {
		e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("t", "-"+name))).wantTurnsInvalid(t, "/turns/0/"+name)
	}
	// input_text and final_text are required keys with nullable values.
	e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("nulls", `"input_text":null`, `"final_text":null`))).wantTurnsAccepted(t, 1, 0)
	// The batch needs both of its members.
	e.postTurns(e.admin, `{"turns":[`+turnJSON("t")+`]}`).wantTurnsInvalid(t, "/agent_id")
	e.postTurns(e.admin, `{"agent_id":"bot"}`).wantTurnsInvalid(t, "/turns")
	e.postTurns(e.admin, `{"agent_id":"bot","turns":null}`).wantTurnsInvalid(t, "/turns")
}

func TestTurns_MemberTypesAndRanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	call := func(edit string) string { return `"tool_calls":[` + turnToolCall(edit) + `]` }
	tests := []struct {
		edit    string
		pointer string
	}{
		{`"tool_calls_omitted_count":-1`, "/turns/0/tool_calls_omitted_count"},
		{`"tool_calls_omitted_count":1.5`, "/turns/0/tool_calls_omitted_count"},
		{`"tool_calls_omitted_count":null`, "/turns/0/tool_calls_omitted_count"},
		{`"tool_calls_omitted_count":9007199254740992`, "/turns/0/tool_calls_omitted_count"},
		{`"turn_index":-1`, "/turns/0/turn_index"},
		{`"turn_index":0.5`, "/turns/0/turn_index"},
		{`"turn_index":null`, "/turns/0/turn_index"},
		{`"input_text":1`, "/turns/0/input_text"},
		{`"final_text":["a"]`, "/turns/0/final_text"},
		{`"agent_fingerprint":"sdk/1"`, "/turns/0/agent_fingerprint"},
		{`"agent_fingerprint":null`, "/turns/0/agent_fingerprint"},
		{call(`"name":""`), "/turns/0/tool_calls/0/name"},
		{call(`"name":null`), "/turns/0/tool_calls/0/name"},
		{call(`"arguments":[1]`), "/turns/0/tool_calls/0/arguments"},
		{call(`"latency_ms":-0.5`), "/turns/0/tool_calls/0/latency_ms"},
		{call(`"latency_ms":"3"`), "/turns/0/tool_calls/0/latency_ms"},
		{call(`"error":{}`), "/turns/0/tool_calls/0/error"},
		{call(`"error_class":1`), "/turns/0/tool_calls/0/error_class"},
		{call(`"agent_name":false`), "/turns/0/tool_calls/0/agent_name"},
		{call(`"tool_call_id":7`), "/turns/0/tool_calls/0/tool_call_id"},
		{call(`"entity_ids":[]`), "/turns/0/tool_calls/0/entity_ids"},
	}
	for _, tc := range tests {
		e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("t", tc.edit))).wantTurnsInvalid(t, tc.pointer)
	}
	// Every optional member at its widest, and nullable ones as null.
	full := turnJSON("full", `"task_id":"case-1"`, `"conversation_id":"c"`, `"turn_index":0`, `"tool_calls_omitted_count":3`,
		`"agent_fingerprint":{}`, `"occurred_at":"2025-01-31T12:00:00Z"`,
		`"tool_calls":[`+turnToolCall(`"arguments":{}`, `"output":null`, `"error":null`, `"error_class":null`, `"latency_ms":0`,
			`"agent_name":null`, `"tool_call_id":null`, `"entity_ids":{}`)+`,`+
			turnToolCall(`"arguments":{"q":[1,{"x":null}]}`, `"output":[{"a":"b"}]`, `"error":"boom"`, `"error_class":"Timeout"`,
				`"latency_ms":12.25`, `"agent_name":"orders"`, `"tool_call_id":"call_1"`, `"entity_ids":{"id":"ord_1"}`)+`]`)
	e.postTurns(e.admin, turnBatchJSON("bot", full)).wantTurnsAccepted(t, 1, 0)
}

func TestTurns_TurnIDRejectsDotSegmentsAndSlashes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	for _, id := range []string{".", "..", "a/b", "/", "a\\b", `\`, "../x", "x/.."} {
		e.postTurns(e.admin, turnBatchJSON("bot", turnJSON(id))).wantTurnsInvalid(t, "/turns/0/turn_id")
	}
	for i, id := range []string{"...", ".a", "a.", "a..b", ".hidden", "v1.2.3"} {
		e.postTurns(e.admin, turnBatchJSON("bot", turnJSON(id))).wantTurnsAccepted(t, 1, 0)
		_ = i
	}
}

func TestTurns_AgentIDRejectsDotSegmentsAndSlashes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	for _, id := range []string{".", "..", "a/b", "/", "a\\b", "../bot"} {
		e.postTurns(e.admin, turnBatchJSON(id, turnJSON("t"))).wantTurnsInvalid(t, "/agent_id")
	}
	for _, id := range []string{"...", ".bot", "bot.v2", "a..b"} {
		e.postTurns(e.admin, turnBatchJSON(id, turnJSON("t"))).wantTurnsAccepted(t, 1, 0)
	}
}

// turnIDFields are the identifier members the contract gives the shared
// production identifier grammar, with where each sits in a batch.
var turnIDFields = []struct {
	name    string
	pointer string
	batch   func(v string) string
}{
	{"agent_id", "/agent_id", func(v string) string { return turnBatchJSON(v, turnJSON("t")) }},
	{"turn_id", "/turns/0/turn_id", func(v string) string { return turnBatchJSON("bot", turnJSON(v)) }},
	{"task_id", "/turns/0/task_id", func(v string) string { return turnBatchJSON("bot", turnJSON("t", `"task_id":`+turnStr(v))) }},
	{"conversation_id", "/turns/0/conversation_id", func(v string) string {
		return turnBatchJSON("bot", turnJSON("t", `"conversation_id":`+turnStr(v)))
	}},
}

func TestTurns_IdentifiersRejectECMAWhitespaceAtEdges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	// ECMA-262 \s: ASCII whitespace, U+00A0, U+FEFF, the Zs category
	// (U+1680, U+2000–U+200A, U+202F, U+205F, U+3000), U+2028, U+2029.
	bad := []string{" x", "x ", "\tx", "x\n", "\u00a0x", "x\u3000", "\ufeffx", "x\u2028", "\u2029x", "\u1680x", "x\u2007", "\u202fx", "x\u205f"}
	for _, f := range turnIDFields {
		for _, v := range bad {
			r := e.postTurns(e.admin, f.batch(v))
			if r.status != http.StatusUnprocessableEntity {
				t.Errorf("%s %q: status %d, want 422", f.name, v, r.status)
				continue
			}
			r.wantTurnsInvalid(t, f.pointer)
		}
	}
	// Inside an identifier, whitespace is fine; so are characters outside
	// \s that look like space (U+200B zero width space, U+180E).
	for i, v := range []string{"a b", "a\u00a0b", "a\u3000b", "\u200bx", "x\u180e"} {
		for _, f := range turnIDFields {
			body := f.batch(v)
			if f.name != "turn_id" {
				body = strings.Replace(body, `"turn_id":"t"`, `"turn_id":"ok-`+f.name+fmt.Sprint(i)+`"`, 1)
			}
			if r := e.postTurns(e.admin, body); r.status != http.StatusOK {
				t.Errorf("%s %q: status %d %s, want 200", f.name, v, r.status, r.body)
			}
		}
	}
}

func TestTurns_IdentifiersRejectC0C1Controls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	for _, f := range turnIDFields {
		for _, v := range []string{"a\u0085b", "a\u0000b", "a\u009fb", "a\u0080b", "a\u007fb", "a\u001fb", "a\u001bb"} {
			// turnStr escapes C0 controls and DEL stays raw; C1 controls are
			// sent raw (UTF-8) here and escaped below.
			e.postTurns(e.admin, f.batch(v)).wantTurnsInvalid(t, f.pointer)
			escaped := strings.Replace(f.batch(v), turnStr(v), fmt.Sprintf(`"a\u%04xb"`, []rune(v)[1]), 1)
			e.postTurns(e.admin, escaped).wantTurnsInvalid(t, f.pointer)
		}
	}
}

func TestTurns_IdentifiersAre1To255Characters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	for _, f := range turnIDFields {
		e.postTurns(e.admin, f.batch("")).wantTurnsInvalid(t, f.pointer)
		e.postTurns(e.admin, f.batch(strings.Repeat("x", 256))).wantTurnsInvalid(t, f.pointer)
		e.postTurns(e.admin, f.batch(strings.Repeat("é", 256))).wantTurnsInvalid(t, f.pointer)
		e.postTurns(e.admin, f.batch(strings.Repeat("😀", 256))).wantTurnsInvalid(t, f.pointer)
	}
	// Characters, not bytes: 255 two-byte characters are 510 bytes.
	long := strings.Repeat("é", 255)
	e.postTurns(e.admin, turnBatchJSON(long, turnJSON(long, `"task_id":`+turnStr(long), `"conversation_id":`+turnStr(long)))).wantTurnsAccepted(t, 1, 0)
}

func TestTurns_AcceptsUnicodeIdentifiers(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			ids := []string{"café ü 7", "注文-42", "🚀 launch", "e\u0301", "ÿ"}
			var want []string
			for _, id := range ids {
				turn := turnJSON(id, `"task_id":`+turnStr(id), `"conversation_id":`+turnStr(id))
				e.postTurns(e.admin, turnBatchJSON(id, turn)).wantTurnsAccepted(t, 1, 0)
				want = append(want, turnListed(id, turn, turnStart))
			}
			wantTurnsListed(t, e.listTurns(e.admin, ""), want...)
			// Exact, byte for byte: no normalisation ("é" precomposed is
			// another id than "e" + combining acute).
			for i, id := range ids {
				wantTurnsListed(t, e.listTurns(e.admin, "agent_id="+url.QueryEscape(id)), want[i])
				wantTurnsListed(t, e.listTurns(e.admin, "conversation_id="+url.QueryEscape(id)), want[i])
			}
			wantTurnsListed(t, e.listTurns(e.admin, "agent_id="+url.QueryEscape("\u00e9")))
		})
	}
}

func TestTurns_EntityIDsOnlyContractKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	withIDs := func(id, ids string) string {
		return turnBatchJSON("bot", turnJSON(id, `"tool_calls":[`+turnToolCall(`"entity_ids":`+ids)+`]`))
	}
	e.postTurns(e.admin, withIDs("all", `{"id":"1","key":"k","uuid":"u","sid":"s","gid":"g"}`)).wantTurnsAccepted(t, 1, 0)
	e.postTurns(e.admin, withIDs("empty", `{}`)).wantTurnsAccepted(t, 1, 0)
	tests := []struct{ ids, pointer string }{
		{`{"name":"x"}`, "/name"},
		{`{"id":"1","email":"a@b"}`, "/email"},
		{`{"ID":"1"}`, "/ID"},
		{`{"order_id":"1"}`, "/order_id"},
		{`{"id":""}`, "/id"},
		{`{"id":1}`, "/id"},
		{`{"id":null}`, "/id"},
		{`{"id":["1"]}`, "/id"},
	}
	for _, tc := range tests {
		e.postTurns(e.admin, withIDs("t", tc.ids)).wantTurnsInvalid(t, "/turns/0/tool_calls/0/entity_ids"+tc.pointer)
	}
}

func TestTurns_BatchOf1To64(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	batch := func(prefix string, n int) string {
		turns := make([]string, n)
		for i := range turns {
			turns[i] = turnJSON(fmt.Sprintf("%s-%d", prefix, i))
		}
		return turnBatchJSON("bot", turns...)
	}
	e.postTurns(e.admin, batch("zero", 0)).wantTurnsInvalid(t, "/turns")
	e.postTurns(e.admin, batch("over", 65)).wantTurnsInvalid(t, "/turns")
	e.postTurns(e.admin, batch("over", 200)).wantTurnsInvalid(t, "/turns")
	e.postTurns(e.admin, batch("one", 1)).wantTurnsAccepted(t, 1, 0)
	e.postTurns(e.admin, batch("max", 64)).wantTurnsAccepted(t, 64, 0)
	if n := len(e.listTurns(e.admin, "")); n != 65 {
		t.Errorf("%d turns stored, want 65", n)
	}
}

func TestTurns_AdditionalPropertiesRejected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	tests := []struct{ body, pointer string }{
		{`{"agent_id":"bot","turns":[` + turnJSON("t") + `],"extra":1}`, "/extra"},
		{`{"agent_id":"bot","tenant":"other","turns":[` + turnJSON("t") + `]}`, "/tenant"},
		{turnBatchJSON("bot", turnJSON("t", `"received_at":"2025-01-31T12:00:00Z"`)), "/turns/0/received_at"},
		{turnBatchJSON("bot", turnJSON("t", `"agent_id":"bot"`)), "/turns/0/agent_id"},
		{turnBatchJSON("bot", turnJSON("t", `"trainable":true`)), "/turns/0/trainable"},
		{turnBatchJSON("bot", turnJSON("t", `"tool_calls":[`+turnToolCall(`"success":true`)+`]`)), "/turns/0/tool_calls/0/success"},
		{turnBatchJSON("bot", turnJSON("t", `"Turn_ID":"x"`)), "/turns/0/Turn_ID"},
		{turnBatchJSON("bot", turnJSON("t", `"a/b~c":1`)), "/turns/0/a~1b~0c"},
	}
	for _, tc := range tests {
		e.postTurns(e.admin, tc.body).wantTurnsInvalid(t, tc.pointer)
	}
	wantTurnsListed(t, e.listTurns(e.admin, ""))
}

func TestTurns_OccurredAtMustBeDateTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	for _, v := range []string{`"2025-01-31"`, `"12:00:00Z"`, `"yesterday"`, `"2025-01-31T12:00:00"`, `"2025-13-01T00:00:00Z"`,
		`"2025-01-31 12:00:00Z"`, `"2025-02-30T00:00:00Z"`, `""`, `1738324800`, `null`} {
		e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("t", `"occurred_at":`+v))).wantTurnsInvalid(t, "/turns/0/occurred_at")
	}
	for i, v := range []string{`"2025-01-31T12:00:00Z"`, `"2025-01-31T12:00:00.123456789+05:30"`, `"1985-04-12T23:20:50.52-00:00"`, `"2016-12-31T23:59:60Z"`} {
		e.postTurns(e.admin, turnBatchJSON("bot", turnJSON(fmt.Sprint("t", i), `"occurred_at":`+v))).wantTurnsAccepted(t, 1, 0)
	}
}

func TestTurns_OccurredAtIsCustomerClaim(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			// Claims far in the past or future are kept exactly as sent —
			// offset and digits included — and order nothing.
			future := turnJSON("future", `"occurred_at":"2999-12-31T23:59:59.999999999+14:00"`)
			past := turnJSON("past", `"occurred_at":"1970-01-01T00:00:00-12:00"`)
			none := turnJSON("none")
			e.postTurns(e.admin, turnBatchJSON("bot", future)).wantTurnsAccepted(t, 1, 0)
			e.clk.Advance(time.Hour)
			second := turnStart.Add(time.Hour)
			e.postTurns(e.admin, turnBatchJSON("bot", past, none)).wantTurnsAccepted(t, 2, 0)
			// received_at is the store's clock; items come in order of receipt.
			wantTurnsListed(t, e.listTurns(e.admin, ""),
				turnListed("bot", future, turnStart), turnListed("bot", past, second), turnListed("bot", none, second))
			// since filters on receipt, not on the claim.
			wantTurnsListed(t, e.listTurns(e.admin, "since="+url.QueryEscape(second.Format(time.RFC3339Nano))),
				turnListed("bot", past, second), turnListed("bot", none, second))
			wantTurnsListed(t, e.listTurns(e.admin, "since=2999-01-01T00:00:00Z"))
			stored, err := e.st.TurnsByID(t.Context(), e.tenant.ID, "bot", []string{"future"})
			if err != nil || len(stored) != 1 || stored[0].OccurredAt != "2999-12-31T23:59:59.999999999+14:00" || !stored[0].ReceivedAt.Equal(turnStart) {
				t.Errorf("stored future turn = %+v, %v", stored, err)
			}
		})
	}
}

func TestTurns_TaskIDIsCorrelationOnly(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			// Any well-formed task_id is accepted as sent: it need not name
			// a task gyre knows, and it is not checked or resolved.
			turn := turnJSON("t1", `"task_id":"ticket/4711 <not a gyre task>"`)
			e.postTurns(e.admin, turnBatchJSON("bot", turn)).wantTurnsAccepted(t, 1, 0)
			items := e.listTurns(e.admin, "")
			wantTurnsListed(t, items, turnListed("bot", turn, turnStart))
			// gyre adds nothing to the turn but agent_id and received_at: no
			// label, link or training flag derived from the task_id.
			var m map[string]json.RawMessage
			if err := json.Unmarshal(items[0], &m); err != nil {
				t.Fatal(err)
			}
			for k := range m {
				switch k {
				case "agent_id", "received_at", "turn_id", "task_id", "input_text", "final_text", "tool_calls", "tool_calls_omitted_count":
				default:
					t.Errorf("listed turn has member %q that was not sent", k)
				}
			}
			stored, err := e.st.TurnsByID(t.Context(), e.tenant.ID, "bot", []string{"t1"})
			if err != nil || len(stored) != 1 || stored[0].TaskID != "ticket/4711 <not a gyre task>" {
				t.Errorf("stored = %+v, %v", stored, err)
			}
			// The task_id is part of the turn's body, not a side label:
			// changing it under the same identity is a conflict.
			e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("t1", `"task_id":"ticket/1"`))).
				wantError(t, http.StatusConflict, gyre.CodeTurnConflict, "/turns/0")
			e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("t1"))).
				wantError(t, http.StatusConflict, gyre.CodeTurnConflict, "/turns/0")
		})
	}
}

func TestTurns_PointerIsFirstOffendingFieldInDocumentOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	good := func(i int) string { return turnJSON(fmt.Sprint("t", i)) }
	unknownWith200 := `"tool_calls":[` + turnToolCall(`"outcome":"unknown"`, `"status_code":200`) + `]`
	tests := []struct {
		name    string
		body    string
		pointer string
	}{
		{"the SPEC's example", turnBatchJSON("bot", good(0), good(1), good(2), turnJSON("t3", unknownWith200), turnJSON("t4", unknownWith200)),
			"/turns/3/tool_calls/0/status_code"},
		{"an earlier turn wins over a later one", turnBatchJSON("bot", good(0), turnJSON("t1", `"turn_index":-1`), turnJSON(" t2")),
			"/turns/1/turn_index"},
		{"member order as sent, not schema order", turnBatchJSON("bot", `{"tool_calls_omitted_count":-1,"turn_id":"..","input_text":null,"final_text":null,"tool_calls":[]}`),
			"/turns/0/tool_calls_omitted_count"},
		{"member order as sent, reversed", turnBatchJSON("bot", `{"turn_id":"..","tool_calls_omitted_count":-1,"input_text":null,"final_text":null,"tool_calls":[]}`),
			"/turns/0/turn_id"},
		{"agent_id before turns", `{"agent_id":"..","turns":[` + turnJSON(" bad") + `]}`, "/agent_id"},
		{"turns before agent_id", `{"turns":[` + turnJSON(" bad") + `],"agent_id":".."}`, "/turns/0/turn_id"},
		// A missing member is placed at its object's closing brace: members
		// that are present and wrong come first.
		{"present before missing", turnBatchJSON("bot", `{"turn_id":"t","input_text":null,"final_text":null,"tool_calls":[],"extra":1}`),
			"/turns/0/extra"},
		{"missing in an earlier turn", turnBatchJSON("bot", turnJSON("t0", "-final_text"), turnJSON("t1", `"turn_index":-1`)),
			"/turns/0/final_text"},
		{"deep before shallow later", turnBatchJSON("bot", turnJSON("t0", `"tool_calls":[`+turnToolCall()+`,`+turnToolCall(`"entity_ids":{"x":"1"}`)+`]`, `"turn_index":-1`)),
			"/turns/0/tool_calls/1/entity_ids/x"},
		{"duplicate key", turnBatchJSON("bot", `{"turn_id":"t","turn_id":"u","input_text":null,"final_text":null,"tool_calls":[],"tool_calls_omitted_count":0}`),
			"/turns/0/turn_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.postTurns(e.admin, tc.body).wantTurnsInvalid(t, tc.pointer)
		})
	}
	wantTurnsListed(t, e.listTurns(e.admin, ""))
}

func TestTurns_BodyMustBeIJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	tests := []struct{ body, pointer string }{
		{`{"agent_id":"a","agent_id":"b","turns":[]}`, "/agent_id"},
		{turnBatchJSON("bot", turnJSON(`x`, `"input_text":"\ud800"`)), "/turns/0/input_text"},
		{turnBatchJSON("bot", turnJSON(`x`, `"tool_calls":[`+turnToolCall(`"latency_ms":1e400`)+`]`)), "/turns/0/tool_calls/0/latency_ms"},
		{turnBatchJSON("bot", turnJSON("x")) + "\xff", ""},
		{"{\"agent_id\":\"b\xffot\",\"turns\":[" + turnJSON("x") + "]}", ""},
		{turnBatchJSON("bot", turnJSON("x")) + "{}", ""},
		{``, ""},
		{`   `, ""},
		{`null`, ""},
		{`[]`, ""},
		{`"turns"`, ""},
		{`{"agent_id":"bot","turns":[` + turnJSON("x"), ""},
	}
	for _, tc := range tests {
		e.postTurns(e.admin, tc.body).wantTurnsInvalid(t, tc.pointer)
	}
	wantTurnsListed(t, e.listTurns(e.admin, ""))
}

func TestTurns_BodyTransport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	body := turnBatchJSON("bot", turnJSON("gz"))
	// JSON only.
	e.json(http.MethodPost, "/turns", e.admin, body, "Content-Type", "text/plain").
		wantError(t, http.StatusUnsupportedMediaType, gyre.CodeUnsupportedMedia, "")
	// gzip is undone, and the turn is stored as the uncompressed bytes.
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte(body))
	zw.Close()
	e.do(http.MethodPost, "/turns", e.admin, &zb, "Content-Encoding", "gzip").wantTurnsAccepted(t, 1, 0)
	wantTurnsListed(t, e.listTurns(e.admin, ""), turnListed("bot", turnJSON("gz"), turnStart))
	// Over 4 MiB is 413, before anything is validated.
	huge := turnBatchJSON("bot", turnJSON("big", `"input_text":`+turnStr(strings.Repeat("x", 4<<20))))
	e.postTurns(e.admin, huge).wantError(t, http.StatusRequestEntityTooLarge, gyre.CodeBodyTooLarge, "")
	// Other methods are not routes.
	e.do(http.MethodGet, "/turns", e.admin, nil).wantError(t, http.StatusMethodNotAllowed, gyre.CodeMethodNotAllowed, "")
}

func TestTurns_BatchIsAtomic(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			stored := turnJSON("stored")
			e.postTurns(e.admin, turnBatchJSON("bot", stored)).wantTurnsAccepted(t, 1, 0)
			turns := make([]string, 63)
			for i := range turns {
				turns[i] = turnJSON(fmt.Sprint("new-", i))
			}
			// One invalid turn at the end: 422, none of the 63 stored.
			e.postTurns(e.admin, turnBatchJSON("bot", append(turns, turnJSON("bad", `"turn_index":-1`))...)).
				wantTurnsInvalid(t, "/turns/63/turn_index")
			// One conflicting turn at the end: 409, none of the 63 stored.
			e.postTurns(e.admin, turnBatchJSON("bot", append(turns, turnJSON("stored", `"turn_index":1`))...)).
				wantError(t, http.StatusConflict, gyre.CodeTurnConflict, "/turns/63")
			wantTurnsListed(t, e.listTurns(e.admin, ""), turnListed("bot", stored, turnStart))
			// Fixed, the same batch goes in whole.
			e.postTurns(e.admin, turnBatchJSON("bot", append(turns, stored)...)).wantTurnsAccepted(t, 63, 1)
			if n := len(e.listTurns(e.admin, "")); n != 64 {
				t.Errorf("%d turns stored, want 64", n)
			}
		})
	}
}

func TestTurns_AcknowledgedBatchIsCommitted(t *testing.T) {
	t.Parallel()
	// A 200 means committed: a second, independent store on the same
	// SQLite file sees the batch at once.
	dir := t.TempDir()
	e := newEnv(t, sqliteIn(dir), Config{}, withFakeClock(turnStart))
	e.postTurns(e.key(gyre.RoleAgent), turnBatchJSON("bot", turnJSON("a"), turnJSON("b"))).wantTurnsAccepted(t, 2, 0)
	other := sqliteIn(dir).open(t, clock.Real{})
	got, next, err := other.ListTurns(context.Background(), e.tenant.ID, store.TurnFilter{}, store.Page{})
	if err != nil || len(got) != 2 || next != "" {
		t.Fatalf("second store lists %d turns (next %q, %v), want 2", len(got), next, err)
	}
}

func TestTurns_IdenticalResendIsDuplicate(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			a, b := turnJSON("a", `"conversation_id":"c"`), turnJSON("b", `"tool_calls":null`)
			key := e.key(gyre.RoleAgent)
			e.postTurns(key, turnBatchJSON("bot", a, b)).wantTurnsAccepted(t, 2, 0)
			e.clk.Advance(time.Minute)
			// A retry of the whole batch, and of part of it with a new turn.
			e.postTurns(key, turnBatchJSON("bot", a, b)).wantTurnsAccepted(t, 0, 2)
			c := turnJSON("c")
			e.postTurns(key, turnBatchJSON("bot", b, c)).wantTurnsAccepted(t, 1, 1)
			// Nothing changed for the resent turns, receipt time included.
			wantTurnsListed(t, e.listTurns(e.admin, ""),
				turnListed("bot", a, turnStart), turnListed("bot", b, turnStart), turnListed("bot", c, turnStart.Add(time.Minute)))
		})
	}
}

func TestTurns_DifferentBodySameIdentityIs409(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			a := turnJSON("a", `"tool_calls":[`+turnToolCall()+`]`)
			e.postTurns(e.admin, turnBatchJSON("bot", a)).wantTurnsAccepted(t, 1, 0)
			changes := []string{
				`"input_text":"where is my order??"`,
				`"final_text":null`,
				`"tool_calls":[` + turnToolCall(`"outcome":"failed"`) + `]`,
				`"tool_calls":[` + turnToolCall(`"status_code":201`) + `]`,
				`"tool_calls":[` + turnToolCall(`"latency_ms":null`) + `]`, // null is not absent
				`"tool_calls_omitted_count":1`,
				`"occurred_at":"2025-01-31T12:00:00Z"`,
				`"conversation_id":"c"`,
			}
			for _, c := range changes {
				r := e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("new-1"), turnJSON("a", c), turnJSON("new-2")))
				r.wantError(t, http.StatusConflict, gyre.CodeTurnConflict, "/turns/1")
			}
			// The first conflicting turn in batch order is the one named.
			r := e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("a", changes[0]), turnJSON("a", changes[1])))
			r.wantError(t, http.StatusConflict, gyre.CodeTurnConflict, "/turns/0")
			wantTurnsListed(t, e.listTurns(e.admin, ""), turnListed("bot", a, turnStart))
			// Identity is (tenant, agent_id, turn_id): another agent's "a" is
			// another turn.
			e.postTurns(e.admin, turnBatchJSON("bot-2", turnJSON("a", changes[0]))).wantTurnsAccepted(t, 1, 0)
		})
	}
}

func TestTurns_RepeatInsideBatch(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			a, b := turnJSON("a"), turnJSON("b")
			// An identical repeat is a duplicate of the first occurrence.
			e.postTurns(e.admin, turnBatchJSON("bot", a, b, a)).wantTurnsAccepted(t, 2, 1)
			e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("c"), turnJSON("c"), turnJSON("c"))).wantTurnsAccepted(t, 1, 2)
			// A differing repeat is 409 at the later occurrence, and nothing
			// of the batch is stored.
			e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("d"), turnJSON("e"), turnJSON("d", `"turn_index":1`))).
				wantError(t, http.StatusConflict, gyre.CodeTurnConflict, "/turns/2")
			wantTurnsListed(t, e.listTurns(e.admin, ""), turnListed("bot", a, turnStart), turnListed("bot", b, turnStart), turnListed("bot", turnJSON("c"), turnStart))
			// Same rules when the first occurrence is already stored.
			e.postTurns(e.admin, turnBatchJSON("bot", a, a, turnJSON("f"))).wantTurnsAccepted(t, 1, 2)
			e.postTurns(e.admin, turnBatchJSON("bot", a, turnJSON("g"), turnJSON("a", `"turn_index":1`))).
				wantError(t, http.StatusConflict, gyre.CodeTurnConflict, "/turns/2")
		})
	}
}

func TestTurns_JCSEqualBodiesAreDuplicates(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			first := `{"turn_id":"t","input_text":"A/é","final_text":null,"turn_index":1,"tool_calls":[{"name":"x","outcome":"ok","status_code":200,"latency_ms":1.5,"arguments":{"b":[1,2],"a":{"z":1e2,"y":"\u00e9"}}}],"tool_calls_omitted_count":0}`
			e.postTurns(e.admin, turnBatchJSON("bot", first)).wantTurnsAccepted(t, 1, 0)
			sameCanonical := []string{
				// member order, whitespace
				"{ \"tool_calls_omitted_count\" : 0 ,\n\t\"tool_calls\":[{\"arguments\":{\"a\":{\"y\":\"é\",\"z\":100},\"b\":[1,2]},\"latency_ms\":1.5,\"status_code\":200,\"outcome\":\"ok\",\"name\":\"x\"}],\r\n\"turn_index\":1,\"final_text\":null,\"input_text\":\"A/é\",\"turn_id\":\"t\" }",
				// number spellings
				`{"turn_id":"t","input_text":"A/é","final_text":null,"turn_index":1.0,"tool_calls":[{"name":"x","outcome":"ok","status_code":2e2,"latency_ms":15e-1,"arguments":{"b":[1.00,0.2e1],"a":{"z":100.0,"y":"é"}}}],"tool_calls_omitted_count":-0}`,
				// string escapes
				`{"turn_id":"\u0074","input_text":"\u0041\/\u00e9","final_text":null,"turn_index":1,"tool_calls":[{"name":"\u0078","outcome":"ok","status_code":200,"latency_ms":1.5,"arguments":{"b":[1,2],"a":{"z":1E+2,"y":"\u00E9"}}}],"tool_calls_omitted_count":0}`,
			}
			for i, body := range sameCanonical {
				if r := e.postTurns(e.admin, turnBatchJSON("bot", body)); r.status != http.StatusOK {
					t.Fatalf("spelling %d: %d %s", i, r.status, r.body)
				} else {
					r.wantTurnsAccepted(t, 0, 1)
				}
			}
			// The bytes first sent are what is kept.
			wantTurnsListed(t, e.listTurns(e.admin, ""), turnListed("bot", first, turnStart))
			// Canonical JSON compares strings exactly: a decomposed "é" is
			// another string, so another body.
			decomposed := strings.Replace(first, `"A/é"`, `"A/e\u0301"`, 1)
			e.postTurns(e.admin, turnBatchJSON("bot", decomposed)).wantError(t, http.StatusConflict, gyre.CodeTurnConflict, "/turns/0")
			// Within one batch, too.
			e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("u", `"turn_index":1`), turnJSON("u", `"turn_index":1.0`))).wantTurnsAccepted(t, 1, 1)
		})
	}
}

func TestTurns_AgentAllowList403(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			limited := e.key(gyre.RoleAgent, "bot-a", "café ü 7")
			e.postTurns(limited, turnBatchJSON("bot-a", turnJSON("1"))).wantTurnsAccepted(t, 1, 0)
			e.postTurns(limited, turnBatchJSON("café ü 7", turnJSON("1"))).wantTurnsAccepted(t, 1, 0)
			for _, agent := range []string{"bot-b", "BOT-A", "bot-a.", "cafe\u0301 ü 7"} {
				e.postTurns(limited, turnBatchJSON(agent, turnJSON("1"))).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
			}
			// 403 whatever else is wrong with the body: the key may not speak
			// for that agent at all.
			e.postTurns(limited, turnBatchJSON("bot-b", turnJSON("..", `"turn_index":-1`))).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
			// A malformed agent_id is a contract violation first (no allow-list
			// can hold it).
			e.postTurns(limited, turnBatchJSON("..", turnJSON("1"))).wantTurnsInvalid(t, "/agent_id")
			e.postTurns(limited, turnBatchJSON("bot-a ", turnJSON("1"))).wantTurnsInvalid(t, "/agent_id")
			// Nothing was stored for other agents.
			wantTurnsListed(t, e.listTurns(e.admin, "agent_id=bot-b"))
			// An unlimited agent key, and admin, may send for any agent.
			e.postTurns(e.key(gyre.RoleAgent), turnBatchJSON("bot-b", turnJSON("1"))).wantTurnsAccepted(t, 1, 0)
			e.postTurns(e.admin, turnBatchJSON("bot-c", turnJSON("1"))).wantTurnsAccepted(t, 1, 0)
			// Other roles may not send turns at all; no key is 401.
			for _, role := range []gyre.Role{gyre.RoleReader, gyre.RoleEvaluator, gyre.RoleInference} {
				var key string
				if role == gyre.RoleInference {
					_, key = e.newKey(e.tenant.ID, auth.KeyRequest{Role: role, AgentIDs: []string{"bot-a"}})
				} else {
					key = e.key(role)
				}
				e.postTurns(key, turnBatchJSON("bot-a", turnJSON("2"))).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
			}
			e.postTurns("", turnBatchJSON("bot-a", turnJSON("2"))).wantError(t, http.StatusUnauthorized, gyre.CodeUnauthorized, "")
		})
	}
}

func TestTurns_ForeignTenantInvisible(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			other, otherAdmin := e.newTenant("other")
			mine := turnJSON("t1", `"conversation_id":"c"`)
			theirs := turnJSON("t1", `"conversation_id":"c"`, `"turn_index":9`)
			e.postTurns(e.admin, turnBatchJSON("bot", mine)).wantTurnsAccepted(t, 1, 0)
			// The same identity in another tenant is another turn: neither a
			// duplicate nor a conflict.
			e.postTurns(otherAdmin, turnBatchJSON("bot", theirs)).wantTurnsAccepted(t, 1, 0)
			for _, q := range []string{"", "agent_id=bot", "conversation_id=c", "since=2000-01-01T00:00:00Z"} {
				wantTurnsListed(t, e.listTurns(e.admin, q), turnListed("bot", mine, turnStart))
				wantTurnsListed(t, e.listTurns(otherAdmin, q), turnListed("bot", theirs, turnStart))
			}
			got, err := e.st.TurnsByID(t.Context(), other.ID, "bot", []string{"t1"})
			if err != nil || len(got) != 1 || got[0].TenantID != other.ID {
				t.Errorf("TurnsByID(other tenant) = %+v, %v", got, err)
			}
			// A cursor from one tenant's list is refused in the other's: it
			// shows nothing of it and is never taken for a position there.
			for i := range 3 {
				e.postTurns(otherAdmin, turnBatchJSON("bot", turnJSON(fmt.Sprint("o", i)))).wantTurnsAccepted(t, 1, 0)
			}
			l := e.listTurnsPage(otherAdmin, "limit=1")
			if l.NextCursor == nil {
				t.Fatal("no next cursor")
			}
			e.do(http.MethodGet, "/api/v1/turns?cursor="+url.QueryEscape(*l.NextCursor), e.admin, nil).
				wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
		})
	}
}

func TestTurns_ListShowsTurnsAsSent(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			// Member order, number spelling, escapes, HTML-ish text, null and
			// [] and {} are all shown as sent.
			turn := `{"tool_calls_omitted_count":0,"turn_id":"<t&1>","input_text":"say \"hi\" \u2028 \\ \/ é 😀","final_text":null,` +
				`"tool_calls":[{"name":"x","outcome":"unknown","status_code":null,"latency_ms":1.50,"output":{"b":1E3,"a":[]},"entity_ids":{}}],` +
				`"agent_fingerprint":{"z":{},"a":[null]},"turn_index":0}`
			e.postTurns(e.key(gyre.RoleAgent), turnBatchJSON("<bot>", turn)).wantTurnsAccepted(t, 1, 0)
			wantTurnsListed(t, e.listTurns(e.admin, ""), turnListed("<bot>", turn, turnStart))
			// Insignificant whitespace in the sent text is the one thing not
			// kept in the listing (the stored body keeps it).
			spaced := "{ \"turn_id\" : \"s\" ,\n \"input_text\":null, \"final_text\":\" a  b \", \"tool_calls\":[ ],\"tool_calls_omitted_count\":0 }"
			e.postTurns(e.admin, turnBatchJSON("bot", spaced)).wantTurnsAccepted(t, 1, 0)
			wantTurnsListed(t, e.listTurns(e.admin, "agent_id=bot"),
				turnListed("bot", `{"turn_id":"s","input_text":null,"final_text":" a  b ","tool_calls":[],"tool_calls_omitted_count":0}`, turnStart))
			got, err := e.st.TurnsByID(t.Context(), e.tenant.ID, "bot", []string{"s"})
			if err != nil || len(got) != 1 || string(got[0].Body) != spaced {
				t.Errorf("stored body = %q, %v; want the bytes sent", got, err)
			}
		})
	}
}

func TestTurns_ListFiltersAndPages(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(turnStart))
			type sent struct {
				agent, turn, conv string
				at                time.Time
			}
			var all []sent
			for b := range 6 {
				agent := []string{"bot-a", "bot-b"}[b%2]
				var turns []string
				for i := range 7 {
					conv := fmt.Sprint("c", i%3)
					turn := turnJSON(fmt.Sprintf("b%d-%d", b, i), `"conversation_id":"`+conv+`"`)
					turns = append(turns, turn)
					all = append(all, sent{agent, turn, conv, e.clk.Now()})
				}
				e.postTurns(e.admin, turnBatchJSON(agent, turns...)).wantTurnsAccepted(t, 7, 0)
				e.clk.Advance(time.Second)
			}
			third := turnStart.Add(2 * time.Second)
			tests := []struct {
				query string
				keep  func(sent) bool
			}{
				{"", func(sent) bool { return true }},
				{"agent_id=bot-a", func(x sent) bool { return x.agent == "bot-a" }},
				{"conversation_id=c1", func(x sent) bool { return x.conv == "c1" }},
				{"agent_id=bot-b&conversation_id=c0", func(x sent) bool { return x.agent == "bot-b" && x.conv == "c0" }},
				{"since=" + url.QueryEscape(third.Format(time.RFC3339Nano)), func(x sent) bool { return !x.at.Before(third) }},
				{"since=" + url.QueryEscape(third.Add(time.Microsecond).Format(time.RFC3339Nano)), func(x sent) bool { return x.at.After(third) }},
				{"since=" + url.QueryEscape(third.In(time.FixedZone("", 5*3600+1800)).Format(time.RFC3339Nano)), func(x sent) bool { return !x.at.Before(third) }},
				{"agent_id=bot-a&since=" + url.QueryEscape(third.Format(time.RFC3339)), func(x sent) bool { return x.agent == "bot-a" && !x.at.Before(third.Truncate(time.Second)) }},
				{"agent_id=nobody", func(sent) bool { return false }},
				{"conversation_id=C1", func(sent) bool { return false }},
			}
			for _, tc := range tests {
				var want []string
				for _, x := range all {
					if tc.keep(x) {
						want = append(want, turnListed(x.agent, x.turn, x.at))
					}
				}
				for _, lim := range []string{"", "&limit=1", "&limit=5", "&limit=7", "&limit=500"} {
					q := strings.TrimPrefix(tc.query+lim, "&")
					wantTurnsListed(t, e.listTurns(e.admin, q), want...)
				}
			}
			// Page sizes: default 50, as asked, a cursor only before the end.
			l := e.listTurnsPage(e.admin, "")
			if len(l.Items) != 42 || l.NextCursor != nil {
				t.Errorf("default page: %d items, cursor %v; want 42 and null", len(l.Items), l.NextCursor)
			}
			l = e.listTurnsPage(e.admin, "limit=40")
			if len(l.Items) != 40 || l.NextCursor == nil {
				t.Fatalf("limit=40: %d items, cursor %v", len(l.Items), l.NextCursor)
			}
			l = e.listTurnsPage(e.admin, "limit=40&cursor="+url.QueryEscape(*l.NextCursor))
			if len(l.Items) != 2 || l.NextCursor != nil {
				t.Errorf("second page: %d items, cursor %v; want 2 and null", len(l.Items), l.NextCursor)
			}
			l = e.listTurnsPage(e.admin, "limit=42")
			if len(l.Items) != 42 || l.NextCursor != nil {
				t.Errorf("exact page: %d items, cursor %v; want 42 and null", len(l.Items), l.NextCursor)
			}
			// Readers may list; agents and evaluators may not.
			e.listTurnsPage(e.key(gyre.RoleReader), "agent_id=bot-a")
			for _, key := range []string{e.key(gyre.RoleAgent), e.key(gyre.RoleEvaluator)} {
				e.do(http.MethodGet, "/api/v1/turns", key, nil).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
			}
		})
	}
}

func TestTurns_ListBadQueryIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	e.postTurns(e.admin, turnBatchJSON("bot", turnJSON("a"), turnJSON("b"))).wantTurnsAccepted(t, 2, 0)
	keyCursor := func() string {
		e.key(gyre.RoleReader)
		r := e.do(http.MethodGet, "/api/v1/keys?limit=1", e.admin, nil)
		var l struct {
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &l); err != nil || l.NextCursor == "" {
			t.Fatalf("key cursor: %s %v", r.body, err)
		}
		return l.NextCursor
	}()
	for _, q := range []string{
		"limit=0", "limit=501", "limit=-1", "limit=x", "limit=", "limit=1.5",
		"cursor=", "cursor=junk", "cursor=" + url.QueryEscape(keyCursor), "cursor=" + strings.Repeat("A", 2000),
		"since=", "since=yesterday", "since=2025-01-31", "since=2025-01-31T12:00:00", "since=1738324800",
		"agent_id=", "agent_id=..", "agent_id=a%2Fb", "agent_id=%20bot", "agent_id=a%00b",
		"conversation_id=",
		"agent=bot", "turn_id=a", "agent_id=bot&agent_id=bot", "limit=1&limit=2",
		"%zz",
	} {
		e.do(http.MethodGet, "/api/v1/turns?"+q, e.admin, nil).wantError(t, http.StatusBadRequest, gyre.CodeInvalidQuery, "")
	}
}

func TestTurns_ResponseCountsAddUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(turnStart))
	key := e.key(gyre.RoleAgent, "bot")
	seen := map[string]bool{}
	for round := range 5 {
		var turns []string
		accepted := 0
		for i := range 10 + round*10 {
			id := fmt.Sprint("t", (i*7+round*3)%40)
			turns = append(turns, turnJSON(id))
			if !seen[id] {
				accepted++
				seen[id] = true
			}
		}
		e.postTurns(key, turnBatchJSON("bot", turns...)).wantTurnsAccepted(t, accepted, len(turns)-accepted)
	}
	if n := len(e.listTurns(e.admin, "")); n != len(seen) {
		t.Errorf("%d turns stored, want %d", n, len(seen))
	}
}
