package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gyrehq/gyre/internal/store"
)

// idempotencyWindow is how long an Idempotency-Key is remembered (SPEC §4.2).
const idempotencyWindow = 24 * time.Hour

// Idempotency scopes.
const (
	scopeBatch = "batch"
	scopeClaim = "claim:" // + agent id
)

// CreateBatch mints GroupSize queued rollouts per task in one transaction.
func (s *Store) CreateBatch(ctx context.Context, nb store.NewBatch) (store.Batch, []string, bool, error) {
	if nb.GroupSize < 1 || nb.MaxAttempts < 1 || nb.DeadlineS <= 0 || len(nb.TaskIDs) == 0 {
		return store.Batch{}, nil, false, errors.New("create batch: group size, attempts, deadline and tasks must be positive")
	}
	if err := refuseNUL("/agent_id", nb.AgentID, "/policy", derefOr(nb.Policy), "Idempotency-Key", nb.IdempotencyKey); err != nil {
		return store.Batch{}, nil, false, fmt.Errorf("create batch: %w", err)
	}
	var (
		batch   store.Batch
		ids     []string
		existed bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		ids, existed = nil, false
		now := s.now()
		if nb.IdempotencyKey != "" {
			if err := s.lockTx(ctx, tx, "idempotency:"+nb.TenantID); err != nil {
				return err
			}
			prior, ok, err := s.idempotent(ctx, tx, nb.TenantID, scopeBatch, nb.IdempotencyKey, now)
			if err != nil {
				return err
			}
			if ok {
				var prevHash sql.NullString
				if err := tx.QueryRowContext(ctx, `SELECT request_sha256 FROM idempotency_keys
					WHERE tenant_id = $1 AND scope = $2 AND key = $3`, nb.TenantID, scopeBatch, nb.IdempotencyKey).Scan(&prevHash); err != nil {
					return fmt.Errorf("read idempotency key: %w", err)
				}
				// A key remembered without a hash (before hashes were kept)
				// matches any body.
				if prevHash.Valid && nb.RequestSHA256 != "" && prevHash.String != nb.RequestSHA256 {
					return store.ErrIdempotencyKeyReused
				}
				var batchID string
				if err := json.Unmarshal(prior, &batchID); err != nil {
					return fmt.Errorf("read idempotent batch: %w", err)
				}
				if batch, err = s.batch(ctx, tx, nb.TenantID, batchID); err != nil {
					return err
				}
				ids, err = s.batchRolloutIDs(ctx, tx, batchID)
				existed = true
				return err
			}
		}
		batchID, rollouts, err := s.insertBatch(ctx, tx, nb, now)
		if err != nil {
			return err
		}
		ids = rollouts
		if nb.IdempotencyKey != "" {
			if err := s.remember(ctx, tx, nb.TenantID, scopeBatch, nb.IdempotencyKey, batchID, now); err != nil {
				return err
			}
			var hash any
			if nb.RequestSHA256 != "" {
				hash = nb.RequestSHA256
			}
			if _, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET request_sha256 = $4
				WHERE tenant_id = $1 AND scope = $2 AND key = $3`, nb.TenantID, scopeBatch, nb.IdempotencyKey, hash); err != nil {
				return fmt.Errorf("remember idempotency key: %w", err)
			}
		}
		batch, err = s.batch(ctx, tx, nb.TenantID, batchID)
		return err
	})
	if err != nil {
		return store.Batch{}, nil, false, fmt.Errorf("create batch: %w", err)
	}
	if len(s.d.AnalyzeRollouts) > 0 && !existed && len(ids) >= analyzeAfterRollouts {
		// Best effort: the batch is committed; stale statistics only slow
		// claims down until autovacuum analyzes the table itself.
		_ = s.analyzeRollouts(ctx)
	}
	return batch, ids, existed, nil
}

// insertBatch checks a batch's policy and tasks and inserts it with its
// queued rollouts inside tx; it returns the batch id and the rollout ids.
func (s *Store) insertBatch(ctx context.Context, tx *sql.Tx, nb store.NewBatch, now int64) (string, []string, error) {
	retryOn, err := json.Marshal(nonNil(nb.RetryOn))
	if err != nil {
		return "", nil, err
	}
	taskIDs, err := json.Marshal(nb.TaskIDs)
	if err != nil {
		return "", nil, err
	}
	var ids []string
	if nb.Policy != nil {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM policies WHERE tenant_id = $1 AND name = $2`, nb.TenantID, *nb.Policy).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil, &store.FieldError{Pointer: "/policy", Err: fmt.Errorf("policy %q: %w", *nb.Policy, store.ErrPolicyNotFound)}
		}
		if err != nil {
			return "", nil, fmt.Errorf("check policy: %w", err)
		}
	}
	for i, id := range nb.TaskIDs {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM tasks WHERE tenant_id = $1 AND id = $2`, nb.TenantID, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil, &store.FieldError{Pointer: fmt.Sprintf("/task_ids/%d", i), Err: fmt.Errorf("task %s: %w", id, store.ErrNotFound)}
		}
		if err != nil {
			return "", nil, fmt.Errorf("check task: %w", err)
		}
	}
	batchID, err := newID()
	if err != nil {
		return "", nil, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO agents (tenant_id, agent_id, first_seen_us) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id, agent_id) DO NOTHING`, nb.TenantID, nb.AgentID, now); err != nil {
		return "", nil, fmt.Errorf("record agent: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO batches (id, tenant_id, agent_id, policy, group_size, deadline_s,
		max_attempts, retry_on, limits, task_ids, created_us, promotion_id, promotion_side)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		batchID, nb.TenantID, nb.AgentID, nb.Policy, nb.GroupSize, nb.DeadlineS, nb.MaxAttempts,
		string(retryOn), nullJSON(nb.Limits), string(taskIDs), now, nb.PromotionID, nb.PromotionSide); err != nil {
		return "", nil, fmt.Errorf("insert batch: %w", err)
	}
	pos := 0
	for _, taskID := range nb.TaskIDs {
		groupID, err := newID()
		if err != nil {
			return "", nil, err
		}
		for range nb.GroupSize {
			id, err := s.insertRollout(ctx, tx, queuedRollout{
				tenantID: nb.TenantID, agentID: nb.AgentID, batchID: batchID, taskID: taskID,
				groupID: groupID, attempt: 1, queueSeq: now, queuePos: pos, now: now,
			})
			if err != nil {
				return "", nil, err
			}
			ids = append(ids, id)
			pos++
		}
	}
	return batchID, ids, nil
}

