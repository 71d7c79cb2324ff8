package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gyrehq/gyre/internal/store"
)

// checkRegradeSet refuses a verdict set that is not JSON or names an
// unknown source.
func checkRegradeSet(verdicts, versions, graders json.RawMessage, source string) error {
	switch {
	case source != store.VerdictsFromTask && source != store.VerdictsFromRequest:
		return fmt.Errorf("verdict source %q is not %q or %q", source, store.VerdictsFromTask, store.VerdictsFromRequest)
	case !json.Valid(verdicts) || !json.Valid(versions):
		return errors.New("verdicts and grader versions must be JSON")
	case len(graders) > 0 && !json.Valid(graders):
		return errors.New("graders must be JSON")
	}
	return nil
}

// insertVerdictSet stores one verdict set at the time at and returns it.
func insertVerdictSet(ctx context.Context, tx *sql.Tx, tenantID, kind, subjectID string, verdicts, versions json.RawMessage,
	source string, graders json.RawMessage, at int64) (store.VerdictSet, error) {
	id, err := newID()
	if err != nil {
		return store.VerdictSet{}, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO verdict_sets (id, tenant_id, subject_kind, subject_id, verdicts,
		grader_versions, source, graders, created_us) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		id, tenantID, kind, subjectID, string(verdicts), string(versions), source, nullJSON(graders), at); err != nil {
		return store.VerdictSet{}, fmt.Errorf("insert verdicts: %w", err)
	}
	return store.VerdictSet{ID: id, Verdicts: verdicts, GraderVersions: versions, Source: source, Graders: graders,
		CreatedAt: store.FromMicros(at)}, nil
}

// SaveRegrade stores a new current verdict set of a graded rollout and its
// recomputed training-grade decision. State and reconciliation stay as
// they are.
func (s *Store) SaveRegrade(ctx context.Context, g store.RegradeResult) (store.VerdictSet, error) {
	if err := checkRegradeSet(g.Verdicts, g.GraderVersions, g.Graders, g.Source); err != nil {
		return store.VerdictSet{}, fmt.Errorf("save regrade: %w", err)
	}
	reasons, err := json.Marshal(nonNil(g.Reasons))
	if err != nil {
		return store.VerdictSet{}, fmt.Errorf("save regrade: %w", err)
	}
	var set store.VerdictSet
	err = s.write(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM rollouts r WHERE r.tenant_id = $1 AND r.id = $2`+s.d.LockRows,
			g.TenantID, g.RolloutID).Scan(&one); err != nil {
			return notFound("rollout", err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM verdict_sets WHERE tenant_id = $1 AND subject_kind = $2
			AND subject_id = $3`, g.TenantID, store.SubjectRollout, g.RolloutID).Scan(&n); err != nil {
			return fmt.Errorf("read verdicts: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("rollout %s: %w", g.RolloutID, store.ErrNotGraded)
		}
		now := s.now()
		set, err = insertVerdictSet(ctx, tx, g.TenantID, store.SubjectRollout, g.RolloutID, g.Verdicts, g.GraderVersions,
			g.Source, g.Graders, now)
		if err != nil {
			return err
		}
		var tg any
		if g.TrainingGrade != nil {
			tg = *g.TrainingGrade
		}
		var outcome any
		if g.Outcome != "" {
			outcome = g.Outcome
		}
		_, err = tx.ExecContext(ctx, `UPDATE rollouts SET graded_us = $2, training_grade = $3, not_training_grade = $4,
			outcome = $5, reward = $6 WHERE id = $1`, g.RolloutID, now, tg, string(reasons), outcome, nullFloat(g.Reward))
		return err
	})
	if err != nil {
		return store.VerdictSet{}, fmt.Errorf("save regrade: %w", err)
	}
	return set, nil
}

// SaveRunRegrade stores a new current verdict set of a graded run and
// updates the run record from it. The first regrade keeps the set the run
// was graded with first, dated at the run's finish.
func (s *Store) SaveRunRegrade(ctx context.Context, g store.RunRegrade) (store.VerdictSet, error) {
	if err := checkRegradeSet(g.Verdicts, g.GraderVersions, g.Graders, g.Source); err != nil {
		return store.VerdictSet{}, fmt.Errorf("save run regrade: %w", err)
	}
	switch g.Classification {
	case "passed", "failed", "unscored":
	default:
		return store.VerdictSet{}, fmt.Errorf("save run regrade: classification %q is not passed, failed or unscored", g.Classification)
	}
	subject := store.RunSubject(g.ExperimentID, g.CaseID, g.Repetition)
	var set store.VerdictSet
	err := s.write(ctx, func(tx *sql.Tx) error {
		var (
			verdicts, versions sql.NullString
			finished           sql.NullInt64
			updated            int64
		)
		err := tx.QueryRowContext(ctx, `SELECT r.verdicts, r.grader_versions, r.finished_us, r.updated_us FROM runs r
			WHERE r.tenant_id = $1 AND r.experiment_id = $2 AND r.case_id = $3 AND r.repetition = $4`+s.d.LockRows,
			g.TenantID, g.ExperimentID, g.CaseID, g.Repetition).Scan(&verdicts, &versions, &finished, &updated)
		if err != nil {
			return notFound("run", err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM verdict_sets WHERE tenant_id = $1 AND subject_kind = $2
			AND subject_id = $3`, g.TenantID, store.SubjectRun, subject).Scan(&n); err != nil {
			return fmt.Errorf("read verdicts: %w", err)
		}
		now := s.now()
		if n == 0 && verdicts.Valid {
			// The run's own grading becomes the first entry of its
			// history, at the time it was recorded.
			at := updated
			if finished.Valid {
				at = finished.Int64
			}
			v := json.RawMessage("[]")
			if versions.Valid {
				v = json.RawMessage(versions.String)
			}
			if _, err := insertVerdictSet(ctx, tx, g.TenantID, store.SubjectRun, subject, json.RawMessage(verdicts.String), v,
				store.VerdictsFromTask, nil, min(at, now)); err != nil {
				return err
			}
		}
		set, err = insertVerdictSet(ctx, tx, g.TenantID, store.SubjectRun, subject, g.Verdicts, g.GraderVersions,
			g.Source, g.Graders, now)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE runs SET verdicts = $5, grader_versions = $6, classification = $7, score = $8,
			error = CASE WHEN classification = 'error' THEN NULL ELSE error END, updated_us = $9
			WHERE tenant_id = $1 AND experiment_id = $2 AND case_id = $3 AND repetition = $4`,
			g.TenantID, g.ExperimentID, g.CaseID, g.Repetition, string(g.Verdicts), string(g.GraderVersions),
			g.Classification, nullFloat(g.Score), now)
		return err
	})
	if err != nil {
		return store.VerdictSet{}, fmt.Errorf("save run regrade: %w", err)
	}
	return set, nil
}

// RunVerdictSets returns a run's verdict sets, oldest first.
func (s *Store) RunVerdictSets(ctx context.Context, tenantID, experimentID, caseID string, repetition int) ([]store.VerdictSet, error) {
	return s.VerdictSets(ctx, tenantID, store.SubjectRun, store.RunSubject(experimentID, caseID, repetition))
}
