package store

import (
	"context"
	"encoding/json"
	"strconv"
	"time"
)

// ExperimentStore keeps eval experiments and their runs (SPEC §7.2, §7.5):
// one experiment per `gyre eval run`, one run record per (case,
// repetition), and the blobs a tenant uploaded for them.
//
// A run record is written several times in its life: as soon as the
// harness answers POST /runs (with its run_id and no classification), and
// again when it ends (with its classification). PutRun replaces the whole
// record each time, so writing the same record twice is harmless.
type ExperimentStore interface {
	// CreateExperiment stores a new experiment with a fresh id.
	// ErrNotFound if the tenant does not exist.
	CreateExperiment(ctx context.Context, e NewExperiment) (Experiment, error)
	// Experiment returns one experiment; ErrNotFound if it is not the
	// tenant's.
	Experiment(ctx context.Context, tenantID, id string) (Experiment, error)
	// ListExperiments lists the tenant's experiments, newest first.
	ListExperiments(ctx context.Context, tenantID string, p Page) (experiments []Experiment, next string, err error)
	// FilterExperiments lists the tenant's experiments that match f,
	// newest first (the web UI's experiments list). A cursor of one
	// filter is refused (ErrInvalidCursor) by another.
	FilterExperiments(ctx context.Context, tenantID string, f ExperimentFilter, p Page) (experiments []Experiment, next string, err error)
	// FinishExperiment records the experiment's model and summary and
	// stamps its finish time. Finishing again (after a resume) replaces
	// both. ErrNotFound if the experiment is not the tenant's.
	FinishExperiment(ctx context.Context, f ExperimentFinish) (Experiment, error)

	// PutRun writes the run record of (r.ExperimentID, r.CaseID,
	// r.Repetition), replacing any earlier record of that pair, and
	// records r.Blobs for the tenant; created reports whether there was
	// no record. ErrNotFound if the experiment is not the tenant's.
	PutRun(ctx context.Context, r RunRecord) (created bool, err error)
	// Run returns one run record; ErrNotFound if there is none.
	Run(ctx context.Context, tenantID, experimentID, caseID string, repetition int) (RunRecord, error)
	// ListRuns lists an experiment's run records by case id, then
	// repetition. ErrNotFound if the experiment is not the tenant's.
	ListRuns(ctx context.Context, tenantID, experimentID string, p Page) (runs []RunRecord, next string, err error)
	// ListRunOutcomes lists what an experiment's report and grid read of
	// its run records (RunOutcome: no document but the usage), in
	// ListRuns' order, up to MaxRunOutcomes a page; its cursors are its
	// own. ErrNotFound if the experiment is not the tenant's.
	ListRunOutcomes(ctx context.Context, tenantID, experimentID string, p Page) (outcomes []RunOutcome, next string, err error)

	// PutBlobRef records that the tenant stored the content-addressed blob
	// sha256 of size bytes; created is false when it was recorded before.
	PutBlobRef(ctx context.Context, tenantID, sha256 string, size int64) (created bool, err error)
	// BlobRef returns the size of a blob the tenant stored; ErrNotFound
	// if the tenant never stored it.
	BlobRef(ctx context.Context, tenantID, sha256 string) (size int64, err error)

	// SaveRunRegrade stores a new current verdict set of a graded run and
	// the run's new verdicts, grader versions, classification and score
	// (SPEC §8). The first regrade of a run first keeps the set the run
	// was graded with, at its finish time, so the history is whole. It
	// returns the stored set. ErrNotFound if the run is not the tenant's.
	SaveRunRegrade(ctx context.Context, g RunRegrade) (VerdictSet, error)
	// RunVerdictSets returns a run's verdict sets, oldest first: empty
	// until its first regrade, then every set including the first.
	RunVerdictSets(ctx context.Context, tenantID, experimentID, caseID string, repetition int) ([]VerdictSet, error)
}

// ExperimentFilter selects experiments; zero fields select everything.
type ExperimentFilter struct {
	// Suite keeps only experiments of this suite name.
	Suite string
	// State keeps only running experiments (not finished yet) or
	// finished ones; "" keeps both.
	State ExperimentState
	// Since and Until keep only experiments created at or after Since
	// and before Until.
	Since, Until time.Time
}

// ExperimentState is whether an experiment has finished.
type ExperimentState string

// The experiment states: an experiment runs until `gyre eval run`
// finishes it (an interrupted one stays running until resumed).
const (
	ExperimentRunning  ExperimentState = "running"
	ExperimentFinished ExperimentState = "finished"
)

// RunRegrade is a regrade of one run record.
type RunRegrade struct {
	TenantID       string
	ExperimentID   string
	CaseID         string
	Repetition     int
	Verdicts       json.RawMessage
	GraderVersions json.RawMessage
	// Source is VerdictsFromTask (the case's frozen graders) or
	// VerdictsFromRequest; Graders the request's compiled graders.
	Source         string
	Graders        json.RawMessage
	Classification string
	Score          *float64
}

