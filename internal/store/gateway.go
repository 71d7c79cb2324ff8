package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/gyrehq/gyre"
)

// Sentinels of the gateway store.
var (
	// ErrPolicyExists: a policy of that name exists with a different body.
	ErrPolicyExists = errors.New("a different policy with this name exists")
	// ErrGatewayClosed: the rollout's gateway credential no longer admits
	// requests (not leased, revoked, past its deadline or lease).
	ErrGatewayClosed = errors.New("gateway credential no longer valid")
)

// JobReconcile is the job that decides a graded rollout's reconciliation
// once the gateway records it depends on are durable (SPEC §6.3).
const JobReconcile = "reconcile"

// Policy is a tenant's named gateway policy (SPEC §6.1). Policies are
// immutable: a new version is a new name.
type Policy struct {
	TenantID string
	Name     string
	// Body is the policy document as canonical JSON (RFC 8785); SHA256 is
	// the lowercase hex SHA-256 of Body and decides whether a second
	// creation is identical.
	Body      json.RawMessage
	SHA256    string
	CreatedAt time.Time
}

// GatewayAccess is what the gateway reads to admit one request for a
// rollout: the grant (with the batch's policy, resolved once when the
// batch was created), the lease and the lease clock at the read.
type GatewayAccess struct {
	GatewayGrant
	// LeaseExpires is the lease's expiry, nil if never leased.
	LeaseExpires *time.Time
	// Now is the lease clock at the read: the database's on PostgreSQL.
	Now time.Time
}

// Usable reports whether the credential admits requests at a.Now: the
// rollout is leased, its token not revoked, its lease live and its
// deadline not reached.
func (a GatewayAccess) Usable() bool {
	return a.State == gyre.StateLeased && !a.Revoked && a.Now.Before(a.Deadline) &&
		a.LeaseExpires != nil && a.Now.Before(*a.LeaseExpires)
}

// GatewayUsage totals what a rollout's durable gateway records spent.
type GatewayUsage struct {
	// Completions counts counted completions; Calls every record.
	Completions int
	Calls       int
	// TotalTokens sums usage.total_tokens; CostUSD the priced cost.
	TotalTokens int64
	CostUSD     float64
}

// GatewayRecord is one recorded gateway call (SPEC §6.2). The gateway
// mints ID, so writing a record twice (a provisional record made durable
// before the answer, then its final form) updates it in place.
type GatewayRecord struct {
	ID       string
	TenantID string
	AgentID  string
	// RolloutID is nil for production traffic (the policy endpoint).
	RolloutID *string
	ReplicaID string
	// Protocol is the call's wire protocol: "chat", "responses" or
	// "messages" (SPEC §6.1); empty is written as "chat".
	Protocol string
	// ResponseID is the id of a Responses answer, which a later request
	// of the same rollout may name as its previous_response_id; nil when
	// none.
	ResponseID *string
	Policy     *string
	Upstream   *string
	// Model is the model forwarded upstream; RequestedModel what the
	// agent asked for.
	Model          *string
	RequestedModel *string
	Status         int
	Counted        bool
	Reason         *string
	Stream         bool
	ReceivedAt     time.Time
	// Arrival is the replica's count of requests when this one arrived:
	// it orders the replica's records received in the same microsecond.
	Arrival     uint64
	FirstByteAt *time.Time
	DoneAt      *time.Time
	// RequestBlob and ResponseBlob are blob keys, nil when not captured.
	RequestBlob  *string
	ResponseBlob *string
	// Usage is the response's usage object, nil when none.
	Usage       json.RawMessage
	TotalTokens *int64
	CostUSD     *float64
	// Fingerprint holds the server-derived fingerprint parts of the call.
	Fingerprint json.RawMessage
	// EmittedIDs are the tool_calls[].id the response carried;
	// ConsumedIDs the tool_call_id of the request's role "tool" messages.
	EmittedIDs  []string
	ConsumedIDs []string
}

// GatewayCall is a stored record with its sequence number within its
// rollout: 1, 2, … in order of arrival (received time, then arrival count,
// then order of writing), whatever order the records were written in; 0
// for production traffic.
type GatewayCall struct {
	GatewayRecord
	Seq int
}

// GatewayFlush is one batch of records a replica makes durable, and
// optionally its heartbeat.
type GatewayFlush struct {
	ReplicaID string
	// Records are written in order; a new rollout record gets the next
	// sequence number of its rollout. Counted records extend their
	// rollout's live lease to now + the granted length (SPEC §4.4).
	Records []GatewayRecord
	// Beat, when set, records the replica alive until now + Beat.TTL and
	// flushed through Beat.FlushedThrough.
	Beat *ReplicaBeat
}

