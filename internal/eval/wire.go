package eval

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/gyrehq/gyre/internal/store"
)

// BlobPrefix is where a tenant's content-addressed blobs (trajectories,
// workspace files) live in the blob store: blobs/<tenant>/<sha256>, apart
// from fixtures (fixtures/<tenant>/<sha256>). Keys are built from ids and
// digests only, never from a harness's names.
func BlobPrefix(tenantID string) string { return "blobs/" + tenantID }

// ExperimentJSON is an experiment as gyre's API shows it (GET
// /api/v1/experiments/{id}).
type ExperimentJSON struct {
	ID           string          `json:"id"`
	Suite        string          `json:"suite"`
	SuiteVersion string          `json:"suite_version"`
	Harness      string          `json:"harness"`
	Model        *string         `json:"model"`
	Capabilities json.RawMessage `json:"capabilities"`
	Config       json.RawMessage `json:"config"`
	Summary      json.RawMessage `json:"summary"`
	CreatedAt    time.Time       `json:"created_at"`
	FinishedAt   *time.Time      `json:"finished_at"`
}

// NewExperimentJSON is the body of POST /api/v1/experiments (SPEC §7.5).
type NewExperimentJSON struct {
	Suite        string          `json:"suite"`
	SuiteVersion string          `json:"suite_version"`
	Harness      string          `json:"harness"`
	Capabilities json.RawMessage `json:"capabilities"`
	Config       json.RawMessage `json:"config"`
}

// FinishJSON is the body of POST /api/v1/experiments/{id}/finish.
type FinishJSON struct {
	// Model is the harness's (text:"contract": it may hold any character).
	Model   *string         `json:"model" text:"contract"`
	Summary json.RawMessage `json:"summary"`
}

// RunJSON is a run record as gyre's API shows and takes it (GET
// /api/v1/experiments/{id}/runs, PUT …/runs/{case_id}/{repetition}). Its
// first members are the run form of `gyre eval show --json`.
type RunJSON struct {
	RunID          *string         `json:"run_id"`
	CaseID         string          `json:"case_id"`
	Repetition     int             `json:"repetition"`
	Status         *string         `json:"status"`
	Classification *string         `json:"classification"`
	TimedOut       bool            `json:"timed_out"`
	Error          *string         `json:"error"`
	Model          *string         `json:"model"`
	Answer         *string         `json:"answer"`
	Output         json.RawMessage `json:"output"`
	Verdicts       json.RawMessage `json:"verdicts"`
	Trajectory     json.RawMessage `json:"trajectory"`
	Files          json.RawMessage `json:"files"`

	TrajectorySHA256 *string         `json:"trajectory_sha256"`
	Artifacts        json.RawMessage `json:"artifacts"`
	Attempts         json.RawMessage `json:"attempts"`
	Usage            json.RawMessage `json:"usage"`
	Score            *float64        `json:"score"`
	LatencyMS        *float64        `json:"latency_ms"`
	StartedAt        *time.Time      `json:"started_at"`
	FinishedAt       *time.Time      `json:"finished_at"`
	UpdatedAt        *time.Time      `json:"updated_at,omitempty"`
	// Graders is the case's compiled graders and Input its input, frozen
	// on the record for regrading; GraderVersions the graders of Verdicts.
	Graders        json.RawMessage `json:"graders"`
	Input          json.RawMessage `json:"input"`
	GraderVersions json.RawMessage `json:"grader_versions"`
}

// ExperimentToJSON converts a stored experiment.
func ExperimentToJSON(e store.Experiment) ExperimentJSON {
	return ExperimentJSON{
		ID: e.ID, Suite: e.Suite, SuiteVersion: e.SuiteVersion, Harness: e.Harness, Model: strPtr(e.Model),
		Capabilities: orNull(e.Capabilities), Config: orNull(e.Config), Summary: orNull(e.Summary),
		CreatedAt: e.CreatedAt, FinishedAt: e.FinishedAt,
	}
}

// ExperimentFromJSON converts back.
func ExperimentFromJSON(j ExperimentJSON) store.Experiment {
	e := store.Experiment{
		ID: j.ID, Suite: j.Suite, SuiteVersion: j.SuiteVersion, Harness: j.Harness,
		Capabilities: nullToNil(j.Capabilities), Config: nullToNil(j.Config), Summary: nullToNil(j.Summary),
		CreatedAt: j.CreatedAt, FinishedAt: j.FinishedAt,
	}
	if j.Model != nil {
		e.Model = *j.Model
	}
	return e
}

// RunToJSON converts a stored run record.
func RunToJSON(r store.RunRecord) RunJSON {
	j := RunJSON{
		RunID: strPtr(r.RunID), CaseID: r.CaseID, Repetition: r.Repetition, Status: strPtr(r.Status),
		Classification: strPtr(r.Classification), TimedOut: r.TimedOut, Error: strPtr(r.Error),
		Model: strPtr(r.Model), Answer: r.Answer, Output: orNull(r.Output), Verdicts: orEmpty(r.Verdicts),
		Trajectory: orNull(r.Trajectory), Files: orEmpty(r.Files),
		TrajectorySHA256: strPtr(r.TrajectorySHA256), Artifacts: orNull(r.Artifacts), Attempts: orEmpty(r.Attempts),
		Usage: orNull(r.Usage), Score: r.Score, LatencyMS: r.LatencyMS, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		Graders: orNull(r.Graders), Input: orNull(r.Input), GraderVersions: orNull(r.GraderVersions),
	}
	if !r.UpdatedAt.IsZero() {
		u := r.UpdatedAt
		j.UpdatedAt = &u
	}
	return j
}

// RunFromJSON converts back; tenant and experiment come from the caller.
func RunFromJSON(tenantID, experimentID string, j RunJSON) store.RunRecord {
	r := store.RunRecord{
		TenantID: tenantID, ExperimentID: experimentID, CaseID: j.CaseID, Repetition: j.Repetition,
		RunID: deref(j.RunID), Status: deref(j.Status), Classification: deref(j.Classification),
		TimedOut: j.TimedOut, Error: deref(j.Error), Model: deref(j.Model), Answer: j.Answer,
		Output: nullToNil(j.Output), Verdicts: nullToNil(j.Verdicts), TrajectorySHA256: deref(j.TrajectorySHA256),
		Trajectory: nullToNil(j.Trajectory), Files: nullToNil(j.Files), Artifacts: nullToNil(j.Artifacts),
		Attempts: nullToNil(j.Attempts), Usage: nullToNil(j.Usage), Score: j.Score, LatencyMS: j.LatencyMS,
		StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		Graders: nullToNil(j.Graders), Input: nullToNil(j.Input), GraderVersions: nullToNil(j.GraderVersions),
	}
	if j.UpdatedAt != nil {
		r.UpdatedAt = *j.UpdatedAt
	}
	return r
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

var jsonNull = json.RawMessage("null")

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return jsonNull
	}
	return b
}

func orEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || bytes.Equal(bytes.TrimSpace(b), jsonNull) {
		return json.RawMessage("[]")
	}
	return b
}

func nullToNil(b json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || bytes.Equal(t, jsonNull) {
		return nil
	}
	return b
}
