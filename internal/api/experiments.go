package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/suite"
)

// Roles of the experiment routes (SPEC §3, §7.5): an evaluator key
// records experiments; readers and evaluators read them (an evaluator
// reads its experiments back to resume them).
var (
	evaluatorOnly    = access{roles: []gyre.Role{gyre.RoleEvaluator}}
	experimentReader = access{roles: []gyre.Role{gyre.RoleReader, gyre.RoleEvaluator}}
)

// experimentRoutes registers eval experiments, their runs and the blob
// upload (SPEC §7.5).
func (s *Server) experimentRoutes() {
	s.handle("POST /api/v1/experiments", evaluatorOnly, s.createExperiment)
	s.handle("GET /api/v1/experiments", experimentReader, s.listExperiments)
	s.handle("GET /api/v1/experiments/{id}", experimentReader, s.getExperiment)
	s.handle("GET /api/v1/experiments/{id}/runs", experimentReader, s.listExperimentRuns)
	s.handle("PUT /api/v1/experiments/{id}/runs/{case_id}/{repetition}", evaluatorOnly, s.putExperimentRun)
	s.handle("POST /api/v1/experiments/{id}/finish", evaluatorOnly, s.finishExperiment)
	s.handle("PUT /api/v1/blobs/{sha256}", access{roles: evaluatorOnly.roles, blobBody: true, ownMediaType: true}, s.putBlob)
}

// maxHarnessLen bounds the harness name or URL of an experiment.
const maxHarnessLen = 2048

// maxRepetition bounds a run's repetition number.
const maxRepetition = 1_000_000

// expObject reports whether raw is a JSON object.
func expObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}

// expArray reports whether raw is a JSON array.
func expArray(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '['
}

// expNull reports whether raw is absent or JSON null.
func expNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// createExperiment is POST /api/v1/experiments: the capabilities
// snapshot, suite version and harness of a new experiment. 201 with the
// experiment and its id.
func (s *Server) createExperiment(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	var body eval.NewExperimentJSON
	if err := s.decodeJSON(r, &body); err != nil {
		return err
	}
	switch {
	case !suite.ValidName(body.Suite):
		return gyre.Errorf(gyre.CodeInvalidBody, "suite must be a suite name of 1 to 255 characters from A-Z a-z 0-9 . _ -").AtPointer("/suite")
	case !suite.ValidName(body.SuiteVersion):
		return gyre.Errorf(gyre.CodeInvalidBody, "suite_version must be a version name or a content hash").AtPointer("/suite_version")
	case body.Harness == "" || len(body.Harness) > maxHarnessLen:
		return gyre.Errorf(gyre.CodeInvalidBody, "harness must be the harness's name or URL, at most %d bytes", maxHarnessLen).AtPointer("/harness")
	case !expObject(body.Capabilities):
		return gyre.Errorf(gyre.CodeInvalidBody, "capabilities must be the harness's capabilities object").AtPointer("/capabilities")
	case !expNull(body.Config) && !expObject(body.Config):
		return gyre.Errorf(gyre.CodeInvalidBody, "config must be an object").AtPointer("/config")
	}
	cfg := body.Config
	if expNull(cfg) {
		cfg = nil
	}
	e, err := s.store.CreateExperiment(r.Context(), store.NewExperiment{
		TenantID: p.TenantID, Suite: body.Suite, SuiteVersion: body.SuiteVersion, Harness: body.Harness,
		Capabilities: body.Capabilities, Config: cfg,
	})
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/experiments/"+e.ID)
	writeJSON(w, http.StatusCreated, eval.ExperimentToJSON(e))
	return nil
}

