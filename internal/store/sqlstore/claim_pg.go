package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// pgClaimSQL leases queued rollouts in one statement, so a claim is one
// round trip: pick the agent's oldest queued rollouts (one more than asked,
// to learn whether work remains) under FOR UPDATE SKIP LOCKED, number them
// in claim order, lease the first $10 with their own secrets ($7–$9 are
// arrays indexed by that number) at the database's clock, and return what
// a RolloutRequest needs. Concurrent claimers on any replica skip each
// other's rows, and the UPDATE re-checks state = 'queued'.
const pgClaimSQL = `WITH now AS (
	SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT) AS us
), picked AS (
	SELECT r.id, r.batch_id, r.task_id, r.group_id, r.attempt, r.created_us, r.queue_seq, r.queue_pos
	FROM rollouts r
	WHERE r.tenant_id = $1 AND r.agent_id = $2 AND r.state = 'queued'
	ORDER BY r.queue_seq, r.batch_id, r.queue_pos
	LIMIT $3 FOR UPDATE SKIP LOCKED
), numbered AS (
	SELECT p.*, row_number() OVER (ORDER BY p.queue_seq, p.batch_id, p.queue_pos) AS n FROM picked p
), leased AS (
	UPDATE rollouts r SET state = 'leased', worker_id = $4, worker_version = $5, claimed_us = now.us,
		lease_granted_us = $6, lease_expires_us = now.us + $6,
		deadline_us = now.us + CAST(b.deadline_s * 1000000 AS BIGINT),
		lease_token_hash = ($7::bytea[])[n.n], gw_token_hash = ($8::bytea[])[n.n], gw_key_hash = ($9::bytea[])[n.n]
	FROM numbered n, now, batches b
	WHERE r.id = n.id AND n.n <= $10 AND b.id = r.batch_id AND r.state = 'queued'
	RETURNING r.id, r.deadline_us
)
SELECT n.id, n.batch_id, n.task_id, n.group_id, n.attempt, n.created_us, t.turn_input, l.deadline_us, now.us
FROM numbered n CROSS JOIN now JOIN tasks t ON t.id = n.task_id LEFT JOIN leased l ON l.id = n.id
ORDER BY n.n`

// claimOneStatement is Claim without an Idempotency-Key on PostgreSQL.
func (s *Store) claimOneStatement(ctx context.Context, c store.ClaimRequest) (store.ClaimResult, error) {
	leaseTok, gwTok, gwKey := make([][]byte, c.Max), make([][]byte, c.Max), make([][]byte, c.Max)
	for i := range c.Max {
		sec := c.Secrets[i]
		leaseTok[i], gwTok[i], gwKey[i] = sec.LeaseToken[:], sec.GatewayToken[:], sec.GatewayKey[:]
	}
	grant := c.Lease.Microseconds()
	rows, err := s.writer.QueryContext(ctx, pgClaimSQL, c.TenantID, c.AgentID, c.Max+1,
		nullString(c.WorkerID), nullString(c.WorkerVersion), grant, leaseTok, gwTok, gwKey, c.Max)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	res := store.ClaimResult{Now: s.clock.Now()}
	for rows.Next() {
		var (
			r        = store.Rollout{TenantID: c.TenantID, AgentID: c.AgentID, State: gyre.StateLeased, LeaseGrant: c.Lease}
			created  int64
			deadline sql.NullInt64
			now      int64
		)
		if err := rows.Scan(&r.ID, &r.BatchID, &r.TaskID, &r.GroupID, &r.Attempt, &created, &r.TurnInput, &deadline, &now); err != nil {
			return store.ClaimResult{}, fmt.Errorf("claim: %w", err)
		}
		res.Now = store.FromMicros(now)
		if !deadline.Valid {
			res.MoreQueued = true // the extra row: picked, not leased
			continue
		}
		r.CreatedAt = store.FromMicros(created)
		claimed, expires, dl := store.FromMicros(now), store.FromMicros(now+grant), store.FromMicros(deadline.Int64)
		r.ClaimedAt, r.LeaseExpiresAt, r.Deadline = &claimed, &expires, &dl
		if c.WorkerID != "" {
			r.WorkerID = &c.WorkerID
		}
		if c.WorkerVersion != "" {
			r.WorkerVersion = &c.WorkerVersion
		}
		res.Rollouts = append(res.Rollouts, store.Claimed{Rollout: r, Secrets: len(res.Rollouts)})
	}
	if err := rows.Err(); err != nil {
		return store.ClaimResult{}, fmt.Errorf("claim: %w", err)
	}
	return res, nil
}
