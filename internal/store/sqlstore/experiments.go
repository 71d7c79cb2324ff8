package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gyrehq/gyre/internal/store"
)

const experimentColumns = `id, suite_name, suite_version, harness, capabilities, config, model, summary, created_us, finished_us`

// CreateExperiment stores a new experiment with a fresh UUIDv7 id.
func (s *Store) CreateExperiment(ctx context.Context, e store.NewExperiment) (store.Experiment, error) {
	if err := refuseNUL("/suite", e.Suite, "/suite_version", e.SuiteVersion, "/harness", e.Harness); err != nil {
		return store.Experiment{}, fmt.Errorf("create experiment: %w", err)
	}
	switch {
	case e.Suite == "":
		return store.Experiment{}, errors.New("create experiment: empty suite name")
	case e.SuiteVersion == "":
		return store.Experiment{}, errors.New("create experiment: empty suite version")
	case e.Harness == "":
		return store.Experiment{}, errors.New("create experiment: empty harness")
	case !json.Valid(e.Capabilities):
		return store.Experiment{}, errors.New("create experiment: capabilities are not JSON")
	}
	config := e.Config
	if len(config) == 0 {
		config = json.RawMessage("{}")
	} else if !json.Valid(config) {
		return store.Experiment{}, errors.New("create experiment: config is not JSON")
	}
	id, err := newID()
	if err != nil {
		return store.Experiment{}, fmt.Errorf("create experiment: %w", err)
	}
	now := s.now()
	err = s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tenantByID(ctx, tx, e.TenantID); err != nil {
			return notFound("tenant", err)
		}
		_, err := tx.ExecContext(ctx,
			`INSERT INTO experiments (id, tenant_id, suite_name, suite_version, harness, capabilities, config, created_us)
			 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			id, e.TenantID, e.Suite, e.SuiteVersion, e.Harness, string(e.Capabilities), string(config), now)
		return err
	})
	if err != nil {
		return store.Experiment{}, fmt.Errorf("create experiment: %w", err)
	}
	return store.Experiment{
		ID: id, Suite: e.Suite, SuiteVersion: e.SuiteVersion, Harness: e.Harness,
		Capabilities: e.Capabilities, Config: config, CreatedAt: store.FromMicros(now),
	}, nil
}

// Experiment returns one of the tenant's experiments.
func (s *Store) Experiment(ctx context.Context, tenantID, id string) (store.Experiment, error) {
	e, err := scanExperiment(s.reader.QueryRowContext(ctx,
		`SELECT `+experimentColumns+` FROM experiments WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if err != nil {
		return store.Experiment{}, notFound("experiment", err)
	}
	return e, nil
}

// ListExperiments lists the tenant's experiments, newest first.
func (s *Store) ListExperiments(ctx context.Context, tenantID string, p store.Page) ([]store.Experiment, string, error) {
	return s.listExperiments(ctx, tenantID, store.ExperimentFilter{}, listCursor(tenantID, "experiments"), p)
}

// FilterExperiments lists the tenant's experiments that match f, newest
// first; the cursor is bound to the filter.
func (s *Store) FilterExperiments(ctx context.Context, tenantID string, f store.ExperimentFilter, p store.Page) ([]store.Experiment, string, error) {
	switch f.State {
	case "", store.ExperimentRunning, store.ExperimentFinished:
	default:
		return nil, "", fmt.Errorf("filter experiments: unknown state %q", f.State)
	}
	cur := listCursor(tenantID, "experiments")
	if f != (store.ExperimentFilter{}) {
		cur = listCursor(tenantID, "experiments", f.Suite, string(f.State),
			strconv.FormatInt(micros(f.Since), 10), strconv.FormatInt(micros(f.Until), 10))
	}
	return s.listExperiments(ctx, tenantID, f, cur, p)
}

// micros is t in microseconds since the epoch, 0 for the zero time.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func (s *Store) listExperiments(ctx context.Context, tenantID string, f store.ExperimentFilter, cur cursorScope, p store.Page) ([]store.Experiment, string, error) {
	after, err := cur.decodeID(p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list experiments: %w", err)
	}
	n := limit(p)
	q := `SELECT ` + experimentColumns + ` FROM experiments WHERE tenant_id = $1`
	args := []any{tenantID}
	arg := func(cond string, v any) {
		args = append(args, v)
		q += ` AND ` + strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args)))
	}
	if f.Suite != "" {
		arg(`suite_name = ?`, f.Suite)
	}
	switch f.State {
	case store.ExperimentRunning:
		q += ` AND finished_us IS NULL`
	case store.ExperimentFinished:
		q += ` AND finished_us IS NOT NULL`
	}
	if !f.Since.IsZero() {
		arg(`created_us >= ?`, f.Since.UnixMicro())
	}
	if !f.Until.IsZero() {
		arg(`created_us < ?`, f.Until.UnixMicro())
	}
	if after != "" {
		arg(`id < ?`, after)
	}
	q += ` ORDER BY id DESC LIMIT ` + strconv.Itoa(n+1)
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list experiments: %w", err)
	}
	defer rows.Close()
	out := make([]store.Experiment, 0, n)
	for rows.Next() {
		e, err := scanExperiment(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list experiments: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list experiments: %w", err)
	}
	var next string
	if len(out) > n {
		out = out[:n]
		next = cur.encode(out[n-1].ID)
	}
	return out, next, nil
}

