package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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
	if err := requireJSON(r); err != nil {
		return err
	}
	raw, err := readBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	var allows func(string) bool // nil: the key may act for every agent
	if p.AgentIDs != nil {
		allows = p.AllowsAgent
	}
	batch, err := decodeTurnBatch(raw, allows)
	if err != nil {
		return err
	}
	res, err := s.store.InsertTurns(r.Context(), p.TenantID, batch.agentID, batch.turns)
	if err != nil {
		var ce *store.TurnConflictError
		if errors.As(err, &ce) {
			return gyre.Errorf(gyre.CodeTurnConflict,
				"turn %d differs from the turn with turn_id %q that agent_id %q already has "+
					"(stored, or earlier in this batch); nothing in the batch was stored",
				ce.Index, ce.TurnID, batch.agentID).AtPointer("/turns/" + strconv.Itoa(ce.Index))
		}
		return err
	}
	writeJSON(w, http.StatusOK, turnsAnswer{Accepted: res.Accepted, Duplicates: res.Duplicates})
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
//     (allows, if not nil, reports false) is 403 forbidden, whatever else is
//     wrong with it: the key may not speak for that agent at all;
//   - a body that is not a valid ProductionTurnBatch is 422 invalid_body
//     pointing at its first offending field in document order;
//   - otherwise each turn comes back with its exact bytes from raw, the
//     SHA-256 of its canonical JSON, and the members the store indexes.
//
// The validator parses the text once; one more pass over the bytes, with
// no value tree, finds the turns, canonicalizes each (jcs.Canonicalizer)
// and reads its identifiers.
func decodeTurnBatch(raw []byte, allows func(agentID string) bool) (turnBatch, error) {
	if allows != nil {
		if id, ok := peekAgentID(raw); ok && flywheel.ValidateAgentID(id) == nil && !allows(id) {
			return turnBatch{}, errAgentForbidden(id)
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
	// The contract holds from here on: an error below is a drift between it
	// and this code, not the client's fault.
	b, err := readTurnBatch(raw)
	if err != nil {
		return turnBatch{}, fmt.Errorf("read a valid turn batch: %w", err)
	}
	if allows != nil && !allows(b.agentID) { // peekAgentID saw it; kept next to its use
		return turnBatch{}, errAgentForbidden(b.agentID)
	}
	return b, nil
}

func errAgentForbidden(agentID string) error {
	return gyre.Errorf(gyre.CodeForbidden, "this API key may not act for agent_id %q", agentID)
}

// peekAgentID returns the top-level agent_id of raw when raw is, as far as
// a scan up to that member can tell, a JSON object whose agent_id member is
// a string.
func peekAgentID(raw []byte) (string, bool) {
	w := jcs.NewWalker(raw)
	var id string
	found := false
	_, err := w.Members(0, func(name string, start int) (int, error) {
		end, err := w.Skip(start)
		if err != nil || name != "agent_id" {
			return end, err
		}
		found = true
		if id, err = w.String(start, end); err != nil {
			return end, err
		}
		return end, errStopWalk
	})
	return id, found && (err == nil || errors.Is(err, errStopWalk))
}

var errStopWalk = errors.New("stop")

// readTurnBatch reads a body the validator has accepted: its agent_id and,
// for each turn, the exact bytes, canonical hash and indexed members.
func readTurnBatch(raw []byte) (turnBatch, error) {
	var b turnBatch
	r := turnReader{raw: raw, w: jcs.NewWalker(raw)}
	_, err := r.w.Members(0, func(name string, start int) (int, error) {
		switch name {
		case "agent_id":
			end, err := r.w.Skip(start)
			if err == nil {
				b.agentID, err = r.w.String(start, end)
			}
			return end, err
		case "turns":
			b.turns = make([]store.NewTurn, 0, store.MaxTurnsPerBatch)
			return r.w.Elements(start, func(start int) (int, error) {
				nt, end, err := r.turn(start)
				b.turns = append(b.turns, nt)
				return end, err
			})
		}
		return r.w.Skip(start)
	})
	switch {
	case err != nil:
		return turnBatch{}, err
	case b.agentID == "" || len(b.turns) == 0:
		return turnBatch{}, errors.New("no agent_id or no turns")
	}
	return b, nil
}

// turnReader reads the turns of one batch, reusing the canonicalizer's
// buffers from turn to turn.
type turnReader struct {
	raw   []byte
	w     jcs.Walker // over raw
	canon jcs.Canonicalizer
}

// turn returns the NewTurn of the turn whose text starts at raw[start:],
// and the offset just past it: one pass over the turn's bytes hashes its
// canonical form and reads the members the store indexes.
func (r *turnReader) turn(start int) (store.NewTurn, int, error) {
	var nt store.NewTurn
	start = r.w.Space(start)
	sum, end, err := r.canon.HashValue(r.raw, start, func(name string, vs, ve int) error {
		var dst *string
		switch name {
		case "turn_id":
			dst = &nt.TurnID
		case "conversation_id":
			dst = &nt.ConversationID
		case "task_id":
			dst = &nt.TaskID
		case "occurred_at":
			dst = &nt.OccurredAt
		default:
			return nil
		}
		var err error
		*dst, err = r.w.String(vs, ve)
		return err
	})
	if err != nil {
		return nt, end, fmt.Errorf("canonicalize a turn: %w", err)
	}
	if nt.TurnID == "" {
		return nt, end, errors.New("a turn without turn_id")
	}
	nt.Body = r.raw[start:end:end]
	nt.SHA256 = sum
	return nt, end, nil
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
			return gyre.Errorf(gyre.CodeInvalidQuery, "%s", turnsIDReason(err))
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

// turnsIDReason returns the sentence saying why a bare identifier check
// failed ("agent_id must …").
func turnsIDReason(err error) string {
	var ve *flywheel.ValidationError
	if errors.As(err, &ve) {
		return ve.First().Message
	}
	return "agent_id is not a valid agent id"
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
