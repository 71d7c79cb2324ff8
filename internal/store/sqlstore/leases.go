package sqlstore

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// Claim leases up to c.Max queued rollouts of one agent. On PostgreSQL the
// candidate rows are locked with SKIP LOCKED, so concurrent claimers on any
// replica take disjoint rollouts; on SQLite the single writer serialises
// claims. Either way the UPDATE re-checks state = 'queued'. A claim is two
// statements plus one UPDATE per rollout: the pick reads everything the
// answer needs, and one extra row tells whether work remains.
func (s *Store) Claim(ctx context.Context, c store.ClaimRequest) (store.ClaimResult, error) {
	if c.Max < 1 || len(c.Secrets) < c.Max || c.Lease <= 0 {
		return store.ClaimResult{}, errors.New("claim: need max ≥ 1, a positive lease and one secret set per rollout")
	}
	if err := refuseNUL("/worker_id", c.WorkerID, "/worker_version", c.WorkerVersion, "Idempotency-Key", c.IdempotencyKey); err != nil {
		return store.ClaimResult{}, fmt.Errorf("claim: %w", err)
	}
	if s.d.OneStatementClaim && s.dbClock && c.IdempotencyKey == "" && c.Max <= maxCombinedRows {
		return s.claimOneStatement(ctx, c)
	}
	var res store.ClaimResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		res = store.ClaimResult{}
		if c.IdempotencyKey != "" {
			// Claims sharing a key run one at a time, so that exactly one
			// leases and the others read what it remembered. Without
			// the lock, concurrent claims on PostgreSQL each found no
			// answer yet, each leased its own rollouts (SKIP LOCKED),
			// and all but the last one's were orphaned.
			if err := s.lockTx(ctx, tx, "claim-key\x00"+c.TenantID+"\x00"+c.AgentID+"\x00"+c.IdempotencyKey); err != nil {
				return err
			}
			done, err := s.reclaim(ctx, tx, c, &res)
			if err != nil || done {
				return err
			}
		}
		if err := s.lease(ctx, tx, c, &res); err != nil {
			return err
		}
		if c.IdempotencyKey == "" {
			return nil
		}
		ids := make([]string, len(res.Rollouts))
		for i, r := range res.Rollouts {
			ids[i] = r.Rollout.ID
		}
		return s.remember(ctx, tx, c.TenantID, scopeClaim+c.AgentID, c.IdempotencyKey, ids, s.now())
	})
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("claim: %w", err)
	}
	return res, nil
}

// pickSQL picks queued rollouts of one agent in claim order with what a
// RolloutRequest needs; its last column is the lease clock, the database's
// on PostgreSQL (SPEC §4.5) and the bound $4 otherwise.
func (s *Store) pickSQL() string {
	now := "CAST($4 AS BIGINT)"
	if s.dbClock {
		now = s.d.NowExpr
	}
	return `SELECT r.id, r.batch_id, r.task_id, r.group_id, r.attempt, r.created_us, t.turn_input, b.deadline_s, ` + now + `
		FROM rollouts r JOIN batches b ON b.id = r.batch_id JOIN tasks t ON t.id = r.task_id
		WHERE r.tenant_id = $1 AND r.agent_id = $2 AND r.state = 'queued'
		ORDER BY r.queue_seq, r.batch_id, r.queue_pos LIMIT $3` + s.d.SkipLocked
}

