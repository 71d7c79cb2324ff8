package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

// turnRoutes registers production capture (SPEC §4.1).
func (s *Server) turnRoutes() {
	s.handle("POST /turns", agentOnly, s.postTurns)
	s.handle("GET /api/v1/turns", reader, s.listTurns)
}

// turnsAnswer is the answer of POST /turns: Accepted + Duplicates is the
// number of turns in the batch.
type turnsAnswer struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
}

// postTurns is POST /turns: one ProductionTurnBatch, validated against the
// contract and stored atomically (SPEC §4.1). It answers 200 only after
// the batch is committed.
func (s *Server) postTurns(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	if err := turnsRequireJSON(r); err != nil {
		return err
	}
	raw, err := readBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	batch, err := decodeTurnBatch(raw, p.AllowsAgent)
	if err != nil {
		return err
	}
	res, err := s.store.InsertTurns(r.Context(), p.TenantID, batch.agentID, batch.turns)
	if err != nil {
		var ce *store.TurnConflictError
		if errors.As(err, &ce) {
			return gyre.Errorf(gyre.CodeTurnConflict,
				"turn %d has turn_id %q, under which gyre already holds a different turn for agent_id %q "+
					"(stored before, or earlier in this batch); nothing in the batch was stored. "+
					"Resend a turn unchanged, or give a different turn a new turn_id",
				ce.Index, ce.TurnID, batch.agentID).AtPointer("/turns/" + strconv.Itoa(ce.Index))
		}
		return err
	}
	writeJSON(w, http.StatusOK, turnsAnswer{Accepted: res.Accepted, Duplicates: res.Duplicates})
	return nil
}

// turnsRequireJSON refuses a declared Content-Type that is not JSON (415); a
// missing one is taken as JSON, as decodeJSON does.
func turnsRequireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return gyre.Errorf(gyre.CodeUnsupportedMedia, "Content-Type must be application/json")
	}
	return nil
}

// turnBatch is a decoded, contract-valid POST /turns body.
type turnBatch struct {
	agentID string
	turns   []store.NewTurn
}

// decodeTurnBatch checks raw, a POST /turns body, and returns what the
// store needs. In order:
//
//   - a body whose agent_id is a well-formed id outside the key's allow-list
//     (allows reports false) is 403 forbidden, whatever else is wrong with
//     it: the key may not speak for that agent at all;
//   - a body that is not a valid ProductionTurnBatch is 422 invalid_body
//     pointing at its first offending field in document order;
//   - otherwise each turn comes back with its exact bytes from raw, the
//     SHA-256 of its canonical JSON, and the members the store indexes.
//
// The text is parsed twice — once here into the tree the turns are
// canonicalized from, once inside the validator — and scanned once more
// for the byte spans of the turns.
func decodeTurnBatch(raw []byte, allows func(agentID string) bool) (turnBatch, error) {
	tree, perr := jcs.Parse(raw)
	if perr == nil && allows != nil {
		if obj, ok := tree.(map[string]any); ok {
			if id, ok := obj["agent_id"].(string); ok && flywheel.ValidateAgentID(id) == nil && !allows(id) {
				return turnBatch{}, gyre.Errorf(gyre.CodeForbidden, "this API key may not act for agent_id %q", id)
			}
		}
	}
	if err := flywheel.Validate(flywheel.DefProductionTurnBatch, raw); err != nil {
		var ve *flywheel.ValidationError
		if errors.As(err, &ve) {
			v := ve.First()
			return turnBatch{}, gyre.Errorf(gyre.CodeInvalidBody, "%s", v.Message).AtPointer(v.Pointer)
		}
		return turnBatch{}, fmt.Errorf("validate turn batch: %w", err)
	}
	if perr != nil {
		return turnBatch{}, fmt.Errorf("validator accepted a body jcs refuses: %w", perr)
	}
	// The contract holds from here on: the assertions below guard against a
	// drift between it and this code, not against the client.
	obj, _ := tree.(map[string]any)
	agentID, _ := obj["agent_id"].(string)
	elems, _ := obj["turns"].([]any)
	spans, err := turnSpans(raw)
	if err != nil || len(spans) != len(elems) || agentID == "" {
		return turnBatch{}, fmt.Errorf("locate turns in a valid batch: %d spans for %d turns: %v", len(spans), len(elems), err)
	}
	if allows != nil && !allows(agentID) { // checked above; kept next to its use
		return turnBatch{}, gyre.Errorf(gyre.CodeForbidden, "this API key may not act for agent_id %q", agentID)
	}
	b := turnBatch{agentID: agentID, turns: make([]store.NewTurn, len(elems))}
	var canon []byte
	for i, e := range elems {
		m, _ := e.(map[string]any)
		if canon, err = jcs.Append(canon[:0], m); err != nil {
			return turnBatch{}, fmt.Errorf("canonicalize turn %d: %w", i, err)
		}
		sum := sha256.Sum256(canon)
		nt := store.NewTurn{
			Body:   raw[spans[i].start:spans[i].end:spans[i].end],
			SHA256: hex.EncodeToString(sum[:]),
		}
		nt.TurnID, _ = m["turn_id"].(string)
		nt.ConversationID, _ = m["conversation_id"].(string)
		nt.TaskID, _ = m["task_id"].(string)
		nt.OccurredAt, _ = m["occurred_at"].(string)
		if nt.TurnID == "" {
			return turnBatch{}, fmt.Errorf("turn %d of a valid batch has no turn_id", i)
		}
		b.turns[i] = nt
	}
	return b, nil
}

