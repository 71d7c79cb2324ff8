package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/gyrehq/gyre"
)

// Sentinels of the rollout state machine, in the order the flywheel/1
// routes check them (SPEC §4.4–§4.6).
var (
	// ErrLeaseLost: the lease token is not the claim's, or the lease lapsed.
	ErrLeaseLost = errors.New("lease lost")
	// ErrRolloutFinished: the rollout is submitted, graded or ended.
	ErrRolloutFinished = errors.New("rollout finished")
	// ErrOutputConflict: a different output is already stored.
	ErrOutputConflict = errors.New("a different output is already stored")
	// ErrDeadlineExceeded: the output came after deadline + grace.
	ErrDeadlineExceeded = errors.New("deadline exceeded")
	// ErrAlreadyStarted: the gateway counted a completion, so the rollout
	// cannot be released.
	ErrAlreadyStarted = errors.New("rollout already started")
	// ErrPolicyNotFound: a batch names a policy the tenant does not have.
	ErrPolicyNotFound = errors.New("policy not found")
	// ErrIdempotencyKeyReused: an Idempotency-Key seen with another body.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with another body")
	// ErrNotGraded: a regrade of a rollout or run that was never graded.
	ErrNotGraded = errors.New("not graded")
)

// FieldError is a store refusal caused by one field of the caller's
// request, which the API reports with Pointer.
type FieldError struct {
	Pointer string
	Err     error
}