// lease picks and leases queued rollouts into res.
func (s *Store) lease(ctx context.Context, tx *sql.Tx, c store.ClaimRequest, res *store.ClaimResult) error {
	args := []any{c.TenantID, c.AgentID, c.Max + 1}
	if !s.dbClock {
		args = append(args, s.now())
	}
	rows, err := tx.QueryContext(ctx, s.pickSQL(), args...)
	if err != nil {
		return fmt.Errorf("pick rollouts: %w", err)
	}
	type pick struct {
		r         store.Rollout
		deadlineS float64
		created   int64
	}
	var (
		picks []pick
		now   int64
	)
	for rows.Next() {
		p := pick{r: store.Rollout{TenantID: c.TenantID, AgentID: c.AgentID, State: gyre.StateLeased}}
		if err := rows.Scan(&p.r.ID, &p.r.BatchID, &p.r.TaskID, &p.r.GroupID, &p.r.Attempt, &p.created,
			&p.r.TurnInput, &p.deadlineS, &now); err != nil {
			rows.Close()
			return fmt.Errorf("pick rollouts: %w", err)
		}
		picks = append(picks, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pick rollouts: %w", err)
	}
	if len(picks) > c.Max {
		picks, res.MoreQueued = picks[:c.Max], true
	}
	if len(picks) == 0 {
		res.Now = s.clock.Now()
		return nil
	}
	res.Now = store.FromMicros(now)
	grant := c.Lease.Microseconds()
	for i, p := range picks {
		sec := c.Secrets[i]
		deadline := now + int64(p.deadlineS*1e6)
		res2, err := tx.ExecContext(ctx, `UPDATE rollouts SET state = 'leased', worker_id = $2, worker_version = $3,
			claimed_us = $4, lease_granted_us = $5, lease_expires_us = $6, deadline_us = $7,
			lease_token_hash = $8, gw_token_hash = $9, gw_key_hash = $10
			WHERE id = $1 AND state = 'queued'`,
			p.r.ID, nullString(c.WorkerID), nullString(c.WorkerVersion), now, grant,
			now+grant, deadline, sec.LeaseToken[:], sec.GatewayToken[:], sec.GatewayKey[:])
		if err != nil {
			return fmt.Errorf("lease rollout: %w", err)
		}
		if n, err := res2.RowsAffected(); err != nil {
			return fmt.Errorf("lease rollout: %w", err)
		} else if n != 1 {
			return fmt.Errorf("lease rollout %s: it left the queue under a lock", p.r.ID)
		}
		r := p.r
		r.CreatedAt = store.FromMicros(p.created)
		claimed, expires, dl := store.FromMicros(now), store.FromMicros(now+grant), store.FromMicros(deadline)
		r.ClaimedAt, r.LeaseExpiresAt, r.Deadline = &claimed, &expires, &dl
		r.LeaseGrant = c.Lease
		if c.WorkerID != "" {
			r.WorkerID = &c.WorkerID
		}
		if c.WorkerVersion != "" {
			r.WorkerVersion = &c.WorkerVersion
		}
		res.Rollouts = append(res.Rollouts, store.Claimed{Rollout: r, Secrets: i})
	}
	return nil
}

// reclaim answers a retried claim: when the Idempotency-Key names rollouts
// this agent still holds under live leases, they are returned again with
// the new secrets rotated in (gyre never keeps a secret it could resend),
// and done is true. Otherwise the claim leases afresh.
func (s *Store) reclaim(ctx context.Context, tx *sql.Tx, c store.ClaimRequest, res *store.ClaimResult) (done bool, err error) {
	prior, ok, err := s.idempotent(ctx, tx, c.TenantID, scopeClaim+c.AgentID, c.IdempotencyKey, s.now())
	if err != nil || !ok {
		return false, err
	}
	var ids []string
	if err := json.Unmarshal(prior, &ids); err != nil {
		return false, fmt.Errorf("read idempotent claim: %w", err)
	}
	if len(ids) == 0 || len(ids) > len(c.Secrets) {
		return false, nil
	}
	now, err := s.leaseNow(ctx, tx)
	if err != nil {
		return false, err
	}
	for _, id := range ids {
		var (
			state   gyre.RolloutState
			expires sql.NullInt64
		)
		err := tx.QueryRowContext(ctx, `SELECT r.state, r.lease_expires_us FROM rollouts r
			WHERE r.tenant_id = $1 AND r.id = $2 AND r.agent_id = $3`+s.d.LockRows, c.TenantID, id, c.AgentID).Scan(&state, &expires)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && (state != gyre.StateLeased || !expires.Valid || expires.Int64 <= now)) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("read idempotent claim: %w", err)
		}
	}
	for i, id := range ids {
		sec := c.Secrets[i]
		if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET lease_token_hash = $2, gw_token_hash = $3, gw_key_hash = $4
			WHERE id = $1`, id, sec.LeaseToken[:], sec.GatewayToken[:], sec.GatewayKey[:]); err != nil {
			return false, fmt.Errorf("rotate claim secrets: %w", err)
		}
		r, err := s.rollout(ctx, tx, c.TenantID, id)
		if err != nil {
			return false, err
		}
		res.Rollouts = append(res.Rollouts, store.Claimed{Rollout: r, Secrets: i})
	}
	res.Now = store.FromMicros(now)
	res.MoreQueued, err = s.hasQueued(ctx, tx, c.TenantID, c.AgentID)
	return true, err
}

// HasQueued reports whether the agent has queued rollouts.
func (s *Store) HasQueued(ctx context.Context, tenantID, agentID string) (bool, error) {
	return s.hasQueued(ctx, s.reader, tenantID, agentID)
}

func (s *Store) hasQueued(ctx context.Context, q querier, tenantID, agentID string) (bool, error) {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM rollouts WHERE tenant_id = $1 AND agent_id = $2 AND state = 'queued' LIMIT 1`,
		tenantID, agentID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("queued rollouts: %w", err)
	}
	return true, nil
}