// ReplicaBeat is a gateway replica's heartbeat and flush watermark.
type ReplicaBeat struct {
	// FlushedThrough is a lease-clock time such that every request the
	// replica admitted on a credential read before it has its record
	// durable. It never moves backwards.
	FlushedThrough time.Time
	// TTL is how long the replica counts as alive without another beat.
	TTL time.Duration
	// Started is when the replica started.
	Started time.Time
}

// GatewaySeal is the reconciliation readiness of a submitted rollout.
type GatewaySeal struct {
	// SealedAt is the lease clock at the first seal.
	SealedAt time.Time
	// Ready: every replica that touched the rollout has flushed through
	// SealedAt or is dead.
	Ready bool
	// Lost: a dead replica that touched the rollout had not flushed
	// through SealedAt, so records may be lost.
	Lost bool
	// Waiting names the live replicas not yet flushed through SealedAt.
	Waiting []string
}

// ReconcileResult is a rollout's reconciliation and the training-grade
// decision it completes.
type ReconcileResult struct {
	RolloutID            string
	Reconciliation       string
	ReconciliationReason *string
	ServerFingerprint    json.RawMessage
	TrainingGrade        bool
	Reasons              []string
}

// GatewayStore keeps policies and what the LLM gateway records (SPEC §6).
type GatewayStore interface {
	// CreatePolicy stores a new policy and reports created = true, or
	// returns the existing one with created = false when its body is
	// identical; ErrPolicyExists when it differs.
	CreatePolicy(ctx context.Context, p Policy) (stored Policy, created bool, err error)
	// GetPolicy returns one of the tenant's policies; ErrNotFound if none.
	GetPolicy(ctx context.Context, tenantID, name string) (Policy, error)
	// ListPolicies lists the tenant's policies by name.
	ListPolicies(ctx context.Context, tenantID string, p Page) ([]Policy, string, error)
	// AgentPolicy returns the agent's promoted policy, nil when none.
	AgentPolicy(ctx context.Context, tenantID, agentID string) (*string, error)

	// GatewayAccess finds the rollout a gateway token belongs to, with
	// what admitting a request needs; ErrNotFound for unknown tokens.
	GatewayAccess(ctx context.Context, tokenHash [32]byte) (GatewayAccess, error)
	// GatewayUsage totals the rollout's durable records.
	GatewayUsage(ctx context.Context, rolloutID string) (GatewayUsage, error)
	// GatewayLive returns which of the rollouts still admit gateway
	// requests (see GatewayAccess.Usable), at the lease clock.
	GatewayLive(ctx context.Context, rolloutIDs []string) (map[string]bool, error)
	// LeaseClock reads the lease clock: the database's on PostgreSQL.
	LeaseClock(ctx context.Context) (time.Time, error)
	// TouchGateway durably records that replicaID serves the rollout,
	// under the rollout's row lock; ErrGatewayClosed when the credential
	// no longer admits requests, so no touch ever lands after the
	// rollout's output was accepted.
	TouchGateway(ctx context.Context, rolloutID, replicaID string) error
	// RecordGateway writes a batch of records and the replica's beat in
	// one transaction.
	RecordGateway(ctx context.Context, f GatewayFlush) error
	// StopReplica marks the replica dead now; drained says every record it
	// ever admitted is durable, so it holds up no reconciliation.
	StopReplica(ctx context.Context, replicaID string, drained bool) error
	// GatewayCalls returns the rollout's records in sequence order.
	GatewayCalls(ctx context.Context, tenantID, rolloutID string) ([]GatewayCall, error)
	// GatewayCallByResponse returns the rollout's record whose Responses
	// answer had the id responseID (the latest, should an upstream repeat
	// one); ErrNotFound if none.
	GatewayCallByResponse(ctx context.Context, tenantID, rolloutID, responseID string) (GatewayRecord, error)
	// GatewayRequestedModels lists the distinct models the agent asked
	// for in the rollout's durable records.
	GatewayRequestedModels(ctx context.Context, rolloutID string) ([]string, error)

	// SealGateway seals a submitted rollout for reconciliation (once) and
	// reports whether every replica that touched it is done with it.
	SealGateway(ctx context.Context, rolloutID string) (GatewaySeal, error)
	// FinishReconciliation stores a rollout's reconciliation, server
	// fingerprint and training-grade decision.
	FinishReconciliation(ctx context.Context, r ReconcileResult) error
}
