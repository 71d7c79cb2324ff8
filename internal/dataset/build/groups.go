package build

import (
	"context"

	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/store"
)

// GroupRollouts reads one batch group's current rollouts live, in
// rollout id order, with their traffic rebuilt as a dataset build reads
// it, for dataset.GroupLine (GET /batches/{id}/groups, SPEC §9). blobs
// may be nil: training-grade rollouts then count as bodies not captured.
func GroupRollouts(ctx context.Context, st store.Store, blobs gateway.BlobReader, tenantID, batchID, groupID string) ([]*dataset.Rollout, error) {
	members, err := st.GroupRollouts(ctx, tenantID, batchID, groupID)
	if err != nil {
		return nil, err
	}
	src := newSource(ctx, st, blobs, store.Dataset{TenantID: tenantID})
	out := make([]*dataset.Rollout, 0, len(members))
	for _, m := range members {
		r, err := src.rollout(m)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
