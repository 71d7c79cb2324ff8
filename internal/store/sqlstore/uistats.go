package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// AgentsSeen lists the tenant's agents by id from the agents table.
func (s *Store) AgentsSeen(ctx context.Context, tenantID string, limit int) ([]store.AgentSeen, error) {
	if limit < 1 {
		return nil, fmt.Errorf("agents seen: limit must be positive, not %d", limit)
	}
	rows, err := s.reader.QueryContext(ctx,
		`SELECT agent_id, first_seen_us FROM agents WHERE tenant_id = $1 ORDER BY agent_id LIMIT $2`, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("agents seen: %w", err)
	}
	out := []store.AgentSeen{}
	err = eachRow(rows, func() error {
		var (
			a    store.AgentSeen
			seen int64
		)
		if err := rows.Scan(&a.AgentID, &seen); err != nil {
			return err
		}
		a.FirstSeenAt = store.FromMicros(seen)
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("agents seen: %w", err)
	}
	return out, nil
}

// BatchExclusions counts the batches' excluded rollouts by reason, over
// the (batch_id, state) index for server-ended states.
func (s *Store) BatchExclusions(ctx context.Context, tenantID string, batchIDs []string) (map[string]int, error) {
	out := map[string]int{}
	if len(batchIDs) == 0 {
		return out, nil
	}
	in, args := inList(2, batchIDs)
	// The tenant is checked on the batches, not on the rollouts: with
	// tenant_id = $1 on rollouts, SQLite's planner walked the tenant's
	// every rollout through rollouts_tenant instead of the listed
	// batches' through their index (a batch's rollouts are its tenant's).
	rows, err := s.reader.QueryContext(ctx, `SELECT state, exclusion_reason, COUNT(*) FROM rollouts
		WHERE batch_id IN (SELECT id FROM batches WHERE tenant_id = $1 AND id IN (`+in+`))
		AND (exclusion_reason IS NOT NULL OR state IN (`+serverEndedIn()+`))
		GROUP BY state, exclusion_reason`, append([]any{tenantID}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("batch exclusions: %w", err)
	}
	err = eachRow(rows, func() error {
		var (
			state  gyre.RolloutState
			reason sql.NullString
			n      int
		)
		if err := rows.Scan(&state, &reason, &n); err != nil {
			return err
		}
		switch {
		case state.ServerEnded():
			out["state:"+string(state)] += n
		case reason.Valid:
			out[reason.String] += n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("batch exclusions: %w", err)
	}
	return out, nil
}

// AgentCalls reads the agent's newest gateway calls since a time, at
// most limit, newest first down the (tenant_id, agent_id, received_us)
// index, so the cost is bounded by limit whatever the table holds.
func (s *Store) AgentCalls(ctx context.Context, tenantID, agentID string, since time.Time, limit int) (store.AgentCalls, error) {
	if limit < 1 {
		return store.AgentCalls{}, fmt.Errorf("agent calls: limit must be positive, not %d", limit)
	}
	rows, err := s.reader.QueryContext(ctx,
		`SELECT counted, done_us - received_us FROM gateway_calls
		 WHERE tenant_id = $1 AND agent_id = $2 AND received_us >= $3
		 ORDER BY received_us DESC LIMIT $4`,
		tenantID, agentID, store.Micros(since), limit+1)
	if err != nil {
		return store.AgentCalls{}, fmt.Errorf("agent calls: %w", err)
	}
	var out store.AgentCalls
	err = eachRow(rows, func() error {
		var (
			counted bool
			us      *int64
		)
		if err := rows.Scan(&counted, &us); err != nil {
			return err
		}
		if out.Calls == limit {
			out.Truncated = true
			return nil
		}
		out.Calls++
		if !counted {
			out.Failed++
		}
		if us != nil {
			out.Latencies = append(out.Latencies, time.Duration(*us)*time.Microsecond)
		}
		return nil
	})
	if err != nil {
		return store.AgentCalls{}, fmt.Errorf("agent calls: %w", err)
	}
	slices.Sort(out.Latencies)
	return out, nil
}
