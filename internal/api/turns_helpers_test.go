package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
)

// turnStart is the fake time a turn test's store starts at.
var turnStart = time.Date(2031, 3, 14, 15, 9, 26, 535897000, time.UTC)

func (e *env) postTurns(key, body string) response {
	e.t.Helper()
	return e.json(http.MethodPost, "/turns", key, body)
}

// wantTurnsAccepted checks a 200 answer of POST /turns.
func (r response) wantTurnsAccepted(t *testing.T, accepted, duplicates int) {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status = %d, want 200; body %s", r.status, r.body)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("answer %s: %v", r.body, err)
	}
	want := map[string]json.RawMessage{
		"accepted":   json.RawMessage(turnItoa(accepted)),
		"duplicates": json.RawMessage(turnItoa(duplicates)),
	}
	if len(got) != 2 || string(got["accepted"]) != string(want["accepted"]) || string(got["duplicates"]) != string(want["duplicates"]) {
		t.Fatalf("answer = %s, want {\"accepted\":%d,\"duplicates\":%d}", r.body, accepted, duplicates)
	}
}

// wantTurnsInvalid checks a 422 invalid_body answer pointing at pointer.
func (r response) wantTurnsInvalid(t *testing.T, pointer string) {
	t.Helper()
	r.wantError(t, http.StatusUnprocessableEntity, gyre.CodeInvalidBody, pointer)
}

func turnItoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// turnList is a decoded page of GET /api/v1/turns.
type turnList struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor *string           `json:"next_cursor"`
}

// listTurnsPage gets one page; query is the raw query string.
func (e *env) listTurnsPage(key, query string) turnList {
	e.t.Helper()
	r := e.do(http.MethodGet, "/api/v1/turns?"+query, key, nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("GET /api/v1/turns?%s = %d %s", query, r.status, r.body)
	}
	var l turnList
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil || l.Items == nil {
		e.t.Fatalf("list answer %s: %v (items must be a list)", r.body, err)
	}
	if !strings.Contains(string(r.body), `"next_cursor":`) {
		e.t.Fatalf("list answer %s has no next_cursor", r.body)
	}
	return l
}

// listTurns follows next_cursor to the end and returns every item.
func (e *env) listTurns(key, query string) []json.RawMessage {
	e.t.Helper()
	var out []json.RawMessage
	q := query
	for range 1000 {
		l := e.listTurnsPage(key, q)
		out = append(out, l.Items...)
		if l.NextCursor == nil {
			return out
		}
		v, err := url.ParseQuery(query)
		if err != nil {
			e.t.Fatal(err)
		}
		v.Set("cursor", *l.NextCursor)
		q = v.Encode()
	}
	e.t.Fatal("GET /api/v1/turns never ends")
	return nil
}

// turnStr encodes s as a JSON string without HTML escaping; control
// characters and invalid UTF-8 are escaped as encoding/json does.
func turnStr(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// turnObject builds a JSON object from default members, each a raw
// `"name":value`, changed by edits: a member whose name is a default
// replaces it in place, another is appended, and "-name" removes one.
func turnObject(defaults []string, edits ...string) string {
	fields := append([]string(nil), defaults...)
	for _, m := range edits {
		if name, ok := strings.CutPrefix(m, "-"); ok {
			for i, f := range fields {
				if turnMemberName(f) == name {
					fields = append(fields[:i], fields[i+1:]...)
					break
				}
			}
			continue
		}
		replaced := false
		for i, f := range fields {
			if turnMemberName(f) == turnMemberName(m) {
				fields[i] = m
				replaced = true
				break
			}
		}
		if !replaced {
			fields = append(fields, m)
		}
	}
	return "{" + strings.Join(fields, ",") + "}"
}

func turnMemberName(m string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(m, `"`), `":`)
	return name
}

// turnJSON is a valid ProductionTurn with turn_id id, edited as turnObject
// does: turnJSON("t", `"tool_calls":null`, "-final_text").
func turnJSON(id string, edits ...string) string {
	return turnObject([]string{
		`"turn_id":` + turnStr(id), `"input_text":"where is my order?"`, `"final_text":"it ships today"`,
		`"tool_calls":[]`, `"tool_calls_omitted_count":0`,
	}, edits...)
}

// turnToolCall is a valid ToolCallRecord, edited as turnObject does.
func turnToolCall(edits ...string) string {
	return turnObject([]string{`"name":"lookup_order"`, `"outcome":"ok"`, `"status_code":200`}, edits...)
}

// turnBatchJSON is a ProductionTurnBatch of agent's turns.
func turnBatchJSON(agent string, turns ...string) string {
	return `{"agent_id":` + turnStr(agent) + `,"turns":[` + strings.Join(turns, ",") + `]}`
}

// turnListed is how GET /api/v1/turns shows a turn sent as the compact JSON
// text turn by agent and received at at.
func turnListed(agent, turn string, at time.Time) string {
	return `{"agent_id":` + turnStr(agent) + `,` + turn[1:len(turn)-1] + `,"received_at":"` + at.UTC().Format(time.RFC3339Nano) + `"}`
}

// wantTurnsListed compares listed items with the expected texts, byte for byte.
func wantTurnsListed(t *testing.T, got []json.RawMessage, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("listed %d turns, want %d:\n got %s\nwant %s", len(got), len(want), turnJoinRaw(got), strings.Join(want, "\n     "))
		return
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("item %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

func turnJoinRaw(items []json.RawMessage) string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = string(it)
	}
	return strings.Join(s, "\n     ")
}