// RunSubject is the verdict-set subject id of a run.
func RunSubject(experimentID, caseID string, repetition int) string {
	return experimentID + "/" + caseID + "/" + strconv.Itoa(repetition)
}

// NewExperiment is what CreateExperiment stores.
type NewExperiment struct {
	TenantID string
	// Suite and SuiteVersion name the suite version that was run.
	Suite        string
	SuiteVersion string
	// Harness is the harness's name or base URL.
	Harness string
	// Capabilities is the harness's capabilities snapshot, JSON.
	Capabilities json.RawMessage
	// Config is the settings that shaped the experiment, JSON. It never
	// holds a secret.
	Config json.RawMessage
}

// Experiment is a stored experiment.
type Experiment struct {
	ID           string
	Suite        string
	SuiteVersion string
	Harness      string
	Capabilities json.RawMessage
	Config       json.RawMessage
	// Model is the model the runs reported ("mixed" when they differ),
	// "" until the experiment finished.
	Model string
	// Summary is the result summary, JSON; nil until the experiment
	// finished.
	Summary    json.RawMessage
	CreatedAt  time.Time
	FinishedAt *time.Time
}

// ExperimentFinish is what FinishExperiment records.
type ExperimentFinish struct {
	TenantID string
	ID       string
	Model    string
	Summary  json.RawMessage
	// KeepFinishedAt keeps the finish time of an experiment that finished
	// before: a regrade replaces the summary, not when the runs ended.
	KeepFinishedAt bool
}

// RunRecord is one (case, repetition) of an experiment. JSON members hold
// JSON text as the evaluator wrote it; nil means SQL NULL.
type RunRecord struct {
	TenantID     string
	ExperimentID string
	CaseID       string
	// Repetition is 1-based.
	Repetition int
	// RunID is the harness's run id of the latest attempt, "" before the
	// harness answered POST /runs.
	RunID string
	// Status is the harness's last reported status, "" when none.
	Status string
	// Classification is passed, failed, unscored or error; "" while the
	// run is in flight (or was interrupted).
	Classification string
	TimedOut       bool
	Error          string
	Model          string
	Answer         *string
	Output         json.RawMessage
	// Verdicts is the JSON array of verdicts.
	Verdicts json.RawMessage
	// TrajectorySHA256 names the stored trajectory blob, "" when none.
	TrajectorySHA256 string
	// Trajectory is {valid, errors, schema_version}, JSON.
	Trajectory json.RawMessage
	// Files is the workspace listing as fetched, JSON.
	Files json.RawMessage
	// Artifacts is the RunStatus artifacts, JSON.
	Artifacts json.RawMessage
	// Attempts is the JSON log of every attempt.
	Attempts json.RawMessage
	// Usage is {prompt_tokens, completion_tokens, cost_usd}, JSON.
	Usage json.RawMessage
	// Score is the run's reward (weighted mean verdict score).
	Score *float64
	// Graders is the case's compiled graders and Input its input, frozen
	// on the record so it can be graded again (SPEC §8); GraderVersions
	// is the graders of Verdicts (grade.GraderRef). nil on records written
	// before they were kept, or when the run was never graded.
	Graders        json.RawMessage
	Input          json.RawMessage
	GraderVersions json.RawMessage
	// LatencyMS is the run's wall time from creation to its terminal
	// status, in milliseconds.
	LatencyMS  *float64
	StartedAt  *time.Time
	FinishedAt *time.Time
	// UpdatedAt is set by the store on every PutRun.
	UpdatedAt time.Time
	// Blobs are blobs the record refers to that PutRun records for the
	// tenant (as PutBlobRef does) in the same transaction. They are not
	// read back.
	Blobs []BlobRef
}

// MaxRunOutcomes is the largest page of ListRunOutcomes: an outcome is a
// few dozen bytes, so a page holds a large experiment's runs.
const MaxRunOutcomes = 5000

// RunOutcome is what a report reads of a run record: its result and the
// numbers the summary averages, without the record's documents (output,
// verdicts, input, graders, attempts), which a report never reads.
type RunOutcome struct {
	CaseID     string
	Repetition int
	// Classification is passed, failed, unscored or error; "" while the
	// run is in flight.
	Classification string
	TimedOut       bool
	Model          string
	Score          *float64
	LatencyMS      *float64
	// Usage is {prompt_tokens, completion_tokens, cost_usd}, JSON; nil
	// when the run reported none.
	Usage json.RawMessage
	// HasTrajectory reports that the run stored a trajectory blob.
	HasTrajectory bool
}

// OutcomeOf is the outcome of a run record, as ListRunOutcomes reads it.
func OutcomeOf(r RunRecord) RunOutcome {
	return RunOutcome{CaseID: r.CaseID, Repetition: r.Repetition, Classification: r.Classification, TimedOut: r.TimedOut,
		Model: r.Model, Score: r.Score, LatencyMS: r.LatencyMS, Usage: r.Usage, HasTrajectory: r.TrajectorySHA256 != ""}
}

// BlobRef is a content-addressed blob a tenant stored.
type BlobRef struct {
	SHA256 string
	Size   int64
}