func (e *FieldError) Error() string { return e.Pointer + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Batch is a set of rollouts minted together (SPEC §4.2).
type Batch struct {
	ID          string
	TenantID    string
	AgentID     string
	Policy      *string
	GroupSize   int
	DeadlineS   float64
	MaxAttempts int
	RetryOn     []string
	// Limits is the batch's gateway limits object, nil when none.
	Limits      json.RawMessage
	TaskIDs     []string
	CreatedAt   time.Time
	CancelledAt *time.Time
	// PromotionID and PromotionSide tag a batch a promotion created; nil
	// otherwise.
	PromotionID   *string
	PromotionSide *string
}

// NewBatch is what CreateBatch stores.
type NewBatch struct {
	TenantID    string
	AgentID     string
	Policy      *string
	TaskIDs     []string
	GroupSize   int
	DeadlineS   float64
	MaxAttempts int
	RetryOn     []string
	Limits      json.RawMessage
	// IdempotencyKey, when set, returns the batch created under the same
	// key in the last 24 hours instead of creating another. RequestSHA256
	// is the hash of the request's canonical body: the same key with
	// another hash is ErrIdempotencyKeyReused.
	IdempotencyKey string
	RequestSHA256  string
	// PromotionID and PromotionSide tag a promotion's batch; only
	// CreatePromotion sets them.
	PromotionID   *string
	PromotionSide *string
}

// BatchSummary is a batch with its progress and results, all computed by
// the database.
type BatchSummary struct {
	Batch
	// State is running, finished or cancelled (gyre.BatchState).
	State gyre.BatchState
	// Counts has one entry per rollout state with at least one rollout.
	Counts map[gyre.RolloutState]int
	// Groups is the number of task groups. A group whose rollouts have
	// all reached a final state (graded or ended by the server) is
	// cancelled when one of them was cancelled, else complete.
	Groups          int
	GroupsComplete  int
	GroupsCancelled int
	// Passed, Failed and Unscored count graded rollouts without an
	// exclusion by the outcome of their current verdict set (Unscored:
	// every deciding grader abstained); Excluded counts graded rollouts
	// whose output carries an exclusion.
	Passed   int
	Failed   int
	Unscored int
	Excluded int
	// MeanReward is the mean reward (SPEC §9) of graded rollouts without
	// an exclusion that have one, over RewardN rollouts; nil when none.
	MeanReward *float64
	RewardN    int
	// Finished counts the batch's finished rollouts: those that were not
	// replaced (by a retry or a release's re-queue) and ended graded with
	// their training grade decided, abandoned or deadline_exceeded.
	// Released, cancelled, retried and still-pending rollouts are not
	// finished.
	Finished int
	// TrainingGrade counts rollouts decided training grade.
	TrainingGrade int
	// NotTrainingGrade counts, over the finished rollouts that are not
	// training grade, each reason they list; a rollout the server ended
	// counts under "state:<name>".
	NotTrainingGrade map[string]int
}

// BatchFilter narrows ListBatches; empty fields match everything.
type BatchFilter struct {
	AgentID string
	State   gyre.BatchState
	// Since, when set, keeps the batches created at or after it.
	Since time.Time
}

// Rollout is one attempt at one task by one agent: the attribution unit.
type Rollout struct {
	ID            string
	TenantID      string
	AgentID       string
	BatchID       string
	TaskID        string
	GroupID       string
	Attempt       int
	State         gyre.RolloutState
	WorkerID      *string
	WorkerVersion *string
	TurnInput     string
	CreatedAt     time.Time
	ClaimedAt     *time.Time
	// LeaseGrant is the lease length granted at claim; renewals extend
	// the lease to now + LeaseGrant.
	LeaseGrant     time.Duration
	LeaseExpiresAt *time.Time
	Deadline       *time.Time
	SubmittedAt    *time.Time
	EndedAt        *time.Time
	GradedAt       *time.Time
	// Output is the accepted RolloutOutput after intake normalisation,
	// nil until one is accepted.
	Output          json.RawMessage
	ExclusionReason *string
	// Reconciliation is on_policy, off_policy or unreconciled; nil until
	// decided.
	Reconciliation       *string
	ReconciliationReason *string
	ServerFingerprint    json.RawMessage
	// TrainingGrade is nil until decided.
	TrainingGrade           *bool
	NotTrainingGradeReasons []string
	// Outcome is the current verdict set's classification (passed,
	// failed or unscored) and Reward its reward; nil until graded, or
	// for a reward when no non-optional grader gave a score.
	Outcome *string
	Reward  *float64
}

// RolloutSecrets are the hashes of one rollout's fresh secrets; the
// plaintexts go to the worker once and are never stored.
type RolloutSecrets struct {
	LeaseToken   [32]byte
	GatewayToken [32]byte
	GatewayKey   [32]byte
}

// ClaimRequest leases up to Max queued rollouts of one agent.
type ClaimRequest struct {
	TenantID      string
	AgentID       string
	Max           int
	Lease         time.Duration // already clamped by the caller
	WorkerID      string
	WorkerVersion string
	// IdempotencyKey, when set, makes a retried claim whose leases are
	// still live return the same rollouts, with Secrets rotated in.
	IdempotencyKey string
	// Secrets holds Max sets of fresh secrets, one per rollout claimed.
	Secrets []RolloutSecrets
}

// Claimed is one leased rollout; Secrets indexes ClaimRequest.Secrets.
type Claimed struct {
	Rollout Rollout
	Secrets int
}

// ClaimResult is what Claim leased.
type ClaimResult struct {
	Rollouts []Claimed
	// MoreQueued reports whether queued work remains for the agent.
	MoreQueued bool
	// Now is the store's clock at the claim, for the response's Date.
	Now time.Time
}

// OutputSubmission is an agent's RolloutOutput, validated and normalised.
type OutputSubmission struct {
	TenantID   string
	RolloutID  string
	LeaseToken [32]byte
	// Output is the normalised RolloutOutput JSON; OutputHash the SHA-256
	// of its JCS form, which decides replays.
	Output     json.RawMessage
	OutputHash string
	// Exclusion is the output's exclusion reason, nil when none.
	Exclusion *string
	// Grace is how long after the deadline an output is still accepted.
	Grace time.Duration
}

// OutputResult is what SubmitOutput did.
type OutputResult struct {
	State    gyre.RolloutState
	Replayed bool
	// Retry is the id of the rollout minted to retry this one, if any.
	Retry string
}

// SweepResult lists what one watchdog sweep changed.
type SweepResult struct {
	Abandoned        []string
	DeadlineExceeded []string
	// Retries are the rollouts minted for abandoned ones.
	Retries []Requeued
}

// Requeued names a rollout queued by the store itself (a retry), so the
// caller can wake that agent's claimers.
type Requeued struct {
	RolloutID string
	TenantID  string
	AgentID   string
}

// GatewayGrant is what the gateway needs to admit a request for a rollout.
type GatewayGrant struct {
	RolloutID string
	TenantID  string
	AgentID   string
	BatchID   string
	Policy    *string
	// Limits is the batch's gateway limits object, nil when none.
	Limits   json.RawMessage
	KeyHash  [32]byte
	State    gyre.RolloutState
	Deadline time.Time
	Revoked  bool
}

// Job is one unit of durable server work (grading, reconciliation).
type Job struct {
	ID        int64
	Kind      string
	SubjectID string
	Attempts  int
	// Token identifies this claim of the job: only it may finish or
	// retry the job, so a re-enqueue while it runs is never lost.
	Token string
}

// Job kinds.
const (
	JobGrade = "grade"
)

// GradingInput is everything grading a rollout reads.
type GradingInput struct {
	Rollout Rollout
	// Graders is the task's compiled verifier suite, frozen at its creation.
	Graders json.RawMessage
	// Input is the task's case input object.
	Input json.RawMessage
	// Completions counts the gateway's counted completions; Recorded all
	// gateway records of the rollout.
	Completions int
	Recorded    int
}

// GradeResult is what grading decided for a rollout.
type GradeResult struct {
	RolloutID            string
	Verdicts             json.RawMessage
	GraderVersions       json.RawMessage
	Reconciliation       *string
	ReconciliationReason *string
	TrainingGrade        bool
	Reasons              []string
	// Outcome is the verdict set's classification (passed, failed or
	// unscored) and Reward its reward (nil when none): the batch results
	// aggregate them.
	Outcome string
	Reward  *float64
}

// RolloutFilter narrows ListRollouts; empty fields match everything.
type RolloutFilter struct {
	AgentID string
	State   gyre.RolloutState
	BatchID string
	// Outcome matches the current verdict set's classification: passed,
	// failed or unscored.
	Outcome string
	// Exclusion matches rollouts by exclusion (SPEC §4.7): ExclusionNone
	// those without one, ExclusionAny those with one, any other value
	// that reason — the output's, or "state:<name>" for a rollout the
	// server ended.
	Exclusion string
	// TrainingGrade matches the decided training grade; nil matches
	// every rollout, undecided ones too.
	TrainingGrade *bool
}

// Values of RolloutFilter.Exclusion that are not reasons.
const (
	ExclusionNone = "none"
	ExclusionAny  = "any"
)

// AgentSummary is one agent seen in a tenant with its rollout counts.
type AgentSummary struct {
	AgentID     string
	FirstSeenAt time.Time
	Counts      map[gyre.RolloutState]int
	// Exclusions counts rollouts by exclusion: the output's reason, or
	// "state:<name>" for rollouts the server ended.
	Exclusions map[string]int
}

// VerdictSet is one grading of a subject; the latest is current.
type VerdictSet struct {
	ID             string
	Verdicts       json.RawMessage
	GraderVersions json.RawMessage
	// Source is where the graders came from: VerdictsFromTask or
	// VerdictsFromRequest.
	Source string
	// Graders is the compiled graders of a regrade request, nil when the
	// set was graded with the subject's own frozen graders.
	Graders   json.RawMessage
	CreatedAt time.Time
}

// Sources of a verdict set's graders.
const (
	// VerdictsFromTask: the task's (or eval case's) frozen graders.
	VerdictsFromTask = "task"
	// VerdictsFromRequest: graders given to a regrade (SPEC §8).
	VerdictsFromRequest = "request"
)

// Verdict set subject kinds.
const (
	SubjectRollout = "rollout"
	SubjectRun     = "run"
)

// RegradeResult is a regrade of a graded rollout (SPEC §8): a new verdict
// set, which becomes current, and the training-grade decision recomputed
// from it. Reconciliation is never changed by a regrade.
type RegradeResult struct {
	TenantID       string
	RolloutID      string
	Verdicts       json.RawMessage
	GraderVersions json.RawMessage
	// Source is VerdictsFromTask or VerdictsFromRequest; Graders the
	// request's compiled graders (nil for VerdictsFromTask).
	Source  string
	Graders json.RawMessage
	// TrainingGrade is nil while reconciliation is pending.
	TrainingGrade *bool
	Reasons       []string
	// Outcome and Reward are the new set's classification and reward, as
	// in GradeResult: the batch results follow them.
	Outcome string
	Reward  *float64
}

// RolloutStore keeps batches and rollouts and runs their state machine
// (SPEC §4.2–§4.7): claims, leases, heartbeats, outputs, the watchdog, and
// the durable job queue that grades accepted outputs.
type RolloutStore interface {
	// CreateBatch mints GroupSize queued rollouts per task, all of a task
	// sharing a group id. A task id that is not the tenant's is a
	// *FieldError at /task_ids/<i> wrapping ErrNotFound; a policy the
	// tenant lacks a *FieldError at /policy wrapping ErrPolicyNotFound. With an
	// IdempotencyKey seen in the last 24 h it returns that batch and
	// existed = true.
	CreateBatch(ctx context.Context, b NewBatch) (batch Batch, rolloutIDs []string, existed bool, err error)
	// BatchSummary returns a batch with its progress and results.
	BatchSummary(ctx context.Context, tenantID, batchID string) (BatchSummary, error)
	// ListBatches lists the tenant's batch summaries, newest first.
	ListBatches(ctx context.Context, tenantID string, f BatchFilter, p Page) ([]BatchSummary, string, error)
	// CancelBatch cancels the batch's queued and leased rollouts and
	// revokes their gateway tokens; it returns how many it cancelled.
	CancelBatch(ctx context.Context, tenantID, batchID string) (int, error)

	// Claim leases queued rollouts of one agent, oldest batch first and
	// task by task within a batch. No rollout is ever leased twice.
	Claim(ctx context.Context, c ClaimRequest) (ClaimResult, error)
	// Heartbeat renews a lease to now + the granted length and returns
	// the new expiry. Errors, in order: ErrNotFound, ErrLeaseLost (token),
	// ErrRolloutFinished, ErrLeaseLost (lapsed or swept).
	Heartbeat(ctx context.Context, tenantID, rolloutID string, leaseToken [32]byte) (time.Time, error)
	// CheckLease is the read-only first half of the output checks:
	// ErrNotFound, or ErrLeaseLost when the token is not the claim's.
	CheckLease(ctx context.Context, tenantID, rolloutID string, leaseToken [32]byte) error
	// SubmitOutput accepts an output, or replays an identical one, or
	// refuses (ErrNotFound, ErrLeaseLost, ErrOutputConflict,
	// ErrDeadlineExceeded), in the order of SPEC §4.6. Acceptance revokes
	// the gateway token, enqueues grading and, for a retryable exclusion
	// with attempts left, mints the retry — all in one transaction.
	SubmitOutput(ctx context.Context, o OutputSubmission) (OutputResult, error)
	// Release hands a leased rollout back: it ends released and its task
	// is re-queued as a new rollout without spending an attempt. It
	// returns the new rollout's id. ErrAlreadyStarted when the gateway
	// counted a completion.
	Release(ctx context.Context, tenantID, rolloutID string, leaseToken [32]byte) (string, error)
	// CancelRollout cancels a queued or leased rollout and revokes its
	// gateway token; ErrRolloutFinished if it already ended.
	CancelRollout(ctx context.Context, tenantID, rolloutID string) (Rollout, error)
	// Sweep is one watchdog pass over at most limit rollouts of each
	// kind: leased rollouts past deadline + grace end deadline_exceeded;
	// leased rollouts whose lease lapsed end abandoned (gateway token
	// revoked) and are retried while attempts remain. Safe on every
	// replica at once.
	Sweep(ctx context.Context, grace time.Duration, limit int) (SweepResult, error)
	// HasQueued reports whether the agent has queued rollouts.
	HasQueued(ctx context.Context, tenantID, agentID string) (bool, error)

	// GatewayGrant finds the rollout a gateway token belongs to;
	// ErrNotFound for unknown tokens.
	GatewayGrant(ctx context.Context, tokenHash [32]byte) (GatewayGrant, error)

	// GetRollout returns one of the tenant's rollouts.
	GetRollout(ctx context.Context, tenantID, rolloutID string) (Rollout, error)
	// BatchRewardHistogram counts the batch's graded rollouts without an
	// exclusion that have a reward (the ones its mean reward averages)
	// into bins equal-width bins over [0, 1]; a reward of 1 falls in the
	// last bin. ErrNotFound for a batch that is not the tenant's.
	BatchRewardHistogram(ctx context.Context, tenantID, batchID string, bins int) ([]int, error)
	// ListRollouts lists the tenant's rollouts, newest first.
	ListRollouts(ctx context.Context, tenantID string, f RolloutFilter, p Page) ([]Rollout, string, error)
	// ListAgents lists the agents seen in the tenant with their counts.
	ListAgents(ctx context.Context, tenantID string) ([]AgentSummary, error)
	// VerdictSets returns a subject's verdict sets, oldest first.
	VerdictSets(ctx context.Context, tenantID, subjectKind, subjectID string) ([]VerdictSet, error)

	// ClaimJobs leases up to n due jobs of the given kinds for owner until
	// now + lease. A job whose lease lapsed is due again.
	ClaimJobs(ctx context.Context, owner string, kinds []string, n int, lease time.Duration) ([]Job, error)
	// FinishJob removes a done job, unless it was enqueued again since
	// this claim.
	FinishJob(ctx context.Context, j Job) error
	// RetryJob makes a failed job due again after a delay.
	RetryJob(ctx context.Context, j Job, after time.Duration, cause string) error
	// EnqueueJob makes a job due now (again, if it exists).
	EnqueueJob(ctx context.Context, kind, subjectID string) error

	// GradingInput loads what grading a rollout reads.
	GradingInput(ctx context.Context, rolloutID string) (GradingInput, error)
	// SaveGrade stores a verdict set and the training-grade decision, and
	// moves a submitted rollout to graded.
	SaveGrade(ctx context.Context, g GradeResult) error
	// SaveRegrade stores a new current verdict set of a rollout that was
	// graded before and its recomputed training-grade decision, leaving its
	// state and reconciliation alone; it returns the stored set. Earlier
	// sets are kept. ErrNotFound if the rollout is not the tenant's;
	// ErrNotGraded if it has no verdict set yet.
	SaveRegrade(ctx context.Context, g RegradeResult) (VerdictSet, error)
}