// listExperiments is GET /api/v1/experiments: the tenant's experiments,
// newest first.
func (s *Server) listExperiments(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	pg, err := pageOnly(r)
	if err != nil {
		return err
	}
	list, next, err := s.store.ListExperiments(r.Context(), p.TenantID, pg)
	if err != nil {
		return err
	}
	items := make([]eval.ExperimentJSON, len(list))
	for i, e := range list {
		items[i] = eval.ExperimentToJSON(e)
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// experimentOf reads the path's experiment in the caller's tenant.
func (s *Server) experimentOf(r *http.Request, tenantID string) (store.Experiment, error) {
	id, err := pathUUID(r, "id")
	if err != nil {
		return store.Experiment{}, err
	}
	e, err := s.store.Experiment(r.Context(), tenantID, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Experiment{}, gyre.Errorf(gyre.CodeNotFound, "no experiment %s in this tenant", id)
	}
	return e, err
}

// getExperiment is GET /api/v1/experiments/{id}.
func (s *Server) getExperiment(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	e, err := s.experimentOf(r, p.TenantID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, eval.ExperimentToJSON(e))
	return nil
}

// listExperimentRuns is GET /api/v1/experiments/{id}/runs: the run
// records by case id, then repetition.
func (s *Server) listExperimentRuns(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	e, err := s.experimentOf(r, p.TenantID)
	if err != nil {
		return err
	}
	pg, err := pageOnly(r)
	if err != nil {
		return err
	}
	runs, next, err := s.store.ListRuns(r.Context(), p.TenantID, e.ID, pg)
	if err != nil {
		return err
	}
	items := make([]eval.RunJSON, len(runs))
	for i, rec := range runs {
		items[i] = eval.RunToJSON(rec)
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// runBody is the body of PUT …/runs/{case_id}/{repetition}: a run record
// (eval.RunJSON without updated_at, which the server sets).
type runBody struct {
	RunID            *string         `json:"run_id" text:"contract"`
	CaseID           *string         `json:"case_id"`
	Repetition       *int            `json:"repetition"`
	Status           *string         `json:"status"`
	Classification   *string         `json:"classification"`
	TimedOut         bool            `json:"timed_out"`
	Error            *string         `json:"error" text:"contract"`
	Model            *string         `json:"model" text:"contract"`
	Answer           *string         `json:"answer" text:"contract"`
	Output           json.RawMessage `json:"output"`
	Verdicts         json.RawMessage `json:"verdicts"`
	Trajectory       json.RawMessage `json:"trajectory"`
	Files            json.RawMessage `json:"files"`
	TrajectorySHA256 *string         `json:"trajectory_sha256"`
	Artifacts        json.RawMessage `json:"artifacts"`
	Attempts         json.RawMessage `json:"attempts"`
	Usage            json.RawMessage `json:"usage"`
	Score            *float64        `json:"score"`
	LatencyMS        *float64        `json:"latency_ms"`
	StartedAt        *time.Time      `json:"started_at"`
	FinishedAt       *time.Time      `json:"finished_at"`
	Graders          json.RawMessage `json:"graders"`
	Input            json.RawMessage `json:"input"`
	GraderVersions   json.RawMessage `json:"grader_versions"`
}

var (
	runStatuses        = []string{"queued", "running", "completed", "failed", "cancelled"}
	runClassifications = []string{"passed", "failed", "unscored", "error"}
)

// putExperimentRun is PUT /api/v1/experiments/{id}/runs/{case_id}/{repetition}:
// the run record of one (case, repetition), replacing any earlier one, so
// that sending it again is harmless. A trajectory_sha256 must name a blob
// the tenant uploaded first (PUT /api/v1/blobs/{sha256}). 201 for a new
// record, 200 for a replaced one; the answer is the stored record.
func (s *Server) putExperimentRun(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	e, err := s.experimentOf(r, p.TenantID)
	if err != nil {
		return err
	}
	caseID, err := pathName(r, "case_id")
	if err != nil {
		return err
	}
	rep, err := strconv.Atoi(r.PathValue("repetition"))
	if err != nil || rep < 1 || rep > maxRepetition || strconv.Itoa(rep) != r.PathValue("repetition") {
		return errPathParam("repetition", fmt.Sprintf("an integer from 1 to %d", maxRepetition))
	}
	var b runBody
	if err := s.decodeJSON(r, &b); err != nil {
		return err
	}
	if err := checkRunBody(&b, caseID, rep); err != nil {
		return err
	}
	rec := store.RunRecord{
		TenantID: p.TenantID, ExperimentID: e.ID, CaseID: caseID, Repetition: rep,
		RunID: expStr(b.RunID), Status: expStr(b.Status), Classification: expStr(b.Classification), TimedOut: b.TimedOut,
		Error: expStr(b.Error), Model: expStr(b.Model), Answer: b.Answer, Output: expNonNull(b.Output),
		Verdicts: expNonNull(b.Verdicts), Trajectory: expNonNull(b.Trajectory), Files: expNonNull(b.Files),
		TrajectorySHA256: expStr(b.TrajectorySHA256), Artifacts: expNonNull(b.Artifacts), Attempts: expNonNull(b.Attempts),
		Usage: expNonNull(b.Usage), Score: b.Score, LatencyMS: b.LatencyMS, StartedAt: b.StartedAt, FinishedAt: b.FinishedAt,
		Graders: expNonNull(b.Graders), Input: expNonNull(b.Input), GraderVersions: expNonNull(b.GraderVersions),
	}
	if rec.TrajectorySHA256 != "" {
		if _, err := s.store.BlobRef(r.Context(), p.TenantID, rec.TrajectorySHA256); errors.Is(err, store.ErrNotFound) {
			return gyre.Errorf(gyre.CodeInvalidBody, "trajectory_sha256 %s was not uploaded: PUT /api/v1/blobs/%s first",
				rec.TrajectorySHA256, rec.TrajectorySHA256).AtPointer("/trajectory_sha256")
		} else if err != nil {
			return err
		}
	}
	created, err := s.store.PutRun(r.Context(), rec)
	if err != nil {
		return err
	}
	stored, err := s.store.Run(r.Context(), p.TenantID, e.ID, caseID, rep)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, eval.RunToJSON(stored))
	return nil
}

// checkRunBody checks a run record's members.
func checkRunBody(b *runBody, caseID string, rep int) error {
	bad := func(ptr, format string, args ...any) error {
		return gyre.Errorf(gyre.CodeInvalidBody, format, args...).AtPointer(ptr)
	}
	switch {
	case b.CaseID != nil && *b.CaseID != caseID:
		return bad("/case_id", "case_id %q differs from the path's %q", *b.CaseID, caseID)
	case b.Repetition != nil && *b.Repetition != rep:
		return bad("/repetition", "repetition %d differs from the path's %d", *b.Repetition, rep)
	case b.RunID != nil && (*b.RunID == "" || len(*b.RunID) > 1024):
		return bad("/run_id", "run_id must be the harness's run id, 1 to 1024 bytes")
	case b.Status != nil && !slices.Contains(runStatuses, *b.Status):
		return bad("/status", "status must be queued, running, completed, failed or cancelled")
	case b.Classification != nil && !slices.Contains(runClassifications, *b.Classification):
		return bad("/classification", "classification must be passed, failed, unscored or error (null while the run is in flight)")
	case !expNull(b.Output) && !expObject(b.Output):
		return bad("/output", "output must be an object or null")
	case !expNull(b.Verdicts) && !expArray(b.Verdicts):
		return bad("/verdicts", "verdicts must be an array")
	case !expNull(b.Trajectory) && !expObject(b.Trajectory):
		return bad("/trajectory", "trajectory must be {valid, errors, schema_version} or null")
	case !expNull(b.Files) && !expArray(b.Files):
		return bad("/files", "files must be an array")
	case !expNull(b.Artifacts) && !expArray(b.Artifacts):
		return bad("/artifacts", "artifacts must be an array or null")
	case !expNull(b.Attempts) && !expArray(b.Attempts):
		return bad("/attempts", "attempts must be an array")
	case !expNull(b.Usage) && !expObject(b.Usage):
		return bad("/usage", "usage must be an object or null")
	case b.TrajectorySHA256 != nil && !blobstore.ValidSHA256(*b.TrajectorySHA256):
		return bad("/trajectory_sha256", "trajectory_sha256 must be a lowercase hex SHA-256")
	case b.Score != nil && (math.IsNaN(*b.Score) || *b.Score < 0 || *b.Score > 1):
		return bad("/score", "score must be from 0 to 1")
	case b.LatencyMS != nil && (math.IsNaN(*b.LatencyMS) || *b.LatencyMS < 0):
		return bad("/latency_ms", "latency_ms must not be negative")
	case b.TimedOut && expStr(b.Classification) != "failed":
		return bad("/timed_out", "a timed-out run is classified failed")
	case !expNull(b.Input) && !expObject(b.Input):
		return bad("/input", "input must be the case's input object, or null")
	case !expNull(b.GraderVersions) && !expArray(b.GraderVersions):
		return bad("/grader_versions", "grader_versions must be an array, or null")
	}
	if !expNull(b.Graders) {
		// The case's graders as the evaluator compiled them: they must
		// parse, so a regrade can use them. Command graders are kept; the
		// server runs them only when its operator allow-lists them.
		if _, err := grade.ParseSpecsAt(b.Graders, "/graders"); err != nil {
			return err
		}
	}
	return nil
}

// finishExperiment is POST /api/v1/experiments/{id}/finish: the
// experiment's model and summary. Finishing again (after a resume)
// replaces them.
func (s *Server) finishExperiment(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	e, err := s.experimentOf(r, p.TenantID)
	if err != nil {
		return err
	}
	var body eval.FinishJSON
	if err := s.decodeJSON(r, &body); err != nil {
		return err
	}
	if !expObject(body.Summary) {
		return gyre.Errorf(gyre.CodeInvalidBody, "summary must be the experiment's summary object").AtPointer("/summary")
	}
	if body.Model != nil && (*body.Model == "" || len(*body.Model) > 1024) {
		return gyre.Errorf(gyre.CodeInvalidBody, "model must be 1 to 1024 bytes, or null").AtPointer("/model")
	}
	fin, err := s.store.FinishExperiment(r.Context(), store.ExperimentFinish{
		TenantID: p.TenantID, ID: e.ID, Model: expStr(body.Model), Summary: body.Summary,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, eval.ExperimentToJSON(fin))
	return nil
}

// blobJSON answers PUT /api/v1/blobs/{sha256}.
type blobJSON struct {
	SHA256    string `json:"sha256"`
	SizeBytes int64  `json:"size_bytes"`
}

// putBlob is PUT /api/v1/blobs/{sha256}: a content-addressed blob (a
// trajectory, a workspace file) that a run record refers to. The body
// streams to the blob store under blobs/<tenant>/<sha256>; bytes that do
// not hash to the path's digest are 422 and recorded nowhere. 201 for a
// new blob, 200 when the tenant uploaded it before.
func (s *Server) putBlob(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	want := r.PathValue("sha256")
	if !blobstore.ValidSHA256(want) {
		return errPathParam("sha256", "a lowercase hex SHA-256")
	}
	if s.blobs == nil {
		return gyre.Errorf(gyre.CodeUnavailable, "this server has no blob store configured")
	}
	body, err := streamBody(r, s.cfg.MaxBlobBytes)
	if err != nil {
		return err
	}
	defer body.Close()
	size, err := s.blobs.PutContentAs(r.Context(), eval.BlobPrefix(p.TenantID), want, body)
	if errors.Is(err, blobstore.ErrDigestMismatch) {
		return gyre.Errorf(gyre.CodeInvalidBody, "the body's sha256 is not %s; nothing was stored", want)
	}
	if err != nil {
		return err
	}
	sum := want
	created, err := s.store.PutBlobRef(r.Context(), p.TenantID, sum, size)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, blobJSON{SHA256: sum, SizeBytes: size})
	return nil
}

// expStr is *s, or "" for nil.
func expStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// expNonNull drops a JSON null member.
func expNonNull(raw json.RawMessage) json.RawMessage {
	if expNull(raw) {
		return nil
	}
	return raw
}