// analyzeRollouts runs Dialect.AnalyzeRollouts in one transaction.
func (s *Store) analyzeRollouts(ctx context.Context) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	for _, q := range s.d.AnalyzeRollouts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// analyzeAfterRollouts is the batch size from which CreateBatch refreshes
// the rollouts table's statistics (Dialect.AnalyzeRollouts). ANALYZE
// samples a bounded number of rows, so it costs tens of milliseconds
// whatever the table's size.
const analyzeAfterRollouts = 256

// queuedRollout is a rollout about to be queued: a batch's own, a retry or
// a release's replacement. A retry keeps its parent's place in the queue.
type queuedRollout struct {
	tenantID, agentID, batchID, taskID, groupID string
	attempt                                     int
	queueSeq                                    int64
	queuePos                                    int
	now                                         int64
}

func (s *Store) insertRollout(ctx context.Context, tx *sql.Tx, q queuedRollout) (string, error) {
	id, err := newID()
	if err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO rollouts (id, tenant_id, agent_id, batch_id, task_id, group_id,
		attempt, queue_seq, queue_pos, state, created_us) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', $10)`,
		id, q.tenantID, q.agentID, q.batchID, q.taskID, q.groupID, q.attempt, q.queueSeq, q.queuePos, q.now); err != nil {
		return "", fmt.Errorf("insert rollout: %w", err)
	}
	return id, nil
}

// idempotent returns the answer remembered for an Idempotency-Key within
// the window.
func (s *Store) idempotent(ctx context.Context, q querier, tenantID, scope, key string, now int64) (json.RawMessage, bool, error) {
	var resp string
	err := q.QueryRowContext(ctx, `SELECT response FROM idempotency_keys
		WHERE tenant_id = $1 AND scope = $2 AND key = $3 AND created_us > $4`,
		tenantID, scope, key, now-idempotencyWindow.Microseconds()).Scan(&resp)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read idempotency key: %w", err)
	}
	return json.RawMessage(resp), true, nil
}

