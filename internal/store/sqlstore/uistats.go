package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gyrehq/gyre/internal/store"
)

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
