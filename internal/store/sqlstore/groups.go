package sqlstore

import (
	"context"
	"fmt"

	"github.com/gyrehq/gyre/internal/store"
)

// CompletedGroups pages the batch's completed groups by completion seq;
// the migration's trigger stamps them.
func (s *Store) CompletedGroups(ctx context.Context, tenantID, batchID string, after int64, n int) ([]store.CompletedGroup, error) {
	var one int
	if err := s.reader.QueryRowContext(ctx, `SELECT 1 FROM batches WHERE id = $1 AND tenant_id = $2`,
		batchID, tenantID).Scan(&one); err != nil {
		return nil, notFound("batch", err)
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT seq, group_id FROM batch_group_completions
		WHERE batch_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, batchID, after, n)
	if err != nil {
		return nil, fmt.Errorf("completed groups: %w", err)
	}
	out := []store.CompletedGroup{}
	err = eachRow(rows, func() error {
		var g store.CompletedGroup
		if err := rows.Scan(&g.Seq, &g.GroupID); err != nil {
			return fmt.Errorf("completed groups: %w", err)
		}
		out = append(out, g)
		return nil
	})
	return out, err
}

// GroupRollouts reads a group's current rollouts live, with the same
// columns a dataset freezes.
func (s *Store) GroupRollouts(ctx context.Context, tenantID, batchID, groupID string) ([]store.DatasetMember, error) {
	latest := func(col string) string {
		return `(SELECT v.` + col + ` FROM verdict_sets v WHERE v.subject_kind = 'rollout' AND v.subject_id = r.id
			ORDER BY v.created_us DESC, v.id DESC LIMIT 1)`
	}
	return s.members(ctx, `SELECT r.id, r.batch_id, r.task_id, r.group_id, `+latest("verdicts")+`, `+latest("grader_versions")+`,
		r.training_grade, r.not_training_grade, r.reward
		FROM rollouts r WHERE r.tenant_id = $1 AND r.batch_id = $2 AND r.group_id = $3 AND r.replaced_by IS NULL
		ORDER BY r.id`, tenantID, batchID, groupID)
}
