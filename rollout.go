package gyre

// RolloutState is where a rollout is in its life (SPEC §4.7):
// queued → leased → submitted → graded, with the terminal side states
// abandoned, deadline_exceeded, cancelled and released.
type RolloutState string

// The rollout states.
const (
	StateQueued           RolloutState = "queued"
	StateLeased           RolloutState = "leased"
	StateSubmitted        RolloutState = "submitted"
	StateGraded           RolloutState = "graded"
	StateAbandoned        RolloutState = "abandoned"
	StateDeadlineExceeded RolloutState = "deadline_exceeded"
	StateCancelled        RolloutState = "cancelled"
	StateReleased         RolloutState = "released"
)

// RolloutStates lists every state, in life order, for validation and counts.
var RolloutStates = []RolloutState{
	StateQueued, StateLeased, StateSubmitted, StateGraded,
	StateAbandoned, StateDeadlineExceeded, StateCancelled, StateReleased,
}

// Valid reports whether s is one of RolloutStates.
func (s RolloutState) Valid() bool {
	for _, v := range RolloutStates {
		if v == s {
			return true
		}
	}
	return false
}

// ServerEnded reports whether the server ended the rollout without an
// output from the agent: the terminal side states. Such a rollout is never
// trainable and is counted under the exclusion reason "state:<name>".
func (s RolloutState) ServerEnded() bool {
	switch s {
	case StateAbandoned, StateDeadlineExceeded, StateCancelled, StateReleased:
		return true
	}
	return false
}

// Finished reports whether no agent may act on the rollout any more:
// submitted, graded, or ended by the server.
func (s RolloutState) Finished() bool {
	return s == StateSubmitted || s == StateGraded || s.ServerEnded()
}

// BatchState is where a batch is (SPEC §4.8): running while one of its
// rollouts is queued, leased or submitted (awaiting grading), cancelled
// once an admin cancelled it, finished otherwise.
type BatchState string

// The batch states.
const (
	BatchRunning   BatchState = "running"
	BatchFinished  BatchState = "finished"
	BatchCancelled BatchState = "cancelled"
)

// BatchStates lists every batch state, for validation.
var BatchStates = []BatchState{BatchRunning, BatchFinished, BatchCancelled}

// Valid reports whether s is one of BatchStates.
func (s BatchState) Valid() bool {
	for _, v := range BatchStates {
		if v == s {
			return true
		}
	}
	return false
}

// Defaults of SPEC §4.2–§4.5.
const (
	DefaultGroupSize   = 1
	DefaultDeadlineS   = 600
	DefaultMaxAttempts = 2
)

// DefaultRetryOn are the exclusion reasons that re-mint a rollout while
// attempts remain (SPEC §4.5). deadline_exceeded is never retried.
var DefaultRetryOn = []string{"capacity", "substrate_unavailable", "flywheel_crash"}
