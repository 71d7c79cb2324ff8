package store

import (
	"context"
	"encoding/json"
	"time"
)

// JobPromotion is the durable job that drives a promotion to its
// decision; its subject is the promotion id.
const JobPromotion = "promotion"

// Promotion is one comparison of a candidate policy with a baseline for
// an agent, and its outcome (SPEC §10).
type Promotion struct {
	ID        string
	TenantID  string
	AgentID   string
	Candidate string
	Baseline  string
	// ExpectedPolicy is the agent's promoted policy when the promotion
	// started (nil: none). Promoting compares-and-sets against it.
	ExpectedPolicy *string
	// Suite and SuiteVersion name the suite the tasks were made from; nil
	// when the promotion was given task ids.
	Suite        *string
	SuiteVersion *string
	// TaskIDs are the tasks both sides run, in order.
	TaskIDs         []string
	Repetitions     int
	MinDelta        float64
	MaxExcludedRate float64
	DeadlineS       float64
	Seed            uint64
	// State is a promotion.State*; Reasons its reason codes, empty while
	// running and when promoted.
	State   string
	Reasons []string
	// BaselineBatchID and CandidateBatchID are the sides' batches.
	BaselineBatchID  *string
	CandidateBatchID *string
	// Evidence is the decision's evidence (promotion.Evidence as JSON),
	// nil until decided.
	Evidence   json.RawMessage
	CreatedBy  string
	CreatedAt  time.Time
	DeadlineAt time.Time
	// DecidedAt is when the promotion left running; nil while it runs.
	DecidedAt *time.Time
}

// NewPromotion is what CreatePromotion stores.
type NewPromotion struct {
	// ID is minted by the caller (UUIDv7).
	ID             string
	TenantID       string
	AgentID        string
	Candidate      string
	Baseline       string
	ExpectedPolicy *string
	// Exactly one of SuiteTasks (the tasks to make from a suite version's
	// cases) and TaskIDs (existing tasks) is set.
	SuiteTasks      *SuiteTasks
	TaskIDs         []string
	Repetitions     int
	MinDelta        float64
	MaxExcludedRate float64
	DeadlineS       float64
	Seed            uint64
	CreatedBy       string
	// Batch settings of both sides' batches.
	BatchDeadlineS float64
	MaxAttempts    int
	RetryOn        []string
}

// PromotionFilter narrows ListPromotions; empty fields match everything.
type PromotionFilter struct {
	AgentID string
	State   string
	// Since and Until keep only promotions started at or after Since and
	// before Until; a zero end is open.
	Since, Until time.Time
}

// PromotionEnd is how a running promotion ends: decided (promoted or
// rejected, with its evidence) or failed with a reason.
type PromotionEnd struct {
	State    string
	Reasons  []string
	Evidence json.RawMessage
}

// SideTally counts one task's rollouts on one side of a promotion that
// ended and were not replaced (by a retry or a release's re-queue).
type SideTally struct {
	// Total counts them all.
	Total int
	// Passed, Failed and Unscored count graded rollouts without an
	// exclusion by their current outcome.
	Passed   int
	Failed   int
	Unscored int
	// Excluded counts graded rollouts with an exclusion and rollouts
	// that ended deadline_exceeded.
	Excluded int
	// Abandoned counts rollouts that ended abandoned or cancelled.
	Abandoned int
}

// TaskTally is one task's tallies on both sides.
type TaskTally struct {
	TaskID    string
	CaseID    string
	Baseline  SideTally
	Candidate SideTally
}

// PromotionTally is what a promotion's batches have done so far.
type PromotionTally struct {
	// Open counts rollouts not ended yet (queued, leased or submitted).
	Open int
	// Tasks has one entry per task of the promotion, in its order.
	Tasks []TaskTally
}

// PromotionStore keeps promotions (SPEC §10).
type PromotionStore interface {
	// CreatePromotion, in one transaction: refuses a second running
	// promotion of the agent (promotion.ErrRunning; of concurrent creates
	// exactly one wins), makes the tasks once (from SuiteTasks) or checks
	// the given ones, creates one batch per side over the same task ids
	// with group size Repetitions, each with its policy stored and tagged
	// with the promotion id and side, stores the promotion running with
	// both batch ids, and enqueues its job. A *FieldError names a bad
	// field: /agent_id (promotion.ErrAgentNotFound), /candidate or
	// /baseline (ErrPolicyNotFound), /suite (ErrNotFound),
	// /task_ids/<i> (ErrNotFound).
	CreatePromotion(ctx context.Context, p NewPromotion) (Promotion, error)
	// AgentSeen reports whether gyre has seen the agent in the tenant
	// (a turn, a batch or a rollout).
	AgentSeen(ctx context.Context, tenantID, agentID string) (bool, error)
	// GetPromotion returns one of the tenant's promotions.
	GetPromotion(ctx context.Context, tenantID, id string) (Promotion, error)
	// PromotionByID returns a promotion whatever its tenant, for its job.
	PromotionByID(ctx context.Context, id string) (Promotion, error)
	// ListPromotions lists the tenant's promotions, newest first.
	ListPromotions(ctx context.Context, tenantID string, f PromotionFilter, p Page) ([]Promotion, string, error)
	// TallyPromotion counts the rollouts of the promotion's batches.
	TallyPromotion(ctx context.Context, id string) (PromotionTally, error)
	// EndPromotion ends a running promotion exactly once: a
	// compare-and-set on state running (promotion.ErrDecided when it
	// already ended; of concurrent calls exactly one wins). Ending
	// promoted also makes the candidate the agent's promoted policy in
	// the same transaction, compare-and-set against ExpectedPolicy; when
	// that changed, the promotion ends failed (baseline_changed) instead,
	// keeping the evidence. Ending failed cancels both batches. It
	// returns the promotion as stored.
	EndPromotion(ctx context.Context, tenantID, id string, e PromotionEnd) (Promotion, error)
	// RenewJob extends a claimed job's lease to now + lease;
	// ErrLeaseLost when the claim is no longer this one (it lapsed and
	// another took the job, or the job was finished).
	RenewJob(ctx context.Context, j Job, lease time.Duration) error
}