// leaseRow is what the lease checks of heartbeat, release and output read.
type leaseRow struct {
	state       gyre.RolloutState
	tokenHash   []byte
	expires     sql.NullInt64
	granted     sql.NullInt64
	deadline    sql.NullInt64
	outputHash  sql.NullString
	attempt     int
	agentID     string
	batchID     string
	taskID      string
	groupID     string
	queueSeq    int64
	queuePos    int
	maxAttempts int
	retryOn     string
}

func (s *Store) leaseRow(ctx context.Context, q querier, tenantID, rolloutID string, lock bool) (leaseRow, error) {
	var r leaseRow
	suffix := ""
	if lock {
		suffix = s.d.LockRows
	}
	err := q.QueryRowContext(ctx, `SELECT r.state, r.lease_token_hash, r.lease_expires_us, r.lease_granted_us, r.deadline_us,
		r.output_sha256, r.attempt, r.agent_id, r.batch_id, r.task_id, r.group_id, r.queue_seq, r.queue_pos,
		b.max_attempts, b.retry_on
		FROM rollouts r JOIN batches b ON b.id = r.batch_id WHERE r.tenant_id = $1 AND r.id = $2`+suffix,
		tenantID, rolloutID).Scan(&r.state, &r.tokenHash, &r.expires, &r.granted, &r.deadline, &r.outputHash,
		&r.attempt, &r.agentID, &r.batchID, &r.taskID, &r.groupID, &r.queueSeq, &r.queuePos, &r.maxAttempts, &r.retryOn)
	if err != nil {
		return leaseRow{}, notFound("rollout", err)
	}
	return r, nil
}

// tokenMatches compares a presented lease token's hash with the claim's in
// constant time. A rollout never claimed has no token and matches nothing.
func (r leaseRow) tokenMatches(h [32]byte) bool {
	return len(r.tokenHash) == len(h) && subtle.ConstantTimeCompare(r.tokenHash, h[:]) == 1
}

// lapsed reports whether the lease has run out at now.
func (r leaseRow) lapsed(now int64) bool { return !r.expires.Valid || r.expires.Int64 <= now }

// checkLive is the order of checks heartbeat and release share (SPEC
// §4.4): token, then finished, then lapsed. An abandoned rollout is one
// whose lease lapsed and was swept, so it answers lease lost, not finished.
func (r leaseRow) checkLive(h [32]byte, now int64) error {
	switch {
	case !r.tokenMatches(h):
		return store.ErrLeaseLost
	case r.state == gyre.StateAbandoned:
		return store.ErrLeaseLost
	case r.state.Finished():
		return store.ErrRolloutFinished
	case r.state != gyre.StateLeased || r.lapsed(now):
		return store.ErrLeaseLost
	}
	return nil
}

// liveLease locks a rollout's lease row and checks, at the lease clock's
// now, that token holds its live lease.
func (s *Store) liveLease(ctx context.Context, tx *sql.Tx, tenantID, rolloutID string, token [32]byte) (leaseRow, int64, error) {
	now, err := s.leaseNow(ctx, tx)
	if err != nil {
		return leaseRow{}, 0, err
	}
	r, err := s.leaseRow(ctx, tx, tenantID, rolloutID, true)
	if err != nil {
		return leaseRow{}, 0, err
	}
	return r, now, r.checkLive(token, now)
}

// Heartbeat renews a live lease to now + the granted length.
func (s *Store) Heartbeat(ctx context.Context, tenantID, rolloutID string, token [32]byte) (time.Time, error) {
	var expires int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		r, now, err := s.liveLease(ctx, tx, tenantID, rolloutID, token)
		if err != nil {
			return err
		}
		expires = now + r.granted.Int64
		_, err = tx.ExecContext(ctx, `UPDATE rollouts SET lease_expires_us = $2 WHERE id = $1`, rolloutID, expires)
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("heartbeat: %w", err)
	}
	return store.FromMicros(expires), nil
}

// CheckLease is the read-only first half of the output checks.
func (s *Store) CheckLease(ctx context.Context, tenantID, rolloutID string, token [32]byte) error {
	r, err := s.leaseRow(ctx, s.reader, tenantID, rolloutID, false)
	if err != nil {
		return fmt.Errorf("check lease: %w", err)
	}
	if !r.tokenMatches(token) {
		return fmt.Errorf("check lease: %w", store.ErrLeaseLost)
	}
	return nil
}