// FinishExperiment records the experiment's model and summary and stamps
// its finish time; finishing again replaces them.
func (s *Store) FinishExperiment(ctx context.Context, f store.ExperimentFinish) (store.Experiment, error) {
	if len(f.Summary) == 0 || !json.Valid(f.Summary) {
		return store.Experiment{}, errors.New("finish experiment: summary is not JSON")
	}
	var out store.Experiment
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.now()
		q := `UPDATE experiments SET model = $3, summary = $4, finished_us = $5 WHERE tenant_id = $1 AND id = $2`
		if f.KeepFinishedAt {
			q = `UPDATE experiments SET model = $3, summary = $4, finished_us = COALESCE(finished_us, $5)
				WHERE tenant_id = $1 AND id = $2`
		}
		res, err := tx.ExecContext(ctx, q, f.TenantID, f.ID, jsonText(f.Model), string(f.Summary), now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrNotFound
		}
		out, err = scanExperiment(tx.QueryRowContext(ctx,
			`SELECT `+experimentColumns+` FROM experiments WHERE tenant_id = $1 AND id = $2`, f.TenantID, f.ID))
		return err
	})
	if err != nil {
		return store.Experiment{}, fmt.Errorf("finish experiment: %w", err)
	}
	return out, nil
}

func scanExperiment(r scanner) (store.Experiment, error) {
	var (
		e              store.Experiment
		caps, cfg      string
		model, summary sql.NullString
		created        int64
		finished       sql.NullInt64
	)
	if err := r.Scan(&e.ID, &e.Suite, &e.SuiteVersion, &e.Harness, &caps, &cfg, &model, &summary, &created, &finished); err != nil {
		return store.Experiment{}, err
	}
	e.Capabilities = json.RawMessage(caps)
	e.Config = json.RawMessage(cfg)
	m, err := fromJSONText(model)
	if err != nil {
		return store.Experiment{}, err
	}
	if m != nil {
		e.Model = *m
	}
	if summary.Valid {
		e.Summary = json.RawMessage(summary.String)
	}
	e.CreatedAt = store.FromMicros(created)
	e.FinishedAt = timePtr(finished)
	return e, nil
}

const runColumns = `experiment_id, case_id, repetition, run_id, status, classification, timed_out, error, model,
	answer, output, verdicts, trajectory_blob, trajectory, files, artifacts, attempts, usage, score, latency_ms,
	started_us, finished_us, updated_us, graders, input, grader_versions`

// runClassifications are the values PutRun accepts ("" is in flight).
var runClassifications = []string{"", "passed", "failed", "unscored", "error"}

func checkRun(r store.RunRecord) error {
	if err := refuseNUL("/case_id", r.CaseID, "/status", r.Status); err != nil {
		return err
	}
	switch {
	case r.CaseID == "" || len(r.CaseID) > maxNameLen:
		return fmt.Errorf("case id %q is empty or too long", r.CaseID)
	case r.Repetition < 1:
		return fmt.Errorf("repetition %d is not 1-based", r.Repetition)
	case r.TrajectorySHA256 != "" && checkSHA256("trajectory sha256", r.TrajectorySHA256) != nil:
		return fmt.Errorf("trajectory sha256 %q is not a lowercase hex sha-256", r.TrajectorySHA256)
	}
	valid := false
	for _, c := range runClassifications {
		valid = valid || c == r.Classification
	}
	if !valid {
		return fmt.Errorf("classification %q is not passed, failed, unscored or error", r.Classification)
	}
	for _, b := range r.Blobs {
		if err := checkSHA256("blob sha256", b.SHA256); err != nil {
			return err
		}
		if b.Size < 0 {
			return fmt.Errorf("blob %s has a negative size", b.SHA256)
		}
	}
	for name, raw := range map[string]json.RawMessage{
		"output": r.Output, "verdicts": r.Verdicts, "trajectory": r.Trajectory, "files": r.Files,
		"artifacts": r.Artifacts, "attempts": r.Attempts, "usage": r.Usage,
		"graders": r.Graders, "input": r.Input, "grader_versions": r.GraderVersions,
	} {
		if len(raw) > 0 && !json.Valid(raw) {
			return fmt.Errorf("%s is not JSON", name)
		}
	}
	return nil
}

