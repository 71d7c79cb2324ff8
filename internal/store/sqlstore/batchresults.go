package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// Batch results (SPEC §4.8) are aggregated by the database, a few grouped
// queries per page of batches, so a summary never loads a batch's
// rollouts into memory.

// batchStateExpr is a batch's state (gyre.BatchState) in SQL, for the
// batch aliased b: cancelled once an admin cancelled it, running while a
// rollout is queued, leased or submitted (awaiting grading), else
// finished.
const batchStateExpr = `CASE WHEN b.cancelled_us IS NOT NULL THEN 'cancelled'
	WHEN EXISTS (SELECT 1 FROM rollouts o WHERE o.batch_id = b.id AND o.state IN ('queued', 'leased', 'submitted')) THEN 'running'
	ELSE 'finished' END`

// finishedExpr selects a batch's finished rollouts: not replaced by a retry
// or a release's re-queue, and ended graded with a decided training grade,
// abandoned or deadline_exceeded. Released and cancelled rollouts, and
// those still waiting for grading or reconciliation, are not finished.
const finishedExpr = `(replaced_by IS NULL AND ((state = 'graded' AND training_grade IS NOT NULL)
	OR state IN ('abandoned', 'deadline_exceeded')))`

// scoredExpr selects graded rollouts without an exclusion: the pass-rate
// and reward population.
const scoredExpr = `(state = 'graded' AND exclusion_reason IS NULL)`

// BatchSummary returns a batch with its progress and results.
func (s *Store) BatchSummary(ctx context.Context, tenantID, batchID string) (store.BatchSummary, error) {
	sums, err := s.batchSummaries(ctx, tenantID, []string{batchID})
	if err != nil {
		return store.BatchSummary{}, fmt.Errorf("batch summary: %w", err)
	}
	if len(sums) == 0 {
		return store.BatchSummary{}, fmt.Errorf("batch summary: %w", store.ErrNotFound)
	}
	return sums[0], nil
}

// ListBatches lists the tenant's batch summaries, newest first (batch ids
// are UUIDv7, so id order is creation order).
func (s *Store) ListBatches(ctx context.Context, tenantID string, f store.BatchFilter, p store.Page) ([]store.BatchSummary, string, error) {
	after, err := decodeCursor("batches", p.Cursor)
	if err != nil {
		return nil, "", err
	}
	if f.State != "" && !f.State.Valid() {
		return nil, "", fmt.Errorf("list batches: state %q is not a batch state", f.State)
	}
	n := limit(p)
	inner := `SELECT b.id, ` + batchStateExpr + ` AS state FROM batches b WHERE b.tenant_id = $1`
	args := []any{tenantID}
	if f.AgentID != "" {
		args = append(args, f.AgentID)
		inner += fmt.Sprintf(" AND b.agent_id = $%d", len(args))
	}
	if after != "" {
		args = append(args, after)
		inner += fmt.Sprintf(" AND b.id < $%d", len(args))
	}
	q := `SELECT x.id FROM (` + inner + `) x`
	if f.State != "" {
		args = append(args, string(f.State))
		q += fmt.Sprintf(" WHERE x.state = $%d", len(args))
	}
	args = append(args, n+1)
	q += fmt.Sprintf(" ORDER BY x.id DESC LIMIT $%d", len(args))
	ids, err := queryStrings(ctx, s.reader, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list batches: %w", err)
	}
	next := ""
	if len(ids) > n {
		ids = ids[:n]
		next = encodeCursor("batches", ids[n-1])
	}
	sums, err := s.batchSummaries(ctx, tenantID, ids)
	if err != nil {
		return nil, "", fmt.Errorf("list batches: %w", err)
	}
	return sums, next, nil
}

