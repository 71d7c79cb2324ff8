package dataset

import (
	"math"
	"slices"
	"time"

	"github.com/gyrehq/gyre"
)

// Format is a dataset's file format (SPEC §9).
type Format string

// The formats.
const (
	// FormatSFT is OpenAI chat fine-tuning JSONL, one row per chain.
	FormatSFT Format = "sft"
	// FormatDPO is OpenAI preference JSONL, one row per pair in a group.
	FormatDPO Format = "dpo"
	// FormatRL is one row per rollout with its per-completion traffic.
	FormatRL Format = "rl"
	// FormatATIF is one ATIF document per rollout.
	FormatATIF Format = "atif"
)

// Formats lists every format, in a stable order, for validation and help.
var Formats = []Format{FormatSFT, FormatDPO, FormatRL, FormatATIF}

// Valid reports whether f is one of Formats.
func (f Format) Valid() bool { return slices.Contains(Formats, f) }

// Defaults of SPEC §9.
const (
	// DefaultMinReward is the least reward an sft row's rollout may have.
	DefaultMinReward = 1.0
	// DefaultMinMargin is the least reward difference of a dpo pair.
	DefaultMinMargin = 0.5
)

// Filters are a dataset's selection filters as the creator asked for them
// (SPEC §9). Nil means not given; the writers apply the defaults.
type Filters struct {
	// Since and Until bound the rollouts' submission time (since
	// inclusive, until exclusive): when the output was accepted, which
	// never moves, unlike grading time. The store applies them when it
	// freezes the ids.
	Since *time.Time `json:"since"`
	Until *time.Time `json:"until"`
	// MinReward applies to sft only (default DefaultMinReward).
	MinReward *float64 `json:"min_reward"`
	// MinMargin applies to dpo only (default DefaultMinMargin).
	MinMargin *float64 `json:"min_margin"`
	// BatchIDs limits the selection to these batches; nil means every batch.
	BatchIDs []string `json:"batch_ids"`
	// IncludeHoldout keeps rollouts of held-out tasks.
	IncludeHoldout bool `json:"include_holdout"`
}

// minReward returns the sft threshold.
func (f Filters) minReward() float64 {
	if f.MinReward == nil {
		return DefaultMinReward
	}
	return *f.MinReward
}

// minMargin returns the dpo margin.
func (f Filters) minMargin() float64 {
	if f.MinMargin == nil {
		return DefaultMinMargin
	}
	return *f.MinMargin
}

// Selection is a dataset as created: what to export, frozen. The store
// freezes the rollout ids and the verdict set each was graded with at
// creation and hands them to the writers through a Source; the Selection
// says what the writers do with them.
type Selection struct {
	// ID is the dataset's id (a UUIDv7 minted by the server).
	ID string
	// CreatedAt is when the dataset was created; it is in the manifest,
	// so it is part of what a rebuild must reproduce.
	CreatedAt time.Time
	AgentID   string
	Format    Format
	Filters   Filters
	// HoldoutTaskIDs are the tasks whose cases gate a promotion (SPEC
	// §10): their rollouts are held out unless Filters.IncludeHoldout.
	HoldoutTaskIDs []string
}

// Validate reports the first thing wrong with s that no build could
// fix, as a *gyre.Error (422 invalid_body) pointing at the member of the
// creation request at fault: an unknown format, a negative or non-finite
// filter, an empty time range.
func (s Selection) Validate() error {
	invalid := func(ptr, format string, args ...any) error {
		return gyre.Errorf(gyre.CodeInvalidBody, format, args...).AtPointer(ptr)
	}
	if !s.Format.Valid() {
		return invalid("/format", "format %q is not one of sft, dpo, rl, atif", s.Format)
	}
	if v := s.Filters.MinReward; v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
		return invalid("/min_reward", "min_reward must be a finite number")
	}
	if v := s.Filters.MinMargin; v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0) {
		return invalid("/min_margin", "min_margin must be a finite number, at least 0")
	}
	if s.Filters.Since != nil && s.Filters.Until != nil && !s.Filters.Since.Before(*s.Filters.Until) {
		return invalid("/until", "until must be after since")
	}
	return nil
}

// Reasons a selected rollout is not exported, besides the training-grade
// reasons of grade.TrainingGrade (which keep their own codes). They are
// stable codes, counted in Manifest.NotExportedByReason.
const (
	// ReasonHeldOut: the rollout's task gates a promotion and the
	// selection does not include the holdout.
	ReasonHeldOut = "held_out"
	// ReasonNotTrainingGrade is used when a rollout was decided not
	// training grade without a stated reason.
	ReasonNotTrainingGrade = "not_training_grade"
	// ReasonBelowMinReward: an sft rollout whose reward is under
	// min_reward.
	ReasonBelowMinReward = "below_min_reward"
	// ReasonNoPair: a training-grade dpo rollout that is in no exported
	// pair (its group is all-pass or all-fail, or its pairs were refused).
	ReasonNoPair = "no_pair"
	// ReasonNoDivergentAssistantTurn: a dpo pair whose conversations do
	// not first differ at an assistant message of both (one continues the
	// other, or a user or tool message differs first), so they share no
	// prefix that the two outputs answer. Counted per pair.
	ReasonNoDivergentAssistantTurn = "no_divergent_assistant_turn"
	// ReasonFormatInvalid + <rule>: a row that OpenAI's fine-tuning format
	// checks would refuse (see Validate…), or an ATIF document gyre's
	// validator refuses (rule "atif"). sft, rl and atif count the rollout;
	// dpo counts the pair.
	ReasonFormatInvalid = "format_invalid:"
)
