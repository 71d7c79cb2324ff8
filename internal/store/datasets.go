package store

import (
	"context"
	"encoding/json"
	"time"
)

// JobDatasetBuild is the durable job that writes a dataset's file; its
// subject is the dataset id.
const JobDatasetBuild = "dataset_build"

// Dataset build states (SPEC §9).
const (
	DatasetBuilding = "building"
	DatasetReady    = "ready"
	DatasetFailed   = "failed"
)

// Dataset is a frozen selection of one agent's rollouts and the state of
// its file.
type Dataset struct {
	ID       string
	TenantID string
	AgentID  string
	Format   string
	// Filters is the creation request's filters as JSON
	// (dataset.Filters).
	Filters json.RawMessage
	// HoldoutTaskIDs are the members' tasks whose case gates a promotion
	// (SPEC §10), decided at creation and sorted: the build holds their
	// rollouts out unless the filters include the holdout.
	HoldoutTaskIDs []string
	// State is building, ready or failed; Reason says why it failed.
	State  string
	Reason *string
	// Members is the number of frozen rollouts.
	Members int
	// FileSHA256, FileBytes and BlobKey locate the built file; Manifest
	// is its manifest. All nil while building or failed.
	FileSHA256 *string
	FileBytes  *int64
	BlobKey    *string
	Manifest   json.RawMessage
	CreatedAt  time.Time
	BuiltAt    *time.Time
	// Progress is what the latest build read and wrote; nil until a
	// build started.
	Progress *DatasetProgress
}

// DatasetProgress is how far a dataset's build got: the frozen rollouts
// it read and the rows it wrote.
type DatasetProgress struct {
	Rollouts int64
	Rows     int64
}

// NewDataset is what CreateDataset selects and freezes.
type NewDataset struct {
	// ID is minted by the caller (UUIDv7): rollout ids of the same
	// tenant are UUIDv7 too, so both sort by time.
	ID       string
	TenantID string
	AgentID  string
	Format   string
	Filters  json.RawMessage
	// Since (inclusive) and Until (exclusive) bound the rollouts'
	// submission time; nil means unbounded.
	Since, Until *time.Time
	// BatchIDs keeps only these batches' rollouts when not nil.
	BatchIDs []string
}

// DatasetMember is one frozen rollout of a dataset: what it was when the
// dataset was created.
type DatasetMember struct {
	RolloutID string
	BatchID   string
	TaskID    string
	GroupID   string
	// Verdicts (a JSON array of verdicts) and GraderVersions (the
	// graders, parallel to it) are the rollout's verdict set at creation;
	// nil when it was not graded yet.
	Verdicts       json.RawMessage
	GraderVersions json.RawMessage
	// TrainingGrade is nil when undecided at creation (pending).
	TrainingGrade    *bool
	NotTrainingGrade []string
	Reward           *float64
}

// DatasetBuilt is the outcome of a build: ready with its file, or failed
// with a reason.
type DatasetBuilt struct {
	ID         string
	State      string
	Reason     *string
	FileSHA256 string
	FileBytes  int64
	BlobKey    string
	Manifest   json.RawMessage
}

// DatasetFilter narrows a list of datasets; a zero field keeps every
// dataset.
type DatasetFilter struct {
	// AgentID keeps only this agent's datasets.
	AgentID string
	// State keeps only datasets in this build state (DatasetBuilding,
	// DatasetReady or DatasetFailed).
	State string
	// Since and Until keep only datasets created at or after Since and
	// before Until.
	Since, Until time.Time
}

// DatasetStore keeps datasets (SPEC §9).
type DatasetStore interface {
	// CreateDataset selects the agent's submitted rollouts that match d,
	// freezes each with its current verdict set, training grade and
	// reward, records the held-out tasks among them (HoldoutTaskIDs: a
	// member's task is held out when it is, or shares the case of, a task
	// of a batch that a promotion of the same tenant and agent made — the
	// same suite name and case id, or for a task made from a production
	// turn the same source agent and turn), stores the dataset as
	// building and enqueues its build job, all in one transaction, so a
	// later promotion never changes an existing dataset. ErrNotFound when
	// the agent was never seen in the tenant.
	CreateDataset(ctx context.Context, d NewDataset) (Dataset, error)
	// GetDataset returns one of the tenant's datasets.
	GetDataset(ctx context.Context, tenantID, id string) (Dataset, error)
	// DatasetByID returns a dataset whatever its tenant, for its build job.
	DatasetByID(ctx context.Context, id string) (Dataset, error)
	// ListDatasets lists the tenant's datasets, newest first.
	ListDatasets(ctx context.Context, tenantID string, p Page) ([]Dataset, string, error)
	// FilterDatasets lists the tenant's datasets that match f, newest
	// first, without their manifests (Manifest nil: a large dataset's
	// manifest lists every frozen rollout id, and a list shows none). Its
	// cursors are bound to f; the zero filter's are ListDatasets's.
	FilterDatasets(ctx context.Context, tenantID string, f DatasetFilter, p Page) ([]Dataset, string, error)
	// DatasetMembers returns up to n frozen members after rollout id
	// after ("" for the first), in increasing rollout id order.
	DatasetMembers(ctx context.Context, datasetID, after string, n int) ([]DatasetMember, error)
	// DatasetGroupMembers returns up to n frozen members after the
	// (group id, rollout id) pair given, ordered by group id then rollout
	// id.
	DatasetGroupMembers(ctx context.Context, datasetID, afterGroup, afterRollout string, n int) ([]DatasetMember, error)
	// SetDatasetProgress records a running build's progress on a dataset
	// still building; on a dataset ready or failed it does nothing.
	SetDatasetProgress(ctx context.Context, id string, p DatasetProgress) error
	// FinishDataset records a build's outcome on a dataset still
	// building; a dataset already ready or failed is left unchanged and
	// returned as it is, so two builders agree on the first outcome.
	FinishDataset(ctx context.Context, b DatasetBuilt) (Dataset, error)
}
