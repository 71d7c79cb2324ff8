package main

import (
	"context"
	"fmt"

	"github.com/gyrehq/gyre/internal/dataset/build/seed"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

// policyChanges is how many times seedPolicies promotes a policy of the
// seeded agent, alternating between its policies.
const policyChanges = 50

// seedPolicies stores three gateway policies, as POST /api/v1/policies
// does, and promotes them in turn policyChanges times for the seeded
// agent, so the policy pages and the agent's history have rows.
func seedPolicies(ctx context.Context, st store.Store, tenantID string) error {
	tn, err := st.TenantByID(ctx, tenantID)
	if err != nil {
		return err
	}
	upstreams := []gateway.Upstream{{Name: "bench-upstream", BaseURL: "http://upstream.bench/v1"}}
	names := []string{"bench-p1", "bench-p2", "bench-p3"}
	for i, name := range names {
		up, model := "bench-upstream", fmt.Sprintf("bench-model-%d", i+1)
		pol, err := gateway.NewPolicy(gateway.PolicyInput{Name: &name, Upstream: &up, Model: &model}, upstreams, tn.Name)
		if err != nil {
			return fmt.Errorf("policy %s: %w", name, err)
		}
		doc, sha, err := pol.Canonical()
		if err != nil {
			return err
		}
		if _, _, err := st.CreatePolicy(ctx, store.Policy{TenantID: tenantID, Name: name, Body: doc, SHA256: sha}); err != nil {
			return fmt.Errorf("policy %s: %w", name, err)
		}
	}
	var cur *string
	for i := range policyChanges {
		next := names[i%len(names)]
		if _, err := st.SetPromotedPolicy(ctx, promotion.Change{TenantID: tenantID, AgentID: seed.Agent, Expected: cur,
			Policy: next, SetBy: "bench"}); err != nil {
			return fmt.Errorf("promote %s: %w", next, err)
		}
		cur = &next
	}
	return nil
}
