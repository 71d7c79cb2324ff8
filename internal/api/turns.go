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
	"slices"
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
//     (allows, if not nil, reports false) is 403 forbidden, whatever else is
//     wrong with it: the key may not speak for that agent at all;
//   - a body that is not a valid ProductionTurnBatch is 422 invalid_body
//     pointing at its first offending field in document order;
//   - otherwise each turn comes back with its exact bytes from raw, the
//     SHA-256 of its canonical JSON, and the members the store indexes.
//
// The validator parses the text once; one more pass over the bytes, with
// no value tree, finds the turns, canonicalizes each (turnCanon) and reads
// its identifiers.
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
	w := jsonWalker{src: raw}
	var id string
	found := false
	_, err := w.members(0, func(name string, start int) (int, error) {
		end, err := w.skip(start)
		if err != nil || name != "agent_id" {
			return end, err
		}
		found = true
		if id, err = w.stringAt(start, end); err != nil {
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
	w := jsonWalker{src: raw}
	c := turnCanon{w: jsonWalker{src: raw, names: make(map[string]string, 32)}}
	_, err := w.members(0, func(name string, start int) (int, error) {
		switch name {
		case "agent_id":
			end, err := w.skip(start)
			if err == nil {
				b.agentID, err = w.stringAt(start, end)
			}
			return end, err
		case "turns":
			b.turns = make([]store.NewTurn, 0, store.MaxTurnsPerBatch)
			return w.elements(start, func(start int) (int, error) {
				nt, end, err := c.turn(start)
				b.turns = append(b.turns, nt)
				return end, err
			})
		}
		return w.skip(start)
	})
	switch {
	case err != nil:
		return turnBatch{}, err
	case b.agentID == "" || len(b.turns) == 0:
		return turnBatch{}, errors.New("no agent_id or no turns")
	}
	return b, nil
}

// turnCanon computes each turn's canonical hash and reads its members,
// reusing its buffers from turn to turn.
type turnCanon struct {
	w       jsonWalker
	dst     []byte
	scratch []canonMember
	// top, if set, receives each member of the outermost object, in text
	// order, with its value's span.
	top func(name string, start, end int) error
}

// canonMember is an object member waiting to be written in name order.
type canonMember struct {
	name       string
	start, end int // the value's bytes
}

// maxCanonDepth is how deeply objects and arrays may nest in a turn that
// turnCanon canonicalizes itself. It reads an object's member values once
// to find them and again to write them in name order, so a nested value is
// read once per enclosing object; deeper turns (not seen in practice) go
// to jcs, which builds a tree instead, so that the work stays linear in
// the size of the body whatever its shape.
const maxCanonDepth = 24

var errCanonTooDeep = errors.New("nested too deeply for turnCanon")

// turn returns the NewTurn of the turn whose text starts at src[start:],
// and the offset just past it.
func (c *turnCanon) turn(start int) (store.NewTurn, int, error) {
	var nt store.NewTurn
	member := func(name string, vs, ve int) error {
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
		*dst, err = c.w.stringAt(vs, ve)
		return err
	}
	start = c.w.space(start)
	c.dst, c.scratch, c.top = c.dst[:0], c.scratch[:0], member
	end, err := c.value(start, 0)
	c.top = nil
	if errors.Is(err, errCanonTooDeep) {
		nt = store.NewTurn{}
		if end, err = c.w.skip(start); err == nil {
			_, err = c.w.members(start, func(name string, vs int) (int, error) {
				ve, err := c.w.skip(vs)
				if err == nil {
					err = member(name, vs, ve)
				}
				return ve, err
			})
		}
		if err == nil {
			c.dst, err = jcs.Canonicalize(c.w.src[start:end])
		}
	}
	if err != nil {
		return nt, end, fmt.Errorf("canonicalize a turn: %w", err)
	}
	if nt.TurnID == "" {
		return nt, end, errors.New("a turn without turn_id")
	}
	nt.Body = c.w.src[start:end:end]
	sum := sha256.Sum256(c.dst)
	nt.SHA256 = hex.EncodeToString(sum[:])
	return nt, end, nil
}

// value appends the RFC 8785 form of the value at src[pos:] to c.dst,
// exactly as jcs.Canonicalize writes it, and returns the offset just past
// the value. It reads text that jcs.Parse accepts (the validator parsed
// it). Strings without escapes are copied as they are: JSON text cannot
// hold unescaped any character RFC 8785 escapes.
func (c *turnCanon) value(pos, depth int) (int, error) {
	src := c.w.src
	pos = c.w.space(pos)
	if pos >= len(src) {
		return pos, errors.New("value expected")
	}
	switch ch := src[pos]; {
	case ch == '{':
		if depth >= maxCanonDepth {
			return pos, errCanonTooDeep
		}
		return c.object(pos, depth+1)
	case ch == '[':
		if depth >= maxCanonDepth {
			return pos, errCanonTooDeep
		}
		c.dst = append(c.dst, '[')
		first := true
		end, err := c.w.elements(pos, func(start int) (int, error) {
			if !first {
				c.dst = append(c.dst, ',')
			}
			first = false
			return c.value(start, depth+1)
		})
		c.dst = append(c.dst, ']')
		return end, err
	case ch == '"':
		end, err := c.w.skip(pos)
		if err != nil {
			return end, err
		}
		if bytes.IndexByte(src[pos:end], '\\') < 0 {
			c.dst = append(c.dst, src[pos:end]...)
			return end, nil
		}
		s, err := c.w.stringAt(pos, end)
		if err != nil {
			return end, err
		}
		c.dst, err = jcs.Append(c.dst, s)
		return end, err
	case ch == 't' || ch == 'f' || ch == 'n':
		end, err := c.w.skip(pos)
		c.dst = append(c.dst, src[pos:end]...)
		return end, err
	default:
		end, err := c.w.skip(pos)
		if err != nil {
			return end, err
		}
		c.dst, err = appendCanonNumber(c.dst, src[pos:end])
		return end, err
	}
}

// object writes the object at src[pos:] with its members sorted as RFC
// 8785 §3.2.3 requires (jcs.CompareKeys) and returns the offset past it.
func (c *turnCanon) object(pos, depth int) (int, error) {
	base := len(c.scratch)
	end, err := c.w.members(pos, func(name string, start int) (int, error) {
		e, err := c.w.skip(start)
		if err != nil {
			return e, err
		}
		c.scratch = append(c.scratch, canonMember{name: name, start: start, end: e})
		if depth == 1 && c.top != nil {
			err = c.top(name, start, e)
		}
		return e, err
	})
	if err != nil {
		return end, err
	}
	n := len(c.scratch) - base
	slices.SortFunc(c.scratch[base:], func(a, b canonMember) int { return jcs.CompareKeys(a.name, b.name) })
	c.dst = append(c.dst, '{')
	for i := range n {
		// Nested objects append to c.scratch past this object's members
		// and cut it back; index afresh, the array may have moved.
		m := c.scratch[base+i]
		if i > 0 {
			c.dst = append(c.dst, ',')
		}
		if c.dst, err = appendCanonName(c.dst, m.name); err != nil {
			return end, err
		}
		c.dst = append(c.dst, ':')
		if _, err := c.value(m.start, depth); err != nil {
			return end, err
		}
	}
	c.dst = append(c.dst, '}')
	c.scratch = c.scratch[:base]
	return end, nil
}

// appendCanonName appends the canonical form of a member name: as it is,
// quoted, unless it holds one of the characters RFC 8785 escapes (", \ and
// the C0 controls), when jcs writes it.
func appendCanonName(dst []byte, name string) ([]byte, error) {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == '"' || c == '\\' {
			return jcs.Append(dst, name)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"'), nil
}

// appendCanonNumber appends the canonical form of the JSON number text
// num. A plain integer of up to 15 digits is its own canonical form (but
// -0 is 0); anything else goes through jcs, as jcs.Canonicalize does.
func appendCanonNumber(dst, num []byte) ([]byte, error) {
	digits := num
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	plain := len(digits) > 0 && len(digits) <= 15 && (digits[0] != '0' || len(digits) == 1)
	for _, d := range digits {
		if d < '0' || d > '9' {
			plain = false
			break
		}
	}
	if plain {
		if len(num) == 2 && num[0] == '-' && num[1] == '0' {
			return append(dst, '0'), nil
		}
		return append(dst, num...), nil
	}
	return jcs.Append(dst, json.Number(num))
}

// jsonWalker reads JSON text without building values. It assumes the text
// is JSON and stops with an error, never a wrong answer, when it is not.
type jsonWalker struct {
	src []byte
	// names interns object member names, if set: a batch repeats the same
	// few names in every turn.
	names map[string]string
}

// maxInternedNames bounds jsonWalker.names for bodies with many distinct
// member names.
const maxInternedNames = 256

// space returns the offset of the first non-space byte at or after pos.
func (w jsonWalker) space(pos int) int {
	for pos < len(w.src) {
		switch w.src[pos] {
		case ' ', '\t', '\n', '\r':
			pos++
		default:
			return pos
		}
	}
	return pos
}

// members calls fn with the name of each member of the object at
// src[pos:] and the offset of its value, in text order; fn returns the
// offset just past the value (w.skip finds it when fn does not read the
// value itself). It returns the offset just past the object, or fn's
// first error.
func (w jsonWalker) members(pos int, fn func(name string, start int) (end int, err error)) (int, error) {
	pos = w.space(pos)
	if pos >= len(w.src) || w.src[pos] != '{' {
		return pos, errors.New("not an object")
	}
	pos = w.space(pos + 1)
	if pos < len(w.src) && w.src[pos] == '}' {
		return pos + 1, nil
	}
	for {
		nameEnd, err := w.skip(pos)
		if err != nil || w.src[pos] != '"' {
			return pos, errors.New("member name expected")
		}
		name, err := w.name(pos, nameEnd)
		if err != nil {
			return pos, err
		}
		pos = w.space(nameEnd)
		if pos >= len(w.src) || w.src[pos] != ':' {
			return pos, errors.New("colon expected")
		}
		end, err := fn(name, w.space(pos+1))
		if err != nil {
			return end, err
		}
		pos = w.space(end)
		switch {
		case pos < len(w.src) && w.src[pos] == ',':
			pos = w.space(pos + 1)
		case pos < len(w.src) && w.src[pos] == '}':
			return pos + 1, nil
		default:
			return pos, errors.New("comma or } expected")
		}
	}
}

// elements calls fn with the offset of each element of the array at
// src[pos:], in order; fn returns the offset just past the element. It
// returns the offset just past the array, or fn's first error.
func (w jsonWalker) elements(pos int, fn func(start int) (end int, err error)) (int, error) {
	pos = w.space(pos)
	if pos >= len(w.src) || w.src[pos] != '[' {
		return pos, errors.New("not an array")
	}
	pos = w.space(pos + 1)
	if pos < len(w.src) && w.src[pos] == ']' {
		return pos + 1, nil
	}
	for {
		end, err := fn(pos)
		if err != nil {
			return end, err
		}
		pos = w.space(end)
		switch {
		case pos < len(w.src) && w.src[pos] == ',':
			pos = w.space(pos + 1)
		case pos < len(w.src) && w.src[pos] == ']':
			return pos + 1, nil
		default:
			return pos, errors.New("comma or ] expected")
		}
	}
}

// skip returns the offset just past the value at src[pos:].
func (w jsonWalker) skip(pos int) (int, error) {
	if pos >= len(w.src) {
		return pos, errors.New("value expected")
	}
	switch w.src[pos] {
	case '"':
		// Find each quote with IndexByte (vectorised); one preceded by an
		// odd run of backslashes is escaped.
		for pos++; pos < len(w.src); {
			i := bytes.IndexByte(w.src[pos:], '"')
			if i < 0 {
				break
			}
			q := pos + i
			bs := 0
			for j := q - 1; j >= pos && w.src[j] == '\\'; j-- {
				bs++
			}
			if bs%2 == 0 {
				return q + 1, nil
			}
			pos = q + 1
		}
		return len(w.src), errors.New("unterminated string")
	case '{', '[':
		depth := 0
		for pos < len(w.src) {
			switch w.src[pos] {
			case '"':
				end, err := w.skip(pos)
				if err != nil {
					return end, err
				}
				pos = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return pos + 1, nil
				}
			}
			pos++
		}
		return pos, errors.New("unterminated object or array")
	default: // number or literal
		start := pos
		for pos < len(w.src) {
			switch w.src[pos] {
			case ',', '}', ']', ':', ' ', '\t', '\n', '\r':
				if pos == start {
					return pos, errors.New("value expected")
				}
				return pos, nil
			}
			pos++
		}
		return pos, nil
	}
}

// name decodes the member name literal src[start:end], interned.
func (w jsonWalker) name(start, end int) (string, error) {
	if w.names == nil || end-start < 2 {
		return w.stringAt(start, end)
	}
	if k, ok := w.names[string(w.src[start+1:end-1])]; ok {
		return k, nil
	}
	k, err := w.stringAt(start, end)
	if err == nil && len(w.names) < maxInternedNames && !bytes.Contains(w.src[start:end], []byte{'\\'}) {
		w.names[k] = k
	}
	return k, err
}

// stringAt decodes the JSON string literal src[start:end].
func (w jsonWalker) stringAt(start, end int) (string, error) {
	lit := w.src[start:end]
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", errors.New("not a string")
	}
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return "", fmt.Errorf("decode string: %w", err)
	}
	return s, nil
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