// turnSpan is raw[start:end].
type turnSpan struct{ start, end int }

// turnSpans returns where each element of the top-level "turns" array sits
// in raw, a JSON object. It scans without building values and assumes
// valid JSON (the validator has accepted raw); on anything else it returns
// an error, never a wrong span silently.
func turnSpans(raw []byte) ([]turnSpan, error) {
	sc := turnScanner{data: raw}
	sc.space()
	if !sc.eat('{') {
		return nil, errors.New("body is not an object")
	}
	var spans []turnSpan
	found := false
	for sc.space(); !sc.eat('}'); {
		if sc.pos >= len(raw) {
			return nil, errors.New("body ends inside an object")
		}
		key, err := sc.key()
		if err != nil {
			return nil, err
		}
		sc.space()
		if !sc.eat(':') {
			return nil, errors.New("member without a colon")
		}
		sc.space()
		if key == "turns" {
			if found {
				return nil, errors.New("turns appears twice")
			}
			found = true
			if spans, err = sc.elements(); err != nil {
				return nil, err
			}
		} else if err := sc.skip(); err != nil {
			return nil, err
		}
		sc.space()
		sc.eat(',')
		sc.space()
	}
	if !found {
		return nil, errors.New("no turns member")
	}
	return spans, nil
}

// turnScanner walks JSON text by bytes.
type turnScanner struct {
	data []byte
	pos  int
}

func (s *turnScanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *turnScanner) eat(c byte) bool {
	if s.pos < len(s.data) && s.data[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

// key reads an object member name, decoding escapes when there are any.
func (s *turnScanner) key() (string, error) {
	start := s.pos
	if err := s.str(); err != nil {
		return "", err
	}
	lit := s.data[start:s.pos]
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1]), nil
	}
	var k string
	if err := json.Unmarshal(lit, &k); err != nil {
		return "", fmt.Errorf("member name: %w", err)
	}
	return k, nil
}

// str skips a string literal.
func (s *turnScanner) str() error {
	if !s.eat('"') {
		return errors.New("expected a string")
	}
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case '\\':
			s.pos += 2
			continue
		case '"':
			s.pos++
			return nil
		}
		s.pos++
	}
	return errors.New("unterminated string")
}

// elements reads an array and returns the span of each element.
func (s *turnScanner) elements() ([]turnSpan, error) {
	if !s.eat('[') {
		return nil, errors.New("turns is not an array")
	}
	var spans []turnSpan
	for s.space(); !s.eat(']'); {
		start := s.pos
		if err := s.skip(); err != nil {
			return nil, err
		}
		spans = append(spans, turnSpan{start, s.pos})
		s.space()
		if !s.eat(',') && (s.pos >= len(s.data) || s.data[s.pos] != ']') {
			return nil, errors.New("array element not followed by a comma or ]")
		}
		s.space()
	}
	return spans, nil
}

