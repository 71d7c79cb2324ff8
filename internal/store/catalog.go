package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// CatalogStore keeps what rollouts are made from: fixtures, suite versions
// and tasks (SPEC §4.2).
//
// Fixture revisions and suite versions are content-addressed and never
// change once stored; each name also has a current (latest) revision or
// version: the one most recently put, which a re-put of identical content
// makes current again. Tasks are frozen at creation: later suite or fixture
// changes never alter them.
type CatalogStore interface {
	// PutFixture records that the tenant's fixture f.Name holds the blob
	// f.SHA256 and makes that revision the name's latest. created is false
	// when the (name, sha256) revision existed already. ErrNotFound if the
	// tenant does not exist.
	PutFixture(ctx context.Context, f NewFixture) (fx Fixture, created bool, err error)
	// LatestFixture returns the latest revision of a fixture; ErrNotFound
	// if the name has none in the tenant.
	LatestFixture(ctx context.Context, tenantID, name string) (Fixture, error)
	// FixtureRevision returns one (name, sha256) revision; ErrNotFound if
	// the tenant has no such revision.
	FixtureRevision(ctx context.Context, tenantID, name, sha256 string) (Fixture, error)
	// ListFixtures lists the latest revision of every fixture name of the
	// tenant, by name.
	ListFixtures(ctx context.Context, tenantID string, p Page) (fixtures []Fixture, next string, err error)

	// PutSuiteVersion stores a suite version and makes it the suite's
	// latest. created is false when (name, version) existed with the same
	// content hash (the stored version is returned); a different content
	// hash under an existing (name, version) is ErrConflict and changes
	// nothing. Every fixture the version references must be a stored
	// revision of the tenant, else ErrNotFound.
	PutSuiteVersion(ctx context.Context, v NewSuiteVersion) (sv SuiteVersion, created bool, err error)
	// SuiteVersion returns one version of a suite; ErrNotFound if none.
	SuiteVersion(ctx context.Context, tenantID, name, version string) (SuiteVersion, error)
	// LatestSuiteVersion returns the latest version of a suite; ErrNotFound
	// if the tenant has no suite of that name.
	LatestSuiteVersion(ctx context.Context, tenantID, name string) (SuiteVersion, error)
	// ListSuites lists the tenant's suites by name, each with its versions
	// (latest first, without their documents).
	ListSuites(ctx context.Context, tenantID string, p Page) (suites []Suite, next string, err error)

	// CreateSuiteTasks creates one task per element of t.Tasks, all or
	// none, in order. ErrNotFound if the suite version does not exist in
	// the tenant.
	CreateSuiteTasks(ctx context.Context, t SuiteTasks) ([]Task, error)
	// CreateTurnTasks creates one task per turn of t.TurnIDs, all or none,
	// in order, each replaying its stored turn's input_text. A turn that is
	// not stored for (tenant, agent), or whose input_text is null, fails the
	// whole call with a *TurnRefError naming its index. With
	// t.SkipExisting, a turn that already has a task (made by an earlier
	// call) gets no second one: it is left out of the result, decided in
	// the same transaction, so concurrent calls never both make a task of
	// one turn.
	CreateTurnTasks(ctx context.Context, t TurnTasks) ([]Task, error)
	// EachTurnRef calls fn with every stored turn that sel selects, in
	// order of receipt (ReceivedAt, then insertion order); an error from
	// fn stops the walk and is returned. It is how POST
	// /api/v1/tasks/from-turns selects turns by filter.
	EachTurnRef(ctx context.Context, sel TurnSelection, fn func(TurnRef) error) error
	// Task returns one task; ErrNotFound if it is not the tenant's.
	Task(ctx context.Context, tenantID, id string) (Task, error)
	// ListTasks lists the tenant's tasks, oldest first, optionally only
	// those of one suite.
	ListTasks(ctx context.Context, tenantID string, f TaskFilter, p Page) (tasks []Task, next string, err error)
}

// Fixture is one revision of a tenant's named fixture. The bytes live in
// the blob store under fixtures/<tenant_id>/<sha256>; the customer's name
// lives only in the database.
type Fixture struct {
	Name      string
	SHA256    string
	SizeBytes int64
	// CreatedAt is when this revision was first stored.
	CreatedAt time.Time
}