// remember stores the answer for an Idempotency-Key, replacing an expired one.
func (s *Store) remember(ctx context.Context, tx *sql.Tx, tenantID, scope, key string, answer any, now int64) error {
	b, err := json.Marshal(answer)
	if err != nil {
		return fmt.Errorf("remember idempotency key: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO idempotency_keys (tenant_id, scope, key, response, created_us)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, scope, key)
		DO UPDATE SET response = excluded.response, created_us = excluded.created_us`,
		tenantID, scope, key, string(b), now); err != nil {
		return fmt.Errorf("remember idempotency key: %w", err)
	}
	return nil
}

const batchCols = `id, tenant_id, agent_id, policy, group_size, deadline_s, max_attempts, retry_on, limits, task_ids, created_us, cancelled_us,
	promotion_id, promotion_side`

func (s *Store) batch(ctx context.Context, q querier, tenantID, id string) (store.Batch, error) {
	b, err := scanBatch(q.QueryRowContext(ctx, `SELECT `+batchCols+` FROM batches WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if err != nil {
		return store.Batch{}, notFound("batch", err)
	}
	return b, nil
}

// scanBatch reads one row of batchCols.
func scanBatch(row interface{ Scan(...any) error }) (store.Batch, error) {
	var (
		b                store.Batch
		retryOn, taskIDs string
		limits           sql.NullString
		created          int64
		cancelled        sql.NullInt64
	)
	if err := row.Scan(&b.ID, &b.TenantID, &b.AgentID, &b.Policy, &b.GroupSize, &b.DeadlineS, &b.MaxAttempts,
		&retryOn, &limits, &taskIDs, &created, &cancelled, &b.PromotionID, &b.PromotionSide); err != nil {
		return store.Batch{}, err
	}
	if err := json.Unmarshal([]byte(retryOn), &b.RetryOn); err != nil {
		return store.Batch{}, fmt.Errorf("batch retry_on: %w", err)
	}
	if err := json.Unmarshal([]byte(taskIDs), &b.TaskIDs); err != nil {
		return store.Batch{}, fmt.Errorf("batch task_ids: %w", err)
	}
	if limits.Valid {
		b.Limits = json.RawMessage(limits.String)
	}
	b.CreatedAt = store.FromMicros(created)
	b.CancelledAt = timePtr(cancelled)
	return b, nil
}

func (s *Store) batchRolloutIDs(ctx context.Context, q querier, batchID string) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT id FROM rollouts WHERE batch_id = $1 AND attempt = 1
		ORDER BY queue_pos, id`, batchID)
	if err != nil {
		return nil, fmt.Errorf("batch rollouts: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("batch rollouts: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// CancelBatch cancels the batch's queued and leased rollouts.
func (s *Store) CancelBatch(ctx context.Context, tenantID, batchID string) (int, error) {
	var n int
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = s.cancelBatch(ctx, tx, tenantID, batchID, s.now())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cancel batch: %w", err)
	}
	return n, nil
}

// cancelBatch marks the batch cancelled and cancels its queued and leased
// rollouts, revoking their gateway tokens, inside tx.
func (s *Store) cancelBatch(ctx context.Context, tx *sql.Tx, tenantID, batchID string, now int64) (int, error) {
	res, err := tx.ExecContext(ctx, `UPDATE batches SET cancelled_us = COALESCE(cancelled_us, $3)
		WHERE tenant_id = $1 AND id = $2`, tenantID, batchID, now)
	if err != nil {
		return 0, err
	}
	if k, err := res.RowsAffected(); err != nil {
		return 0, err
	} else if k == 0 {
		return 0, store.ErrNotFound
	}
	res, err = tx.ExecContext(ctx, `UPDATE rollouts SET state = 'cancelled', ended_us = $2,
		gw_revoked_us = COALESCE(gw_revoked_us, $2)
		WHERE batch_id = $1 AND state IN ('queued', 'leased')`, batchID, now)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// nullJSON stores an absent JSON value as SQL NULL.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

func timePtr(us sql.NullInt64) *time.Time {
	if !us.Valid {
		return nil
	}
	t := store.FromMicros(us.Int64)
	return &t
}
