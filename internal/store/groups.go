package store

import "context"

// CompletedGroup is one batch group in completion order: Seq is assigned,
// increasing, by the transaction that decides the group's last current
// rollout (graded with its training grade decided, or ended by the
// server); a group with a cancelled rollout never completes.
type CompletedGroup struct {
	Seq     int64
	GroupID string
}

// GroupStore follows a running batch group by group (SPEC §9,
// GET /batches/{id}/groups?complete=true).
type GroupStore interface {
	// CompletedGroups returns up to n of the batch's completed groups
	// whose Seq is greater than after, in Seq order. ErrNotFound when the
	// batch is not the tenant's.
	CompletedGroups(ctx context.Context, tenantID, batchID string, after int64, n int) ([]CompletedGroup, error)
	// GroupRollouts returns the current (not replaced) rollouts of one
	// batch group as they are now, in rollout id order, each with its
	// latest verdict set, training grade and reward.
	GroupRollouts(ctx context.Context, tenantID, batchID, groupID string) ([]DatasetMember, error)
}