// NewFixture is what PutFixture stores.
type NewFixture struct {
	TenantID  string
	Name      string
	SHA256    string // lowercase hex
	SizeBytes int64
}

// SuiteVersion is one stored version of a suite.
type SuiteVersion struct {
	Name string
	// Version is the explicit version name, or the content hash.
	Version string
	// ContentSHA256 is the hash of Document (docs/suites.md, "Versions").
	ContentSHA256 string
	// Document is the normalized suite document, canonical JSON, with the
	// referenced fixtures' digests. Nil in ListSuites results.
	Document json.RawMessage
	// Cases is the number of cases.
	Cases     int
	CreatedAt time.Time
}

// NewSuiteVersion is what PutSuiteVersion stores.
type NewSuiteVersion struct {
	TenantID      string
	Name          string
	Version       string
	ContentSHA256 string
	Document      json.RawMessage
	Cases         int
	// Fixtures maps each referenced fixture name to its revision's SHA-256
	// (the document's "fixtures"); each must be stored for the tenant.
	Fixtures map[string]string
}

// Suite is a suite name with its versions, latest first.
type Suite struct {
	Name     string
	Versions []SuiteVersion
}

// Task is one case prepared for rollouts (SPEC §4.2).
type Task struct {
	ID     string
	CaseID string
	// SuiteName and SuiteVersion are set for tasks made from a suite.
	SuiteName    string
	SuiteVersion string
	// SourceAgentID and SourceTurnID are set for tasks made from a stored
	// production turn.
	SourceAgentID string
	SourceTurnID  string
	// Input is the case input, canonical JSON; for a task made from a turn,
	// {"question": <input_text>}.
	Input json.RawMessage
	// TurnInput is what a rollout of the task receives.
	TurnInput string
	// Graders is the compiled verifier suite, frozen at creation: a JSON
	// list of grader declarations that grade.ParseSpecs reads back.
	Graders   json.RawMessage
	CreatedAt time.Time
}

// NewTask is one task of a CreateSuiteTasks call.
type NewTask struct {
	CaseID    string
	Input     json.RawMessage
	TurnInput string
	Graders   json.RawMessage
}

// SuiteTasks asks for tasks made from the cases of one suite version.
type SuiteTasks struct {
	TenantID     string
	SuiteName    string
	SuiteVersion string
	Tasks        []NewTask
}

// TurnTasks asks for one task per stored production turn of an agent, all
// judged by the same compiled verifier suite.
type TurnTasks struct {
	TenantID string
	AgentID  string
	// TurnIDs are distinct; tasks are created in this order.
	TurnIDs []string
	// Graders is the compiled verifier suite, JSON, frozen on every task.
	Graders json.RawMessage
	// SkipExisting leaves out the turns that already have a task instead
	// of making a second one.
	SkipExisting bool
}

// TurnSelection selects an agent's stored turns by filter. Zero fields
// select everything.
type TurnSelection struct {
	TenantID string
	AgentID  string
	// ConversationID keeps only the turns of this conversation.
	ConversationID string
	// Since keeps only the turns received at or after it.
	Since time.Time
	// Until keeps only the turns received before it.
	Until time.Time
}

// TurnRef is a turn that a TurnSelection selected.
type TurnRef struct {
	TurnID string
	// HasInput is false when the turn's input_text is null: there is
	// nothing to replay.
	HasInput bool
	// HasTask is true when a task was already made from the turn.
	HasTask bool
}

// TaskFilter narrows ListTasks. The zero value lists every task.
type TaskFilter struct {
	// Suite, when set, keeps only the tasks made from that suite.
	Suite string
}

// ErrNoInputText: a production turn's input_text is null, so there is
// nothing to replay.
var ErrNoInputText = errors.New("turn has no input_text")

// TurnRefError says why TurnIDs[Index] of a TurnTasks cannot become a
// task. Err is ErrNotFound (no such turn of the agent in the tenant) or
// ErrNoInputText.
type TurnRefError struct {
	Index  int
	TurnID string
	Err    error
}

// Error describes the turn and the reason.
func (e *TurnRefError) Error() string {
	return fmt.Sprintf("turn %d (%q): %v", e.Index, e.TurnID, e.Err)
}

// Unwrap returns Err, for errors.Is.
func (e *TurnRefError) Unwrap() error { return e.Err }
