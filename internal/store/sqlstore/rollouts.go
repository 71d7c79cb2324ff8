package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// rolloutCols reads a store.Rollout; rollouts are r, their task t.
const rolloutCols = `r.id, r.tenant_id, r.agent_id, r.batch_id, r.task_id, r.group_id, r.attempt, r.state,
	r.worker_id, r.worker_version, t.turn_input, r.created_us, r.claimed_us, r.lease_granted_us, r.lease_expires_us,
	r.deadline_us, r.submitted_us, r.ended_us, r.graded_us, r.output, r.exclusion_reason, r.reconciliation,
	r.reconciliation_reason, r.server_fingerprint, r.training_grade, r.not_training_grade, r.outcome, r.reward`

const rolloutFrom = ` FROM rollouts r JOIN tasks t ON t.id = r.task_id`

func scanRollout(row scanner) (store.Rollout, error) {
	var (
		r                                   store.Rollout
		created                             int64
		claimed, granted, expires, deadline sql.NullInt64
		submitted, ended, graded            sql.NullInt64
		output, fingerprint, reasons        sql.NullString
		grade                               sql.NullBool
	)
	if err := row.Scan(&r.ID, &r.TenantID, &r.AgentID, &r.BatchID, &r.TaskID, &r.GroupID, &r.Attempt, &r.State,
		&r.WorkerID, &r.WorkerVersion, &r.TurnInput, &created, &claimed, &granted, &expires,
		&deadline, &submitted, &ended, &graded, &output, &r.ExclusionReason, &r.Reconciliation,
		&r.ReconciliationReason, &fingerprint, &grade, &reasons, &r.Outcome, &r.Reward); err != nil {
		return store.Rollout{}, err
	}
	r.CreatedAt = store.FromMicros(created)
	r.ClaimedAt = timePtr(claimed)
	r.LeaseGrant = time.Duration(granted.Int64) * time.Microsecond
	r.LeaseExpiresAt = timePtr(expires)
	r.Deadline = timePtr(deadline)
	r.SubmittedAt = timePtr(submitted)
	r.EndedAt = timePtr(ended)
	r.GradedAt = timePtr(graded)
	if output.Valid {
		r.Output = json.RawMessage(output.String)
	}
	if fingerprint.Valid {
		r.ServerFingerprint = json.RawMessage(fingerprint.String)
	}
	if grade.Valid {
		r.TrainingGrade = &grade.Bool
	}
	if reasons.Valid {
		if err := json.Unmarshal([]byte(reasons.String), &r.NotTrainingGradeReasons); err != nil {
			return store.Rollout{}, fmt.Errorf("training grade reasons: %w", err)
		}
	}
	return r, nil
}

func (s *Store) rollout(ctx context.Context, q querier, tenantID, id string) (store.Rollout, error) {
	r, err := scanRollout(q.QueryRowContext(ctx, `SELECT `+rolloutCols+rolloutFrom+
		` WHERE r.tenant_id = $1 AND r.id = $2`, tenantID, id))
	if err != nil {
		return store.Rollout{}, notFound("rollout", err)
	}
	return r, nil
}

// GetRollout returns one of the tenant's rollouts.
func (s *Store) GetRollout(ctx context.Context, tenantID, rolloutID string) (store.Rollout, error) {
	r, err := s.rollout(ctx, s.reader, tenantID, rolloutID)
	if err != nil {
		return store.Rollout{}, fmt.Errorf("get rollout: %w", err)
	}
	return r, nil
}

// ListRollouts lists the tenant's rollouts, newest first.
func (s *Store) ListRollouts(ctx context.Context, tenantID string, f store.RolloutFilter, p store.Page) ([]store.Rollout, string, error) {
	tg := ""
	if f.TrainingGrade != nil {
		tg = strconv.FormatBool(*f.TrainingGrade)
	}
	cur := listCursor(tenantID, "rollouts", f.AgentID, string(f.State), f.BatchID, f.Outcome, f.Exclusion, tg)
	after, err := cur.decodeID(p.Cursor)
	if err != nil {
		return nil, "", err
	}
	n := limit(p)
	q := `SELECT ` + rolloutCols + rolloutFrom + ` WHERE r.tenant_id = $1`
	args := []any{tenantID}
	add := func(cond string, v any) {
		args = append(args, v)
		q += fmt.Sprintf(" AND "+cond, len(args))
	}
	if f.AgentID != "" {
		add("r.agent_id = $%d", f.AgentID)
	}
	if f.State != "" {
		add("r.state = $%d", string(f.State))
	}
	if f.BatchID != "" {
		add("r.batch_id = $%d", f.BatchID)
	}
	if f.Outcome != "" {
		add("r.outcome = $%d", f.Outcome)
	}
	switch ended := serverEndedIn(); f.Exclusion {
	case "":
	case store.ExclusionNone:
		q += " AND r.exclusion_reason IS NULL AND r.state NOT IN (" + ended + ")"
	case store.ExclusionAny:
		q += " AND (r.exclusion_reason IS NOT NULL OR r.state IN (" + ended + "))"
	default:
		if st, ok := strings.CutPrefix(f.Exclusion, "state:"); ok {
			add("r.state = $%d", st)
			q += " AND r.state IN (" + ended + ")"
		} else {
			add("r.exclusion_reason = $%d", f.Exclusion)
			q += " AND r.state NOT IN (" + ended + ")"
		}
	}
	if f.TrainingGrade != nil {
		add("r.training_grade = $%d", *f.TrainingGrade)
	}
	if after != "" {
		add("r.id < $%d", after)
	}
	args = append(args, n+1)
	q += fmt.Sprintf(" ORDER BY r.id DESC LIMIT $%d", len(args))
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list rollouts: %w", err)
	}
	defer rows.Close()
	var out []store.Rollout
	for rows.Next() {
		r, err := scanRollout(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list rollouts: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list rollouts: %w", err)
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		next = cur.encode(out[n-1].ID)
	}
	return out, next, nil
}

