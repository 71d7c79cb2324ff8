package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// TurnStore keeps production turns (SPEC §4.1): evidence, never training rows.
type TurnStore interface {
	// InsertTurns stores one POST /turns batch of agentID's turns in the
	// tenant, atomically (all of it or nothing), and durably: it returns
	// only after the write is committed.
	// Each turn is compared with the body already known for its identity
	// (tenant, agent_id, turn_id) — stored, or earlier in the same batch —
	// by the SHA-256 of its canonical JSON: an equal turn counts as a
	// duplicate and is not stored again; a different one makes the whole
	// batch fail with a *TurnConflictError (wrapping ErrConflict) naming
	// the first conflicting turn in batch order, and nothing is stored.
	// Accepted turns are stamped with the store clock's time of receipt,
	// and the agent is recorded in the tenant (first seen) in the same
	// transaction. ErrNotFound if the tenant does not exist.
	InsertTurns(ctx context.Context, tenantID, agentID string, turns []NewTurn) (TurnsResult, error)
	// ListTurns lists the tenant's stored turns that match f, in order of
	// receipt (ReceivedAt, then insertion order), one page at a time; next
	// is empty after the last page.
	ListTurns(ctx context.Context, tenantID string, f TurnFilter, p Page) (turns []Turn, next string, err error)
	// TurnsByID returns agentID's stored turns with the given turn ids, in
	// the order of their first occurrence in turnIDs; ids not stored (or
	// stored in another tenant or for another agent) are left out, and an
	// id given twice is returned once. It is how tasks are made from turns.
	TurnsByID(ctx context.Context, tenantID, agentID string, turnIDs []string) ([]Turn, error)
}

// MaxTurnsPerBatch is the most turns one InsertTurns call takes: the
// contract's ProductionTurnBatch holds 1 to 64.
const MaxTurnsPerBatch = 64

// NewTurn is one turn of a batch as InsertTurns stores it. The caller has
// validated the batch against the contract and extracted these members
// from the turn; the store keeps Body byte for byte.
type NewTurn struct {
	// TurnID is the caller's exact turn id.
	TurnID string
	// ConversationID is the optional correlation id, "" when the turn has
	// none (the contract forbids an empty one).
	ConversationID string
	// TaskID is the optional task id the customer supplied, "" when absent:
	// correlation evidence only, never a label or permission to train.
	TaskID string
	// OccurredAt is the customer's claim of when the turn happened, as
	// sent, "" when absent. It orders nothing: receipt time is the store's.
	OccurredAt string
	// Body is the turn element exactly as sent: the raw bytes of its JSON
	// object within the batch.
	Body []byte
	// SHA256 is the lowercase hex SHA-256 of Body's canonical JSON (RFC
	// 8785), which decides whether a resent turn is a duplicate.
	SHA256 string
}

// TurnsResult is what InsertTurns did: Accepted turns were stored, and
// Duplicates equalled a turn already known; they add up to the batch size.
type TurnsResult struct {
	Accepted   int
	Duplicates int
}

// TurnConflictError is InsertTurns's refusal of a batch in which a turn
// differs from the body already known for its identity. It wraps
// ErrConflict.
type TurnConflictError struct {
	// Index is the position in the batch of the first conflicting turn.
	Index int
	// TurnID is that turn's id.
	TurnID string
}

// Error names the conflicting turn.
func (e *TurnConflictError) Error() string {
	return fmt.Sprintf("turn %d (turn_id %q) differs from the turn already stored under its identity: %v",
		e.Index, e.TurnID, ErrConflict)
}

// Unwrap returns ErrConflict.
func (e *TurnConflictError) Unwrap() error { return ErrConflict }

// TurnFilter selects stored turns; zero fields select everything.
type TurnFilter struct {
	// AgentID keeps only this agent's turns.
	AgentID string
	// ConversationID keeps only turns of this conversation.
	ConversationID string
	// Since keeps only turns received at or after it.
	Since time.Time
	// Until keeps only turns received before it (the window's end is
	// exclusive, as in every list's creation window).
	Until time.Time
}

// Turn is a stored production turn.
type Turn struct {
	TenantID string
	AgentID  string
	TurnID   string
	// ConversationID, TaskID and OccurredAt are the turn's members of those
	// names as sent, "" when absent.
	ConversationID string
	TaskID         string
	OccurredAt     string
	// Body is the turn exactly as sent.
	Body json.RawMessage
	// SHA256 is the lowercase hex SHA-256 of Body's canonical JSON.
	SHA256 string
	// ReceivedAt is when gyre stored the turn, by the store's clock (UTC,
	// microsecond precision).
	ReceivedAt time.Time
}
