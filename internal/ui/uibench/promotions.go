package main

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset/build/seed"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/promotion/runner"
	"github.com/gyrehq/gyre/internal/store"
)

// seedPromotion runs one promotion of the seeded agent to its decision,
// as POST /api/v1/promotions and the promotion job do: bench-p3 against
// bench-p1 over the tasks of the newest seeded batch, two repetitions a
// task, both sides' rollouts finished by the seeder. It returns the
// promotion's id.
func seedPromotion(ctx context.Context, st store.Store, blobs *blobstore.Store, tenantID string) (string, error) {
	newest, _, err := st.ListBatches(ctx, tenantID, store.BatchFilter{AgentID: seed.Agent}, store.Page{Limit: 1})
	if err != nil || len(newest) == 0 {
		return "", fmt.Errorf("newest batch: %v", err)
	}
	cur, err := st.AgentPolicy(ctx, tenantID, seed.Agent)
	if err != nil {
		return "", err
	}
	p, err := st.CreatePromotion(ctx, store.NewPromotion{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tenantID,
		AgentID: seed.Agent, Candidate: "bench-p3", Baseline: "bench-p1", ExpectedPolicy: cur,
		TaskIDs: newest[0].TaskIDs, Repetitions: 2, MinDelta: 0.05, MaxExcludedRate: 0.2, DeadlineS: 3600, Seed: 7,
		CreatedBy: "bench", BatchDeadlineS: 3600, MaxAttempts: 1, RetryOn: gyre.DefaultRetryOn})
	if err != nil {
		return "", fmt.Errorf("create promotion: %w", err)
	}
	want := 2 * 2 * len(newest[0].TaskIDs)
	if n, err := seed.Queued(ctx, st, blobs, tenantID, want); err != nil || n != want {
		return "", fmt.Errorf("finish the promotion's rollouts: %d of %d: %v", n, want, err)
	}
	if _, err := runner.New(runner.Config{}, runner.Deps{Store: st}).Look(ctx, p.ID); err != nil {
		return "", fmt.Errorf("decide promotion: %w", err)
	}
	if p, err = st.GetPromotion(ctx, tenantID, p.ID); err != nil {
		return "", err
	}
	if p.State == promotion.StateRunning {
		return "", fmt.Errorf("promotion %s is still running after every rollout ended", p.ID)
	}
	return p.ID, nil
}

// keptPromotion finds the promotion seedPromotion made in a kept store,
// and makes it when the store was seeded before promotions were.
func keptPromotion(ctx context.Context, st store.Store, blobs *blobstore.Store, tenantID string) (string, error) {
	ps, _, err := st.ListPromotions(ctx, tenantID, store.PromotionFilter{}, store.Page{Limit: 1})
	if err != nil {
		return "", err
	}
	if len(ps) > 0 {
		return ps[0].ID, nil
	}
	return seedPromotion(ctx, st, blobs, tenantID)
}