// batchSummaries summarises the tenant's batches with the given ids, in
// the order of ids; ids that are not the tenant's batches are left out.
func (s *Store) batchSummaries(ctx context.Context, tenantID string, ids []string) ([]store.BatchSummary, error) {
	if len(ids) == 0 {
		return []store.BatchSummary{}, nil
	}
	in, args := inList(2, ids)
	rows, err := s.reader.QueryContext(ctx, `SELECT `+batchCols+`, `+batchStateExpr+` FROM batches b
		WHERE b.tenant_id = $1 AND b.id IN (`+in+`)`, append([]any{tenantID}, args...)...)
	if err != nil {
		return nil, err
	}
	byID := map[string]*store.BatchSummary{}
	err = eachRow(rows, func() error {
		var state string
		b, err := scanBatch(scanFunc(func(dest ...any) error { return rows.Scan(append(dest, &state)...) }))
		if err != nil {
			return err
		}
		byID[b.ID] = &store.BatchSummary{Batch: b, State: gyre.BatchState(state),
			Counts: map[gyre.RolloutState]int{}, NotTrainingGrade: map[string]int{}}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("batches: %w", err)
	}
	owned := make([]string, 0, len(byID))
	for _, id := range ids {
		if byID[id] != nil {
			owned = append(owned, id)
		}
	}
	if len(owned) == 0 {
		return []store.BatchSummary{}, nil
	}
	in, args = inList(1, owned)
	for _, agg := range []func(context.Context, string, []any, map[string]*store.BatchSummary) error{
		s.batchCounts, s.batchGroups, s.batchResults, s.batchReasons,
	} {
		if err := agg(ctx, in, args, byID); err != nil {
			return nil, err
		}
	}
	out := make([]store.BatchSummary, 0, len(owned))
	for _, id := range owned {
		out = append(out, *byID[id])
	}
	return out, nil
}

// batchCounts counts rollouts by state.
func (s *Store) batchCounts(ctx context.Context, in string, args []any, sums map[string]*store.BatchSummary) error {
	rows, err := s.reader.QueryContext(ctx, `SELECT batch_id, state, COUNT(*) FROM rollouts
		WHERE batch_id IN (`+in+`) GROUP BY batch_id, state`, args...)
	if err != nil {
		return fmt.Errorf("batch counts: %w", err)
	}
	return eachRow(rows, func() error {
		var (
			id    string
			state gyre.RolloutState
			n     int
		)
		if err := rows.Scan(&id, &state, &n); err != nil {
			return fmt.Errorf("batch counts: %w", err)
		}
		sums[id].Counts[state] = n
		return nil
	})
}

// batchGroups counts groups: complete when every rollout reached a final
// state (graded or ended by the server) and none was cancelled, cancelled
// when every rollout reached a final state and one was cancelled.
func (s *Store) batchGroups(ctx context.Context, in string, args []any, sums map[string]*store.BatchSummary) error {
	rows, err := s.reader.QueryContext(ctx, `SELECT batch_id, COUNT(*),
		SUM(CASE WHEN open_n = 0 AND cancelled_n = 0 THEN 1 ELSE 0 END),
		SUM(CASE WHEN open_n = 0 AND cancelled_n > 0 THEN 1 ELSE 0 END)
		FROM (SELECT batch_id, group_id,
			SUM(CASE WHEN state IN ('queued', 'leased', 'submitted') THEN 1 ELSE 0 END) AS open_n,
			SUM(CASE WHEN state = 'cancelled' THEN 1 ELSE 0 END) AS cancelled_n
			FROM rollouts WHERE batch_id IN (`+in+`) GROUP BY batch_id, group_id) g
		GROUP BY batch_id`, args...)
	if err != nil {
		return fmt.Errorf("batch groups: %w", err)
	}
	return eachRow(rows, func() error {
		var id string
		var groups, complete, cancelled int
		if err := rows.Scan(&id, &groups, &complete, &cancelled); err != nil {
			return fmt.Errorf("batch groups: %w", err)
		}
		sum := sums[id]
		sum.Groups, sum.GroupsComplete, sum.GroupsCancelled = groups, complete, cancelled
		return nil
	})
}

// batchResults counts outcomes, averages rewards and counts finished and
// training-grade rollouts.
func (s *Store) batchResults(ctx context.Context, in string, args []any, sums map[string]*store.BatchSummary) error {
	rows, err := s.reader.QueryContext(ctx, `SELECT batch_id,
		SUM(CASE WHEN `+scoredExpr+` AND outcome = 'passed' THEN 1 ELSE 0 END),
		SUM(CASE WHEN `+scoredExpr+` AND outcome = 'failed' THEN 1 ELSE 0 END),
		SUM(CASE WHEN `+scoredExpr+` AND outcome = 'unscored' THEN 1 ELSE 0 END),
		SUM(CASE WHEN state = 'graded' AND exclusion_reason IS NOT NULL THEN 1 ELSE 0 END),
		SUM(CASE WHEN `+scoredExpr+` THEN reward END),
		COUNT(CASE WHEN `+scoredExpr+` THEN reward END),
		SUM(CASE WHEN `+finishedExpr+` THEN 1 ELSE 0 END),
		SUM(CASE WHEN `+finishedExpr+` AND training_grade = TRUE THEN 1 ELSE 0 END)
		FROM rollouts WHERE batch_id IN (`+in+`) GROUP BY batch_id`, args...)
	if err != nil {
		return fmt.Errorf("batch results: %w", err)
	}
	return eachRow(rows, func() error {
		var (
			id        string
			rewardSum sql.NullFloat64
			r         store.BatchSummary
		)
		if err := rows.Scan(&id, &r.Passed, &r.Failed, &r.Unscored, &r.Excluded, &rewardSum, &r.RewardN,
			&r.Finished, &r.TrainingGrade); err != nil {
			return fmt.Errorf("batch results: %w", err)
		}
		sum := sums[id]
		sum.Passed, sum.Failed, sum.Unscored, sum.Excluded = r.Passed, r.Failed, r.Unscored, r.Excluded
		sum.RewardN, sum.Finished, sum.TrainingGrade = r.RewardN, r.Finished, r.TrainingGrade
		if rewardSum.Valid && r.RewardN > 0 {
			mean := rewardSum.Float64 / float64(r.RewardN)
			sum.MeanReward = &mean
		}
		return nil
	})
}

// batchReasons counts the reasons finished rollouts are not training
// grade: each reason a graded rollout lists, and "state:<name>" for a
// rollout the server ended.
func (s *Store) batchReasons(ctx context.Context, in string, args []any, sums map[string]*store.BatchSummary) error {
	rows, err := s.reader.QueryContext(ctx, `SELECT batch_id, j.value, COUNT(*)
		FROM rollouts, `+fmt.Sprintf(s.d.JSONArrayText, "not_training_grade")+`
		WHERE batch_id IN (`+in+`) AND state = 'graded' AND `+finishedExpr+` AND training_grade = FALSE
		GROUP BY batch_id, j.value
		UNION ALL
		SELECT batch_id, 'state:' || state, COUNT(*) FROM rollouts
		WHERE batch_id IN (`+in+`) AND state <> 'graded' AND `+finishedExpr+`
		GROUP BY batch_id, state`, args...)
	if err != nil {
		return fmt.Errorf("batch reasons: %w", err)
	}
	return eachRow(rows, func() error {
		var (
			id, reason string
			n          int
		)
		if err := rows.Scan(&id, &reason, &n); err != nil {
			return fmt.Errorf("batch reasons: %w", err)
		}
		sums[id].NotTrainingGrade[reason] += n
		return nil
	})
}

// inList returns "$first, $first+1, …" for vals and vals as arguments.
func inList(first int, vals []string) (string, []any) {
	ph := make([]string, len(vals))
	args := make([]any, len(vals))
	for i, v := range vals {
		ph[i] = fmt.Sprintf("$%d", first+i)
		args[i] = v
	}
	return strings.Join(ph, ", "), args
}

// scanFunc adapts a function to scanBatch's row.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

// eachRow calls f for every row, then closes rows.
func eachRow(rows *sql.Rows, f func() error) error {
	defer rows.Close()
	for rows.Next() {
		if err := f(); err != nil {
			return err
		}
	}
	return rows.Err()
}

// queryStrings runs a query of one text column.
func queryStrings(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var out []string
	err = eachRow(rows, func() error {
		var v string
		if err := rows.Scan(&v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}
