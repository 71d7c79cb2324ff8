package promotion

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors callers branch on. Stores wrap them with %w.
var (
	// ErrPolicyChanged: the agent's promoted policy is not the one the
	// caller expected; a compare-and-set changed nothing.
	ErrPolicyChanged = errors.New("the agent's promoted policy changed")
	// ErrNoPreviousPolicy: a rollback found no earlier entry to restore.
	ErrNoPreviousPolicy = errors.New("no previous promoted policy")
	// ErrAgentNotFound: gyre has never seen the agent in the tenant (no
	// turns, batches or rollouts).
	ErrAgentNotFound = errors.New("agent not found")
	// ErrPolicyNotFound: the policy to promote does not exist in the
	// tenant.
	ErrPolicyNotFound = errors.New("policy not found")
)

// Entry is one setting of an agent's promoted policy, newest last in a
// history. A rollback does not erase an entry: it marks it rolled back,
// so the history keeps who did what and when.
type Entry struct {
	// Seq orders an agent's entries, from 1.
	Seq int64
	// Policy is the policy this entry promoted.
	Policy string
	// SetBy says who set it: "key <key id>" for an admin call,
	// "promotion <id>" for a promotion job.
	SetBy string
	// SetAt is when it was set.
	SetAt time.Time
	// PromotionID is the promotion that set it, nil when set otherwise.
	PromotionID *string
	// RolledBackAt and RolledBackBy are set once a rollback popped this
	// entry; nil while it is live.
	RolledBackAt *time.Time
	RolledBackBy *string
}

// Live reports whether a rollback has not popped the entry.
func (e Entry) Live() bool { return e.RolledBackAt == nil }

// Change is one compare-and-set of an agent's promoted policy.
type Change struct {
	TenantID string
	AgentID  string
	// Expected is the promoted policy the caller measured against, nil
	// for "none yet". The change applies only while it is still current.
	Expected *string
	// Policy is the new promoted policy; it must exist in the tenant.
	Policy string
	// SetBy and PromotionID are recorded on the new entry.
	SetBy       string
	PromotionID *string
}

// Store is what this package needs from persistence. Every method acts in
// one tenant and never across tenants.
type Store interface {
	// AgentPolicy returns the agent's current promoted policy, nil when
	// none. An agent gyre has never seen has none.
	AgentPolicy(ctx context.Context, tenantID, agentID string) (*string, error)
	// SetPromotedPolicy makes c.Policy the agent's promoted policy if its
	// current one equals c.Expected, and appends an entry to its history,
	// atomically. ErrPolicyChanged when the current policy differs (of
	// concurrent changes with the same Expected exactly one wins),
	// ErrAgentNotFound, ErrPolicyNotFound.
	SetPromotedPolicy(ctx context.Context, c Change) (Entry, error)
	// RollbackPolicy pops the newest live entry of the agent's history and
	// restores the one before it, recording who rolled back and when;
	// ErrNoPreviousPolicy when fewer than two live entries exist,
	// ErrAgentNotFound.
	RollbackPolicy(ctx context.Context, tenantID, agentID, by string) (restored Entry, err error)
	// PolicyHistory lists every entry of the agent's history, oldest
	// first, rolled-back ones included; empty for an agent never promoted.
	PolicyHistory(ctx context.Context, tenantID, agentID string) ([]Entry, error)
}

// BatchPolicy is the policy a new batch runs under (SPEC §6.1): the one
// its body names, else the agent's promoted policy, else the server's
// default; "" when none applies. It is resolved once, when the batch is
// created, and stored on it, so a later promotion or rollback never
// switches a running rollout's policy mid-conversation.
func BatchPolicy(named, promoted *string, serverDefault string) string {
	switch {
	case named != nil && *named != "":
		return *named
	case promoted != nil && *promoted != "":
		return *promoted
	}
	return serverDefault
}

// ByKey is the SetBy of a change made with an API key.
func ByKey(keyID string) string { return "key " + keyID }

// ByPromotion is the SetBy of a change made by a promotion job.
func ByPromotion(promotionID string) string { return "promotion " + promotionID }