// SubmitOutput runs the checks of SPEC §4.6 steps 1, 2, 4, 5 and 6 under
// the row's lock and accepts the output.
func (s *Store) SubmitOutput(ctx context.Context, o store.OutputSubmission) (store.OutputResult, error) {
	var res store.OutputResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		res = store.OutputResult{}
		now, err := s.leaseNow(ctx, tx)
		if err != nil {
			return err
		}
		r, err := s.leaseRow(ctx, tx, o.TenantID, o.RolloutID, true)
		if err != nil {
			return err
		}
		switch {
		case !r.tokenMatches(o.LeaseToken):
			return store.ErrLeaseLost
		case r.outputHash.Valid:
			if subtle.ConstantTimeCompare([]byte(r.outputHash.String), []byte(o.OutputHash)) != 1 {
				return store.ErrOutputConflict
			}
			res.State, res.Replayed = r.state, true
			return nil
		case r.state == gyre.StateDeadlineExceeded:
			return store.ErrDeadlineExceeded
		case r.state != gyre.StateLeased || r.lapsed(now):
			return store.ErrLeaseLost
		case now > r.deadline.Int64+o.Grace.Microseconds():
			return store.ErrDeadlineExceeded
		}
		if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET state = 'submitted', submitted_us = $2, output = $3,
			output_sha256 = $4, exclusion_reason = $5, gw_revoked_us = COALESCE(gw_revoked_us, $2) WHERE id = $1`,
			o.RolloutID, now, string(o.Output), o.OutputHash, o.Exclusion); err != nil {
			return fmt.Errorf("store output: %w", err)
		}
		if err := s.enqueue(ctx, tx, store.JobGrade, o.RolloutID, s.now()); err != nil {
			return err
		}
		res.State = gyre.StateSubmitted
		if o.Exclusion != nil && *o.Exclusion != "deadline_exceeded" && r.attempt < r.maxAttempts {
			var retryOn []string
			if err := json.Unmarshal([]byte(r.retryOn), &retryOn); err != nil {
				return fmt.Errorf("batch retry_on: %w", err)
			}
			if slices.Contains(retryOn, *o.Exclusion) {
				res.Retry, err = s.requeue(ctx, tx, o.TenantID, o.RolloutID, r, r.attempt+1)
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.OutputResult{}, fmt.Errorf("submit output: %w", err)
	}
	return res, nil
}

// requeue mints a new queued rollout for r's task at r's place in the
// queue, in r's group, with the given attempt number, and marks the
// rollout it replaces (replacedID), which then no longer counts as a
// finished rollout of its batch.
func (s *Store) requeue(ctx context.Context, tx *sql.Tx, tenantID, replacedID string, r leaseRow, attempt int) (string, error) {
	id, err := s.insertRollout(ctx, tx, queuedRollout{
		tenantID: tenantID, agentID: r.agentID, batchID: r.batchID, taskID: r.taskID, groupID: r.groupID,
		attempt: attempt, queueSeq: r.queueSeq, queuePos: r.queuePos, now: s.now(),
	})
	if err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET replaced_by = $2 WHERE id = $1`, replacedID, id); err != nil {
		return "", fmt.Errorf("mark replaced rollout: %w", err)
	}
	return id, nil
}