// serverEndedIn lists the states the server ends a rollout in, for SQL.
func serverEndedIn() string {
	var b strings.Builder
	for _, st := range gyre.RolloutStates {
		if st.ServerEnded() {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString("'" + string(st) + "'")
		}
	}
	return b.String()
}

// BatchRewardHistogram counts the rewards the batch's mean reward
// averages into equal-width bins over [0, 1], in SQL so that a large
// batch costs one indexed scan and no rows.
func (s *Store) BatchRewardHistogram(ctx context.Context, tenantID, batchID string, bins int) ([]int, error) {
	if bins < 1 || bins > 100 {
		return nil, fmt.Errorf("batch reward histogram: bins must be 1..100, not %d", bins)
	}
	var exists int
	if err := s.reader.QueryRowContext(ctx, `SELECT 1 FROM batches WHERE tenant_id = $1 AND id = $2`, tenantID, batchID).Scan(&exists); err != nil {
		return nil, fmt.Errorf("batch reward histogram: %w", notFound("batch", err))
	}
	// The bin is found by comparisons, not by a cast, which rounds on
	// PostgreSQL and truncates on SQLite.
	var bin strings.Builder
	bin.WriteString("CASE")
	for i := 1; i < bins; i++ {
		fmt.Fprintf(&bin, " WHEN reward < %s THEN %d", strconv.FormatFloat(float64(i)/float64(bins), 'g', -1, 64), i-1)
	}
	fmt.Fprintf(&bin, " ELSE %d END", bins-1)
	rows, err := s.reader.QueryContext(ctx, `SELECT `+bin.String()+`, COUNT(*) FROM rollouts
		WHERE batch_id = $1 AND state = 'graded' AND exclusion_reason IS NULL AND reward IS NOT NULL
		GROUP BY 1`, batchID)
	if err != nil {
		return nil, fmt.Errorf("batch reward histogram: %w", err)
	}
	out := make([]int, bins)
	err = eachRow(rows, func() error {
		var i, n int
		if err := rows.Scan(&i, &n); err != nil {
			return err
		}
		if i >= 0 && i < bins {
			out[i] += n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("batch reward histogram: %w", err)
	}
	return out, nil
}

// ListAgents lists the agents seen in the tenant with rollout counts by
// state and exclusions by reason: the output's reason, or "state:<name>"
// for rollouts the server ended, so each event counts exactly once.
func (s *Store) ListAgents(ctx context.Context, tenantID string) ([]store.AgentSummary, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT agent_id, first_seen_us FROM agents WHERE tenant_id = $1 ORDER BY agent_id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	var out []store.AgentSummary
	index := map[string]int{}
	for rows.Next() {
		var (
			a    store.AgentSummary
			seen int64
		)
		if err := rows.Scan(&a.AgentID, &seen); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list agents: %w", err)
		}
		a.FirstSeenAt = store.FromMicros(seen)
		a.Counts = map[gyre.RolloutState]int{}
		a.Exclusions = map[string]int{}
		index[a.AgentID] = len(out)
		out = append(out, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	rows, err = s.reader.QueryContext(ctx, `SELECT agent_id, state, exclusion_reason, COUNT(*) FROM rollouts
		WHERE tenant_id = $1 GROUP BY agent_id, state, exclusion_reason`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("count rollouts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			agent  string
			state  gyre.RolloutState
			reason sql.NullString
			n      int
		)
		if err := rows.Scan(&agent, &state, &reason, &n); err != nil {
			return nil, fmt.Errorf("count rollouts: %w", err)
		}
		i, ok := index[agent]
		if !ok {
			continue
		}
		out[i].Counts[state] += n
		switch {
		case state.ServerEnded():
			out[i].Exclusions["state:"+string(state)] += n
		case reason.Valid:
			out[i].Exclusions[reason.String] += n
		}
	}
	return out, rows.Err()
}

// VerdictSets returns a subject's verdict sets, oldest first.
func (s *Store) VerdictSets(ctx context.Context, tenantID, kind, subjectID string) ([]store.VerdictSet, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+verdictSetColumns+` FROM verdict_sets
		WHERE tenant_id = $1 AND subject_kind = $2 AND subject_id = $3 ORDER BY created_us, id`, tenantID, kind, subjectID)
	if err != nil {
		return nil, fmt.Errorf("verdict sets: %w", err)
	}
	defer rows.Close()
	var out []store.VerdictSet
	for rows.Next() {
		v, err := scanVerdictSet(rows)
		if err != nil {
			return nil, fmt.Errorf("verdict sets: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

const verdictSetColumns = `id, verdicts, grader_versions, source, graders, created_us`

func scanVerdictSet(r scanner) (store.VerdictSet, error) {
	var (
		v                         store.VerdictSet
		verdicts, version, source string
		graders                   sql.NullString
		created                   int64
	)
	if err := r.Scan(&v.ID, &verdicts, &version, &source, &graders, &created); err != nil {
		return v, err
	}
	v.Verdicts, v.GraderVersions, v.Source = json.RawMessage(verdicts), json.RawMessage(version), source
	v.Graders, v.CreatedAt = rawOrNil(graders), store.FromMicros(created)
	return v, nil
}

// GradingInput loads what grading a rollout reads.
func (s *Store) GradingInput(ctx context.Context, rolloutID string) (store.GradingInput, error) {
	var tenantID string
	if err := s.reader.QueryRowContext(ctx, `SELECT tenant_id FROM rollouts WHERE id = $1`, rolloutID).Scan(&tenantID); err != nil {
		return store.GradingInput{}, notFound("grading input", err)
	}
	r, err := s.rollout(ctx, s.reader, tenantID, rolloutID)
	if err != nil {
		return store.GradingInput{}, fmt.Errorf("grading input: %w", err)
	}
	in := store.GradingInput{Rollout: r}
	var graders, input string
	if err := s.reader.QueryRowContext(ctx, `SELECT graders, input FROM tasks WHERE id = $1`, r.TaskID).Scan(&graders, &input); err != nil {
		return store.GradingInput{}, notFound("grading input task", err)
	}
	in.Graders, in.Input = json.RawMessage(graders), json.RawMessage(input)
	if err := s.reader.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN counted THEN 1 ELSE 0 END), 0)
		FROM gateway_calls WHERE rollout_id = $1`, rolloutID).Scan(&in.Recorded, &in.Completions); err != nil {
		return store.GradingInput{}, fmt.Errorf("grading input calls: %w", err)
	}
	return in, nil
}

// SaveGrade stores a verdict set and the training-grade decision, and
// moves a submitted rollout to graded. A result without a reconciliation
// leaves training_grade null: the decision waits for the gateway records.
func (s *Store) SaveGrade(ctx context.Context, g store.GradeResult) error {
	reasons, err := json.Marshal(nonNil(g.Reasons))
	if err != nil {
		return fmt.Errorf("save grade: %w", err)
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		var tenantID string
		if err := tx.QueryRowContext(ctx, `SELECT tenant_id FROM rollouts WHERE id = $1`, g.RolloutID).Scan(&tenantID); err != nil {
			return notFound("rollout", err)
		}
		id, err := newID()
		if err != nil {
			return err
		}
		now := s.now()
		if _, err := tx.ExecContext(ctx, `INSERT INTO verdict_sets (id, tenant_id, subject_kind, subject_id, verdicts,
			grader_versions, created_us) VALUES ($1, $2, 'rollout', $3, $4, $5, $6)`,
			id, tenantID, g.RolloutID, string(g.Verdicts), string(g.GraderVersions), now); err != nil {
			return fmt.Errorf("insert verdicts: %w", err)
		}
		// Without a reconciliation the training-grade decision is not
		// made yet: it stays null until FinishReconciliation (SPEC §6.3).
		var grade any = g.TrainingGrade
		if g.Reconciliation == nil {
			grade = nil
		}
		var outcome any
		if g.Outcome != "" {
			outcome = g.Outcome
		}
		_, err = tx.ExecContext(ctx, `UPDATE rollouts SET graded_us = $2, reconciliation = $3, reconciliation_reason = $4,
			training_grade = $5, not_training_grade = $6, outcome = $7, reward = $8,
			state = CASE WHEN state = 'submitted' THEN 'graded' ELSE state END WHERE id = $1`,
			g.RolloutID, now, g.Reconciliation, g.ReconciliationReason, grade, string(reasons), outcome, g.Reward)
		return err
	})
	if err != nil {
		return fmt.Errorf("save grade: %w", err)
	}
	return nil
}
