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

// finishedExpr selects a batch's finished rollouts in SQL, as
// rolloutClass.finished does in Go.
const finishedExpr = `(replaced_by IS NULL AND ((state = 'graded' AND training_grade IS NOT NULL)
	OR state IN ('abandoned', 'deadline_exceeded')))`

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
	// Since is left out of the cursor's scope: a window such as "the
	// last 7 days" moves between one page and the next, and a position
	// (a batch id) means the same in any window.
	cur := listCursor(tenantID, "batches", f.AgentID, string(f.State))
	after, err := cur.decodeID(p.Cursor)
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
	if !f.Since.IsZero() {
		args = append(args, store.Micros(f.Since))
		inner += fmt.Sprintf(" AND b.created_us >= $%d", len(args))
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
		next = cur.encode(ids[n-1])
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
		s.batchClasses, s.batchGroups, s.batchReasons,
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

// rolloutClass is one class of a batch's rollouts, as batchClasses groups
// them: every fact the results read, and how many rollouts share them.
type rolloutClass struct {
	state    gyre.RolloutState
	excluded bool   // the output carries an exclusion
	outcome  string // passed, failed, unscored, or "" when not graded
	replaced bool   // a retry or a release's re-queue replaced it
	grade    int    // training grade: 1 yes, 0 no, -1 undecided
	n        int
	// rewardSum and rewardN total the rewards of the class's rollouts
	// that have one.
	rewardSum float64
	rewardN   int
}

// finished reports whether the class's rollouts are finished rollouts of
// their batch: not replaced, and ended graded with a decided training
// grade, abandoned or deadline_exceeded (store.BatchSummary.Finished).
func (c rolloutClass) finished() bool {
	if c.replaced {
		return false
	}
	switch c.state {
	case gyre.StateGraded:
		return c.grade >= 0
	case gyre.StateAbandoned, gyre.StateDeadlineExceeded:
		return true
	}
	return false
}

// add counts the class into sum.
func (c rolloutClass) add(sum *store.BatchSummary) {
	sum.Counts[c.state] += c.n
	if c.state == gyre.StateGraded {
		switch {
		case c.excluded:
			sum.Excluded += c.n
		case c.outcome == "passed":
			sum.Passed += c.n
		case c.outcome == "failed":
			sum.Failed += c.n
		case c.outcome == "unscored":
			sum.Unscored += c.n
		}
		if !c.excluded && c.rewardN > 0 {
			mean := 0.0
			if sum.MeanReward != nil {
				mean = *sum.MeanReward * float64(sum.RewardN)
			}
			sum.RewardN += c.rewardN
			mean = (mean + c.rewardSum) / float64(sum.RewardN)
			sum.MeanReward = &mean
		}
	}
	if !c.finished() {
		return
	}
	sum.Finished += c.n
	switch {
	case c.grade == 1:
		sum.TrainingGrade += c.n
	case c.state != gyre.StateGraded:
		sum.NotTrainingGrade["state:"+string(c.state)] += c.n
	}
}

// batchClasses groups the batches' rollouts by every fact the results
// read, one scan, and counts each class into its summary.
func (s *Store) batchClasses(ctx context.Context, in string, args []any, sums map[string]*store.BatchSummary) error {
	rows, err := s.reader.QueryContext(ctx, `SELECT batch_id, state, exclusion_reason IS NOT NULL, COALESCE(outcome, ''),
		replaced_by IS NOT NULL, CASE WHEN training_grade IS NULL THEN -1 WHEN training_grade = TRUE THEN 1 ELSE 0 END,
		COUNT(*), COALESCE(SUM(reward), 0), COUNT(reward)
		FROM rollouts WHERE batch_id IN (`+in+`) GROUP BY 1, 2, 3, 4, 5, 6`, args...)
	if err != nil {
		return fmt.Errorf("batch results: %w", err)
	}
	return eachRow(rows, func() error {
		var (
			id string
			c  rolloutClass
		)
		if err := rows.Scan(&id, &c.state, &c.excluded, &c.outcome, &c.replaced, &c.grade, &c.n, &c.rewardSum, &c.rewardN); err != nil {
			return fmt.Errorf("batch results: %w", err)
		}
		c.add(sums[id])
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

// batchReasons counts the reasons finished graded rollouts list for not
// being training grade (rolloutClass.add counts the server-ended ones).
func (s *Store) batchReasons(ctx context.Context, in string, args []any, sums map[string]*store.BatchSummary) error {
	rows, err := s.reader.QueryContext(ctx, `SELECT batch_id, j.value, COUNT(*)
		FROM rollouts, `+fmt.Sprintf(s.d.JSONArrayText, "not_training_grade")+`
		WHERE batch_id IN (`+in+`) AND state = 'graded' AND `+finishedExpr+` AND training_grade = FALSE
		GROUP BY batch_id, j.value`, args...)
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
