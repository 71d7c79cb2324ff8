package store

import (
	"context"
	"encoding/json"
	"time"
)

// GradingCall is one call a judge grader made to a model (SPEC §8): a call
// of kind grading. It lives apart from the gateway's records on purpose:
// it is never one of a rollout's gateway calls, never production traffic
// and never counted against a batch's budgets or limits. Its verdict
// links to it by ID (grade.Verdict.GradingCallIDs).
type GradingCall struct {
	// ID is minted by the caller (UUIDv7).
	ID       string
	TenantID string
	// SubjectKind is "rollout" or "run"; SubjectID the rollout id, or
	// "<experiment id>/<case id>/<repetition>" for an eval run.
	SubjectKind string
	SubjectID   string
	// Attempt is 1 for the first call of a verdict, 2 and 3 for the
	// retries of a malformed answer.
	Attempt  int
	Policy   string
	Upstream string
	Model    string
	// Status is the upstream's HTTP status, 0 when none arrived.
	Status int
	// Error says why the call failed (transport, status, envelope); nil
	// when it returned an answer, well-formed or not.
	Error *string
	// Request is the body sent upstream; Response the body received
	// (capped), nil when none.
	Request  json.RawMessage
	Response []byte
	// Usage is the response's usage object, nil when none.
	Usage     json.RawMessage
	StartedAt time.Time
	DoneAt    time.Time
}

// GradingStore keeps the calls judge graders make.
type GradingStore interface {
	// RecordGradingCall stores one grading call; ErrConflict if its ID
	// exists.
	RecordGradingCall(ctx context.Context, c GradingCall) error
	// GradingCalls lists a subject's grading calls in the tenant, oldest
	// first.
	GradingCalls(ctx context.Context, tenantID, subjectKind, subjectID string) ([]GradingCall, error)
}
