package store

import (
	"context"
	"time"
)

// AgentCalls is what the gateway recorded for one agent over a window:
// rollout and production calls alike.
type AgentCalls struct {
	// Calls counts the calls read; Failed those not counted (SPEC §6.3).
	Calls, Failed int
	// Latencies are the finished calls' times from receipt to done,
	// shortest first.
	Latencies []time.Duration
	// Truncated reports that the window held more calls than the limit:
	// only the newest were read.
	Truncated bool
}

// AgentSeen is an agent gyre has seen in a tenant.
type AgentSeen struct {
	AgentID     string
	FirstSeenAt time.Time
}

// UIStatsStore answers the web UI's bounded summaries.
type UIStatsStore interface {
	// AgentsSeen lists the tenant's agents by id, at most limit, without
	// counting their rollouts (ListAgents does that, over every rollout).
	AgentsSeen(ctx context.Context, tenantID string, limit int) ([]AgentSeen, error)
	// BatchExclusions counts the rollouts of the tenant's batches batchIDs
	// by exclusion, as AgentSummary.Exclusions does: the output's reason,
	// or "state:<name>" for a rollout the server ended.
	BatchExclusions(ctx context.Context, tenantID string, batchIDs []string) (map[string]int, error)
	// AgentCalls reads the agent's newest gateway calls received at or
	// after since, at most limit of them, through the index on (tenant,
	// agent, receipt time).
	AgentCalls(ctx context.Context, tenantID, agentID string, since time.Time, limit int) (AgentCalls, error)
}