// PutRun writes the run record of one (case, repetition), replacing any
// earlier one.
func (s *Store) PutRun(ctx context.Context, r store.RunRecord) (bool, error) {
	if err := checkRun(r); err != nil {
		return false, fmt.Errorf("put run: %w", err)
	}
	var created bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM experiments WHERE tenant_id = $1 AND id = $2`,
			r.TenantID, r.ExperimentID).Scan(&one)
		if err != nil {
			return notFound("experiment", err)
		}
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE experiment_id = $1 AND case_id = $2 AND repetition = $3`,
			r.ExperimentID, r.CaseID, r.Repetition).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			created = true
		case err != nil:
			return fmt.Errorf("read run: %w", err)
		default:
			created = false
		}
		_, err = tx.ExecContext(ctx,
			`INSERT INTO runs (experiment_id, case_id, repetition, tenant_id, run_id, status, classification, timed_out,
			   error, model, answer, output, verdicts, trajectory_blob, trajectory, files, artifacts, attempts, usage,
			   score, latency_ms, started_us, finished_us, updated_us, graders, input, grader_versions)
			 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24,
			   $25, $26, $27)
			 ON CONFLICT (experiment_id, case_id, repetition) DO UPDATE SET
			   run_id = excluded.run_id, status = excluded.status, classification = excluded.classification,
			   timed_out = excluded.timed_out, error = excluded.error, model = excluded.model, answer = excluded.answer,
			   output = excluded.output, verdicts = excluded.verdicts, trajectory_blob = excluded.trajectory_blob,
			   trajectory = excluded.trajectory, files = excluded.files, artifacts = excluded.artifacts,
			   attempts = excluded.attempts, usage = excluded.usage, score = excluded.score,
			   latency_ms = excluded.latency_ms, started_us = excluded.started_us, finished_us = excluded.finished_us,
			   updated_us = excluded.updated_us, graders = excluded.graders, input = excluded.input,
			   grader_versions = excluded.grader_versions`,
			r.ExperimentID, r.CaseID, r.Repetition, r.TenantID, jsonText(r.RunID), nullString(r.Status),
			nullString(r.Classification), r.TimedOut, jsonText(r.Error), jsonText(r.Model), jsonTextPtr(r.Answer),
			nullJSON(r.Output), nullJSON(r.Verdicts), nullString(r.TrajectorySHA256), nullJSON(r.Trajectory),
			nullJSON(r.Files), nullJSON(r.Artifacts), nullJSON(r.Attempts), nullJSON(r.Usage),
			nullFloat(r.Score), nullFloat(r.LatencyMS), nullMicros(r.StartedAt), nullMicros(r.FinishedAt), s.now(),
			nullJSON(r.Graders), nullJSON(r.Input), nullJSON(r.GraderVersions))
		if err != nil {
			return fmt.Errorf("write run: %w", err)
		}
		for _, b := range r.Blobs {
			_, err := tx.ExecContext(ctx,
				`INSERT INTO blob_refs (tenant_id, sha256, size_bytes, created_us) VALUES ($1, $2, $3, $4)
				 ON CONFLICT (tenant_id, sha256) DO NOTHING`, r.TenantID, b.SHA256, b.Size, s.now())
			if err != nil {
				return fmt.Errorf("record blob: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("put run: %w", err)
	}
	return created, nil
}

// Run returns the run record of one (case, repetition).
func (s *Store) Run(ctx context.Context, tenantID, experimentID, caseID string, repetition int) (store.RunRecord, error) {
	r, err := scanRun(s.reader.QueryRowContext(ctx,
		`SELECT `+runColumns+` FROM runs WHERE tenant_id = $1 AND experiment_id = $2 AND case_id = $3 AND repetition = $4`,
		tenantID, experimentID, caseID, repetition))
	if err != nil {
		return store.RunRecord{}, notFound("run", err)
	}
	r.TenantID = tenantID
	return r, nil
}

// ListRuns lists an experiment's run records by case id, then repetition.
func (s *Store) ListRuns(ctx context.Context, tenantID, experimentID string, p store.Page) ([]store.RunRecord, string, error) {
	cur := listCursor(tenantID, "runs", experimentID)
	afterCase, afterRep, err := s.runsPageStart(ctx, cur, tenantID, experimentID, p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	n := limit(p)
	rows, err := s.reader.QueryContext(ctx,
		`SELECT `+runColumns+` FROM runs
		 WHERE tenant_id = $1 AND experiment_id = $2 AND (case_id > $3 OR (case_id = $3 AND repetition > $4))
		 ORDER BY case_id, repetition
		 LIMIT `+strconv.Itoa(n+1),
		tenantID, experimentID, afterCase, afterRep)
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	out := make([]store.RunRecord, 0, n)
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list runs: %w", err)
		}
		r.TenantID = tenantID
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	var next string
	if len(out) > n {
		out = out[:n]
		next = runCursor(cur, out[n-1].CaseID, out[n-1].Repetition)
	}
	return out, next, nil
}

// ListRunOutcomes lists what reports read of an experiment's run records,
// by case id, then repetition, without their documents.
func (s *Store) ListRunOutcomes(ctx context.Context, tenantID, experimentID string, p store.Page) ([]store.RunOutcome, string, error) {
	cur := listCursor(tenantID, "run-outcomes", experimentID)
	afterCase, afterRep, err := s.runsPageStart(ctx, cur, tenantID, experimentID, p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list run outcomes: %w", err)
	}
	n := p.Limit
	switch {
	case n <= 0:
		n = defaultLimit
	case n > store.MaxRunOutcomes:
		n = store.MaxRunOutcomes
	}
	rows, err := s.reader.QueryContext(ctx,
		`SELECT case_id, repetition, classification, timed_out, model, score, latency_ms, usage, trajectory_blob IS NOT NULL
		 FROM runs
		 WHERE tenant_id = $1 AND experiment_id = $2 AND (case_id > $3 OR (case_id = $3 AND repetition > $4))
		 ORDER BY case_id, repetition
		 LIMIT `+strconv.Itoa(n+1),
		tenantID, experimentID, afterCase, afterRep)
	if err != nil {
		return nil, "", fmt.Errorf("list run outcomes: %w", err)
	}
	defer rows.Close()
	out := make([]store.RunOutcome, 0, min(n, 512))
	for rows.Next() {
		var (
			o             store.RunOutcome
			class, model  sql.NullString
			usage         sql.NullString
			score, latent sql.NullFloat64
		)
		if err := rows.Scan(&o.CaseID, &o.Repetition, &class, &o.TimedOut, &model, &score, &latent, &usage, &o.HasTrajectory); err != nil {
			return nil, "", fmt.Errorf("list run outcomes: %w", err)
		}
		o.Classification = class.String
		m, err := fromJSONText(model)
		if err != nil {
			return nil, "", fmt.Errorf("list run outcomes: %w", err)
		}
		if m != nil {
			o.Model = *m
		}
		if score.Valid {
			o.Score = &score.Float64
		}
		if latent.Valid {
			o.LatencyMS = &latent.Float64
		}
		o.Usage = rawOrNil(usage)
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list run outcomes: %w", err)
	}
	var next string
	if len(out) > n {
		out = out[:n]
		next = runCursor(cur, out[n-1].CaseID, out[n-1].Repetition)
	}
	return out, next, nil
}

// runsPageStart is where a page of an experiment's runs starts, read from
// cursor, once the experiment is known to exist in the tenant.
func (s *Store) runsPageStart(ctx context.Context, cur cursorScope, tenantID, experimentID, cursor string) (string, int, error) {
	afterCase, afterRep, err := decodeRunCursor(cur, cursor)
	if err != nil {
		return "", 0, err
	}
	var one int
	if err := s.reader.QueryRowContext(ctx, `SELECT 1 FROM experiments WHERE tenant_id = $1 AND id = $2`,
		tenantID, experimentID).Scan(&one); err != nil {
		return "", 0, notFound("experiment", err)
	}
	return afterCase, afterRep, nil
}

// runCursor is the cursor of the page after the run (caseID, rep).
func runCursor(cur cursorScope, caseID string, rep int) string {
	return cur.encode(strconv.Itoa(rep) + ":" + caseID)
}

// decodeRunCursor reads the position of a runs cursor,
// "<repetition>:<case id>", or "", 0 for the first page: the empty case id
// sorts before every stored one.
func decodeRunCursor(cur cursorScope, cursor string) (string, int, error) {
	pos, err := cur.decode(cursor)
	if err != nil || pos == "" {
		return "", 0, err
	}
	r, caseID, ok := strings.Cut(pos, ":")
	rep, err := strconv.Atoi(r)
	if !ok || caseID == "" || err != nil || rep < 1 || strconv.Itoa(rep) != r {
		return "", 0, fmt.Errorf("cursor is not a run cursor: %w", store.ErrInvalidCursor)
	}
	return caseID, rep, nil
}

func scanRun(r scanner) (store.RunRecord, error) {
	var (
		rec                                               store.RunRecord
		runID, status, class, errMsg, model, answer, traj sql.NullString
		output, verdicts, trajInfo, files, arts, attempts sql.NullString
		usage, graders, input, versions                   sql.NullString
		score, latency                                    sql.NullFloat64
		started, finished                                 sql.NullInt64
		updated                                           int64
	)
	err := r.Scan(&rec.ExperimentID, &rec.CaseID, &rec.Repetition, &runID, &status, &class, &rec.TimedOut, &errMsg,
		&model, &answer, &output, &verdicts, &traj, &trajInfo, &files, &arts, &attempts, &usage, &score, &latency,
		&started, &finished, &updated, &graders, &input, &versions)
	if err != nil {
		return store.RunRecord{}, err
	}
	rec.Graders, rec.Input, rec.GraderVersions = rawOrNil(graders), rawOrNil(input), rawOrNil(versions)
	rec.Status, rec.Classification, rec.TrajectorySHA256 = status.String, class.String, traj.String
	for _, f := range []struct {
		col sql.NullString
		dst *string
	}{{runID, &rec.RunID}, {errMsg, &rec.Error}, {model, &rec.Model}} {
		v, err := fromJSONText(f.col)
		if err != nil {
			return store.RunRecord{}, err
		}
		if v != nil {
			*f.dst = *v
		}
	}
	if rec.Answer, err = fromJSONText(answer); err != nil {
		return store.RunRecord{}, err
	}
	rec.Output = rawOrNil(output)
	rec.Verdicts = rawOrNil(verdicts)
	rec.Trajectory = rawOrNil(trajInfo)
	rec.Files = rawOrNil(files)
	rec.Artifacts = rawOrNil(arts)
	rec.Attempts = rawOrNil(attempts)
	rec.Usage = rawOrNil(usage)
	if score.Valid {
		v := score.Float64
		rec.Score = &v
	}
	if latency.Valid {
		v := latency.Float64
		rec.LatencyMS = &v
	}
	rec.StartedAt = timePtr(started)
	rec.FinishedAt = timePtr(finished)
	rec.UpdatedAt = store.FromMicros(updated)
	return rec, nil
}

// PutBlobRef records that the tenant stored a content-addressed blob.
func (s *Store) PutBlobRef(ctx context.Context, tenantID, sha256 string, size int64) (bool, error) {
	if err := checkSHA256("blob sha256", sha256); err != nil {
		return false, fmt.Errorf("put blob ref: %w", err)
	}
	if size < 0 {
		return false, fmt.Errorf("put blob ref: negative size %d", size)
	}
	var created bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tenantByID(ctx, tx, tenantID); err != nil {
			return notFound("tenant", err)
		}
		res, err := tx.ExecContext(ctx,
			`INSERT INTO blob_refs (tenant_id, sha256, size_bytes, created_us) VALUES ($1, $2, $3, $4)
			 ON CONFLICT (tenant_id, sha256) DO NOTHING`, tenantID, sha256, size, s.now())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		created = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("put blob ref: %w", err)
	}
	return created, nil
}

// BlobRef returns the size of a blob the tenant stored.
func (s *Store) BlobRef(ctx context.Context, tenantID, sha256 string) (int64, error) {
	var size int64
	err := s.reader.QueryRowContext(ctx, `SELECT size_bytes FROM blob_refs WHERE tenant_id = $1 AND sha256 = $2`,
		tenantID, sha256).Scan(&size)
	if err != nil {
		return 0, notFound("blob", err)
	}
	return size, nil
}

func rawOrNil(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

func nullFloat(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

func nullMicros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return store.Micros(*t)
}
