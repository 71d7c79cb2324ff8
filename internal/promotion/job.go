package promotion

import "errors"

// States of a promotion (SPEC §10). A promotion is running until its job
// decides it (promoted or rejected) or it cannot finish (failed).
const (
	StateRunning  = "running"
	StatePromoted = "promoted"
	StateRejected = "rejected"
	StateFailed   = "failed"
)

// Reasons a promotion failed: it decided nothing.
const (
	// ReasonDeadline: deadline_s passed before every rollout ended.
	ReasonDeadline = "deadline"
	// ReasonCancelled: an admin cancelled the promotion.
	ReasonCancelled = "cancelled"
	// ReasonBaselineChanged: the agent's promoted policy changed while
	// the promotion ran, so promoting would overwrite a change it never
	// measured.
	ReasonBaselineChanged = "baseline_changed"
)

// Sides of a promotion: each runs one batch over the same tasks.
const (
	SideBaseline  = "baseline"
	SideCandidate = "candidate"
)

// Job defaults and bounds (SPEC §10).
const (
	DefaultRepetitions     = 5
	MaxRepetitions         = 100
	DefaultMinDelta        = 0.02
	DefaultMaxExcludedRate = 0.05
	DefaultDeadlineS       = 24 * 3600
	// DefaultResamples is the paired bootstrap's resample count.
	DefaultResamples = 10_000
)

// Sentinel errors of the promotion job's store.
var (
	// ErrRunning: the agent already has a running promotion (one at a
	// time per agent).
	ErrRunning = errors.New("a promotion of this agent is running")
	// ErrDecided: the promotion is no longer running, so it cannot be
	// decided, failed or cancelled again.
	ErrDecided = errors.New("the promotion is already decided")
)