// skip moves past one value.
func (s *turnScanner) skip() error {
	if s.pos >= len(s.data) {
		return errors.New("value expected")
	}
	switch s.data[s.pos] {
	case '"':
		return s.str()
	case '{', '[':
		depth := 0
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case '"':
				if err := s.str(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.pos++
					return nil
				}
			}
			s.pos++
		}
		return errors.New("unterminated container")
	default: // number or literal
		start := s.pos
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if s.pos == start {
					return errors.New("value expected")
				}
				return nil
			}
			s.pos++
		}
		return nil
	}
}

// listTurns is GET /api/v1/turns: the tenant's stored turns in order of
// receipt, optionally for one agent_id, one conversation_id, and received
// at or after since (RFC 3339).
//
// Each item is the turn exactly as it was sent — every member, its order
// and spelling, null kept as null and [] as [] (insignificant whitespace
// aside) — flattened into one object between two members gyre adds:
// "agent_id" first, the batch's agent, and "received_at" last, gyre's own
// receipt time (RFC 3339, UTC). The contract forbids either name inside a
// turn, so nothing collides:
//
//	{"agent_id":"support-bot","turn_id":"t-1",…,"occurred_at":"…","received_at":"2031-03-14T15:09:26.535897Z"}
func (s *Server) listTurns(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	q, err := queryParams(r, "agent_id", "conversation_id", "since", "limit", "cursor")
	if err != nil {
		return err
	}
	pg, err := page(q)
	if err != nil {
		return err
	}
	var f store.TurnFilter
	if v, ok := q["agent_id"]; ok {
		if err := flywheel.ValidateAgentID(v); err != nil {
			return gyre.Errorf(gyre.CodeInvalidQuery, "agent_id is not a valid agent id: %s", turnsIDReason(err))
		}
		f.AgentID = v
	}
	if v, ok := q["conversation_id"]; ok {
		if v == "" {
			return gyre.Errorf(gyre.CodeInvalidQuery, "conversation_id must not be empty")
		}
		f.ConversationID = v
	}
	if v, ok := q["since"]; ok {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return gyre.Errorf(gyre.CodeInvalidQuery, "since must be an RFC 3339 date-time such as 2025-01-31T12:00:00Z")
		}
		f.Since = t
	}
	turns, next, err := s.store.ListTurns(r.Context(), p.TenantID, f, pg)
	if err != nil {
		return err
	}
	items := make([]json.RawMessage, len(turns))
	for i, t := range turns {
		if items[i], err = turnItem(t); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// turnsIDReason returns the reason a bare identifier check failed.
func turnsIDReason(err error) string {
	var ve *flywheel.ValidationError
	if errors.As(err, &ve) {
		return ve.First().Message
	}
	return "invalid"
}

// turnItem is a stored turn as GET /api/v1/turns lists it: its body as
// sent, between "agent_id" and "received_at".
func turnItem(t store.Turn) (json.RawMessage, error) {
	body := bytes.TrimSpace(t.Body)
	if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' {
		return nil, fmt.Errorf("stored turn %q of agent %q is not a JSON object", t.TurnID, t.AgentID)
	}
	inner := bytes.TrimSpace(body[1 : len(body)-1])
	var b bytes.Buffer
	b.Grow(len(body) + len(t.AgentID) + 64)
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	b.WriteString(`{"agent_id":`)
	if err := enc.Encode(t.AgentID); err != nil {
		return nil, fmt.Errorf("encode agent id: %w", err)
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	b.WriteByte(',')
	if len(inner) > 0 {
		b.Write(inner)
		b.WriteByte(',')
	}
	b.WriteString(`"received_at":"`)
	b.WriteString(t.ReceivedAt.UTC().Format(time.RFC3339Nano))
	b.WriteString(`"}`)
	return b.Bytes(), nil
}