// Release ends a leased rollout released and re-queues its task without
// spending an attempt, unless the gateway counted a completion for it.
func (s *Store) Release(ctx context.Context, tenantID, rolloutID string, token [32]byte) (string, error) {
	var next string
	err := s.write(ctx, func(tx *sql.Tx) error {
		r, now, err := s.liveLease(ctx, tx, tenantID, rolloutID, token)
		if err != nil {
			return err
		}
		var counted int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM gateway_calls WHERE rollout_id = $1 AND counted = TRUE`,
			rolloutID).Scan(&counted); err != nil {
			return fmt.Errorf("count completions: %w", err)
		}
		if counted > 0 {
			return store.ErrAlreadyStarted
		}
		if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET state = 'released', ended_us = $2,
			gw_revoked_us = COALESCE(gw_revoked_us, $2) WHERE id = $1`, rolloutID, now); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		next, err = s.requeue(ctx, tx, tenantID, rolloutID, r, r.attempt)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	return next, nil
}

// CancelRollout cancels a queued or leased rollout.
func (s *Store) CancelRollout(ctx context.Context, tenantID, rolloutID string) (store.Rollout, error) {
	var out store.Rollout
	err := s.write(ctx, func(tx *sql.Tx) error {
		r, err := s.leaseRow(ctx, tx, tenantID, rolloutID, true)
		if err != nil {
			return err
		}
		if r.state != gyre.StateQueued && r.state != gyre.StateLeased {
			return store.ErrRolloutFinished
		}
		now := s.now()
		if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET state = 'cancelled', ended_us = $2,
			gw_revoked_us = COALESCE(gw_revoked_us, $2) WHERE id = $1`, rolloutID, now); err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		out, err = s.rollout(ctx, tx, tenantID, rolloutID)
		return err
	})
	if err != nil {
		return store.Rollout{}, fmt.Errorf("cancel rollout: %w", err)
	}
	return out, nil
}

// Sweep is one watchdog pass. Deadlines go first: a rollout past its
// deadline + grace ends deadline_exceeded (never retried) even if its
// lease lapsed too. Then lapsed leases end abandoned and are retried while
// attempts remain.
func (s *Store) Sweep(ctx context.Context, grace time.Duration, limit int) (store.SweepResult, error) {
	var res store.SweepResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		res = store.SweepResult{}
		now, err := s.leaseNow(ctx, tx)
		if err != nil {
			return err
		}
		late, err := s.pickLeased(ctx, tx, `r.deadline_us < $1`, now-grace.Microseconds(), limit)
		if err != nil {
			return err
		}
		for _, id := range late {
			if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET state = 'deadline_exceeded', ended_us = $2,
				gw_revoked_us = COALESCE(gw_revoked_us, $2) WHERE id = $1`, id, now); err != nil {
				return fmt.Errorf("end late rollout: %w", err)
			}
		}
		res.DeadlineExceeded = late
		lapsed, err := s.pickLeased(ctx, tx, `r.lease_expires_us <= $1`, now, limit)
		if err != nil {
			return err
		}
		for _, id := range lapsed {
			if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET state = 'abandoned', ended_us = $2,
				gw_revoked_us = COALESCE(gw_revoked_us, $2) WHERE id = $1`, id, now); err != nil {
				return fmt.Errorf("abandon rollout: %w", err)
			}
			var tenantID string
			if err := tx.QueryRowContext(ctx, `SELECT tenant_id FROM rollouts WHERE id = $1`, id).Scan(&tenantID); err != nil {
				return fmt.Errorf("abandon rollout: %w", err)
			}
			r, err := s.leaseRow(ctx, tx, tenantID, id, false)
			if err != nil {
				return err
			}
			if r.attempt < r.maxAttempts {
				retry, err := s.requeue(ctx, tx, tenantID, id, r, r.attempt+1)
				if err != nil {
					return err
				}
				res.Retries = append(res.Retries, store.Requeued{RolloutID: retry, TenantID: tenantID, AgentID: r.agentID})
			}
		}
		res.Abandoned = lapsed
		return nil
	})
	if err != nil {
		return store.SweepResult{}, fmt.Errorf("sweep: %w", err)
	}
	return res, nil
}

// pickLeased selects (and on PostgreSQL locks, skipping rows other
// replicas hold) up to limit leased rollouts matching cond on $1.
func (s *Store) pickLeased(ctx context.Context, tx *sql.Tx, cond string, arg int64, limit int) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT r.id FROM rollouts r WHERE r.state = 'leased' AND `+cond+
		` ORDER BY r.id LIMIT $2`+s.d.SkipLocked, arg, limit)
	if err != nil {
		return nil, fmt.Errorf("sweep pick: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sweep pick: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// GatewayGrant finds the rollout a gateway token belongs to.
func (s *Store) GatewayGrant(ctx context.Context, tokenHash [32]byte) (store.GatewayGrant, error) {
	var (
		g        store.GatewayGrant
		key      []byte
		limits   sql.NullString
		deadline sql.NullInt64
		revoked  sql.NullInt64
	)
	err := s.reader.QueryRowContext(ctx, `SELECT r.id, r.tenant_id, r.agent_id, r.batch_id, b.policy, b.limits,
		r.gw_key_hash, r.state, r.deadline_us, r.gw_revoked_us
		FROM rollouts r JOIN batches b ON b.id = r.batch_id WHERE r.gw_token_hash = $1`, tokenHash[:]).Scan(
		&g.RolloutID, &g.TenantID, &g.AgentID, &g.BatchID, &g.Policy, &limits, &key, &g.State, &deadline, &revoked)
	if err != nil {
		return store.GatewayGrant{}, notFound("gateway grant", err)
	}
	copy(g.KeyHash[:], key)
	if limits.Valid {
		g.Limits = json.RawMessage(limits.String)
	}
	if deadline.Valid {
		g.Deadline = store.FromMicros(deadline.Int64)
	}
	g.Revoked = revoked.Valid
	return g, nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
