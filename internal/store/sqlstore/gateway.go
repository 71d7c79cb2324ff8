package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// CreatePolicy stores a new policy, or finds the identical one.
func (s *Store) CreatePolicy(ctx context.Context, p store.Policy) (store.Policy, bool, error) {
	if err := refuseNUL("/name", p.Name); err != nil {
		return store.Policy{}, false, fmt.Errorf("create policy: %w", err)
	}
	var (
		out     store.Policy
		created bool
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.now()
		res, err := tx.ExecContext(ctx, `INSERT INTO policies (tenant_id, name, body, body_sha256, created_us)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, name) DO NOTHING`,
			p.TenantID, p.Name, string(p.Body), p.SHA256, now)
		if err != nil {
			return fmt.Errorf("insert policy: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("insert policy: %w", err)
		}
		created = n == 1
		out, err = s.policy(ctx, tx, p.TenantID, p.Name)
		if err != nil {
			return err
		}
		if !created && out.SHA256 != p.SHA256 {
			return store.ErrPolicyExists
		}
		return nil
	})
	if err != nil {
		return store.Policy{}, false, fmt.Errorf("create policy: %w", err)
	}
	return out, created, nil
}

func scanPolicy(row scanner) (store.Policy, error) {
	var (
		p       store.Policy
		body    string
		created int64
	)
	if err := row.Scan(&p.TenantID, &p.Name, &body, &p.SHA256, &created); err != nil {
		return store.Policy{}, err
	}
	p.Body, p.CreatedAt = json.RawMessage(body), store.FromMicros(created)
	return p, nil
}

const policyCols = `tenant_id, name, body, body_sha256, created_us`

func (s *Store) policy(ctx context.Context, q querier, tenantID, name string) (store.Policy, error) {
	p, err := scanPolicy(q.QueryRowContext(ctx, `SELECT `+policyCols+` FROM policies WHERE tenant_id = $1 AND name = $2`,
		tenantID, name))
	if err != nil {
		return store.Policy{}, notFound("policy", err)
	}
	return p, nil
}

// GetPolicy returns one of the tenant's policies.
func (s *Store) GetPolicy(ctx context.Context, tenantID, name string) (store.Policy, error) {
	p, err := s.policy(ctx, s.reader, tenantID, name)
	if err != nil {
		return store.Policy{}, fmt.Errorf("get policy: %w", err)
	}
	return p, nil
}

// ListPolicies lists the tenant's policies by name.
func (s *Store) ListPolicies(ctx context.Context, tenantID string, p store.Page) ([]store.Policy, string, error) {
	cur := listCursor(tenantID, "policies")
	after, err := cur.decode(p.Cursor)
	if err != nil {
		return nil, "", err
	}
	n := limit(p)
	rows, err := s.reader.QueryContext(ctx, `SELECT `+policyCols+` FROM policies WHERE tenant_id = $1 AND name > $2
		ORDER BY name LIMIT $3`, tenantID, after, n+1)
	if err != nil {
		return nil, "", fmt.Errorf("list policies: %w", err)
	}
	defer rows.Close()
	var out []store.Policy
	for rows.Next() {
		pol, err := scanPolicy(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list policies: %w", err)
		}
		out = append(out, pol)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list policies: %w", err)
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		next = cur.encode(out[n-1].Name)
	}
	return out, next, nil
}

// AgentPolicy returns the agent's promoted policy.
func (s *Store) AgentPolicy(ctx context.Context, tenantID, agentID string) (*string, error) {
	var p sql.NullString
	err := s.reader.QueryRowContext(ctx, `SELECT promoted_policy FROM agents WHERE tenant_id = $1 AND agent_id = $2`,
		tenantID, agentID).Scan(&p)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agent policy: %w", err)
	}
	if !p.Valid {
		return nil, nil
	}
	return &p.String, nil
}

// pointRead is the context for a point read on the request path: where
// reads are in-process, one that is never cancelled (see
// Dialect.InProcessReads); elsewhere ctx, so a stuck peer is let go.
func (s *Store) pointRead(ctx context.Context) context.Context {
	if s.d.InProcessReads {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// nowSQL is the lease clock as a column expression: the database's clock
// when the store uses it, else the bound parameter $n.
func (s *Store) nowSQL(n int) string {
	if s.dbClock {
		return s.d.NowExpr
	}
	return fmt.Sprintf("CAST($%d AS BIGINT)", n)
}

// nowArgs appends the injected clock's time when the lease clock is not
// the database's.
func (s *Store) nowArgs(args ...any) []any {
	if s.dbClock {
		return args
	}
	return append(args, s.now())
}

// GatewayAccess finds the rollout of a gateway token with its batch's
// policy, its lease and the lease clock, in one statement. The agent's
// promoted policy is not read: a batch resolved its policy when it was
// created (SPEC §6.1).
func (s *Store) GatewayAccess(ctx context.Context, tokenHash [32]byte) (store.GatewayAccess, error) {
	var (
		a                          store.GatewayAccess
		key                        []byte
		limits                     sql.NullString
		deadline, revoked, expires sql.NullInt64
		now                        int64
	)
	err := s.reader.QueryRowContext(s.pointRead(ctx), `SELECT r.id, r.tenant_id, r.agent_id, r.batch_id, b.policy, b.limits,
		r.gw_key_hash, r.state, r.deadline_us, r.gw_revoked_us, r.lease_expires_us, `+s.nowSQL(2)+`
		FROM rollouts r JOIN batches b ON b.id = r.batch_id
		WHERE r.gw_token_hash = $1`, s.nowArgs(tokenHash[:])...).Scan(
		&a.RolloutID, &a.TenantID, &a.AgentID, &a.BatchID, &a.Policy, &limits, &key, &a.State, &deadline, &revoked,
		&expires, &now)
	if err != nil {
		return store.GatewayAccess{}, notFound("gateway access", err)
	}
	copy(a.KeyHash[:], key)
	if limits.Valid {
		a.Limits = json.RawMessage(limits.String)
	}
	if deadline.Valid {
		a.Deadline = store.FromMicros(deadline.Int64)
	}
	a.Revoked = revoked.Valid
	a.LeaseExpires = timePtr(expires)
	a.Now = store.FromMicros(now)
	return a, nil
}

// GatewayUsage totals the rollout's durable records.
func (s *Store) GatewayUsage(ctx context.Context, rolloutID string) (store.GatewayUsage, error) {
	var u store.GatewayUsage
	if err := s.reader.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN counted THEN 1 ELSE 0 END), 0),
		COALESCE(SUM(total_tokens), 0), COALESCE(SUM(cost_usd), 0) FROM gateway_calls WHERE rollout_id = $1`,
		rolloutID).Scan(&u.Calls, &u.Completions, &u.TotalTokens, &u.CostUSD); err != nil {
		return store.GatewayUsage{}, fmt.Errorf("gateway usage: %w", err)
	}
	return u, nil
}

// gatewayLiveCond is the SQL condition of GatewayAccess.Usable over a
// rollout r, with the lease clock as now.
func gatewayLiveCond(now string) string {
	return `r.state = 'leased' AND r.gw_revoked_us IS NULL AND r.deadline_us > ` + now +
		` AND r.lease_expires_us > ` + now
}

// GatewayLive returns which of the rollouts still admit gateway requests.
func (s *Store) GatewayLive(ctx context.Context, rolloutIDs []string) (map[string]bool, error) {
	out := make(map[string]bool, len(rolloutIDs))
	const chunk = 500
	for ids := range slices.Chunk(rolloutIDs, chunk) {
		args := make([]any, 0, len(ids)+1)
		for _, id := range ids {
			args = append(args, id)
		}
		args = s.nowArgs(args...)
		rows, err := s.reader.QueryContext(ctx, `SELECT r.id FROM rollouts r WHERE r.id IN (`+placeholders(1, len(ids))+`)
			AND `+gatewayLiveCond(s.nowSQL(len(ids)+1)), args...)
		if err != nil {
			return nil, fmt.Errorf("gateway live: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("gateway live: %w", err)
			}
			out[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("gateway live: %w", err)
		}
	}
	return out, nil
}

// LeaseClock reads the lease clock.
func (s *Store) LeaseClock(ctx context.Context) (time.Time, error) {
	us, err := s.leaseNow(ctx, s.reader)
	if err != nil {
		return time.Time{}, err
	}
	return store.FromMicros(us), nil
}

// TouchGateway records under the rollout's row lock that a replica serves
// it. The lock orders the touch against the output's acceptance (which
// revokes the token under the same lock) and against the seal, so a touch
// either lands before the rollout is sealed or is refused.
func (s *Store) TouchGateway(ctx context.Context, rolloutID, replicaID string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		now, err := s.leaseNow(ctx, tx)
		if err != nil {
			return err
		}
		var live int
		err = tx.QueryRowContext(ctx, `SELECT CASE WHEN `+gatewayLiveCond("$2")+` THEN 1 ELSE 0 END
			FROM rollouts r WHERE r.id = $1`+s.d.LockRows, rolloutID, now).Scan(&live)
		if err != nil {
			return notFound("rollout", err)
		}
		if live != 1 {
			return store.ErrGatewayClosed
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO gateway_touches (rollout_id, replica_id, created_us) VALUES ($1, $2, $3)
			ON CONFLICT (rollout_id, replica_id) DO NOTHING`, rolloutID, replicaID, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("touch gateway: %w", err)
	}
	return nil
}

// RecordGateway writes a batch of records and the replica's beat. Rollouts
// are locked in id order before their records get sequence numbers, so
// replicas flushing the same rollout at once never pick the same number
// and never deadlock.
func (s *Store) RecordGateway(ctx context.Context, f store.GatewayFlush) error {
	if f.ReplicaID == "" {
		return errors.New("record gateway: no replica id")
	}
	type enc struct {
		usage, fp, emitted, consumed any
	}
	encs := make([]enc, len(f.Records))
	var rollouts []string
	counted := map[string]bool{}
	for i, r := range f.Records {
		if r.ID == "" || r.TenantID == "" {
			return errors.New("record gateway: a record lacks its id or tenant")
		}
		em, err := json.Marshal(nonNil(r.EmittedIDs))
		if err != nil {
			return fmt.Errorf("record gateway: %w", err)
		}
		co, err := json.Marshal(nonNil(r.ConsumedIDs))
		if err != nil {
			return fmt.Errorf("record gateway: %w", err)
		}
		encs[i] = enc{usage: nullJSON(r.Usage), fp: nullJSON(r.Fingerprint), emitted: string(em), consumed: string(co)}
		if r.RolloutID != nil {
			rollouts = append(rollouts, *r.RolloutID)
			if r.Counted {
				counted[*r.RolloutID] = true
			}
		}
	}
	slices.Sort(rollouts)
	rollouts = slices.Compact(rollouts)
	err := s.write(ctx, func(tx *sql.Tx) error {
		now, err := s.leaseNow(ctx, tx)
		if err != nil {
			return err
		}
		if s.d.LockRows != "" {
			for _, id := range rollouts {
				var one int
				err := tx.QueryRowContext(ctx, `SELECT 1 FROM rollouts r WHERE r.id = $1`+s.d.LockRows, id).Scan(&one)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return fmt.Errorf("lock rollout: %w", err)
				}
			}
		}
		for i, r := range f.Records {
			e := encs[i]
			seq := `0`
			if r.RolloutID != nil {
				seq = `(SELECT COALESCE(MAX(seq), 0) + 1 FROM gateway_calls WHERE rollout_id = $3)`
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO gateway_calls (id, tenant_id, rollout_id, agent_id, seq, replica_id,
				policy, requested_model, status, counted, reason, stream, received_us, first_byte_us, done_us, request_blob,
				response_blob, usage, cost_usd, fingerprint, emitted_ids, consumed_ids, upstream, model, total_tokens, arrival,
				protocol, response_id)
				VALUES ($1, $2, $3, $4, `+seq+`, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21,
				$22, $23, $24, $25, $26, $27)
				ON CONFLICT (id) DO UPDATE SET status = excluded.status, counted = excluded.counted, reason = excluded.reason,
				first_byte_us = excluded.first_byte_us, done_us = excluded.done_us,
				request_blob = COALESCE(excluded.request_blob, gateway_calls.request_blob),
				response_blob = COALESCE(excluded.response_blob, gateway_calls.response_blob),
				usage = excluded.usage, cost_usd = excluded.cost_usd, fingerprint = excluded.fingerprint,
				emitted_ids = excluded.emitted_ids, consumed_ids = excluded.consumed_ids, total_tokens = excluded.total_tokens,
				response_id = excluded.response_id`,
				r.ID, r.TenantID, r.RolloutID, r.AgentID, r.ReplicaID, r.Policy, r.RequestedModel, r.Status, r.Counted,
				r.Reason, r.Stream, store.Micros(r.ReceivedAt), microsPtr(r.FirstByteAt), microsPtr(r.DoneAt),
				r.RequestBlob, r.ResponseBlob, e.usage, r.CostUSD, e.fp, e.emitted, e.consumed, r.Upstream, r.Model,
				r.TotalTokens, int64(r.Arrival), protocolOf(r), r.ResponseID); err != nil {
				return fmt.Errorf("insert gateway call: %w", err)
			}
		}
		for _, id := range rollouts {
			if _, err := tx.ExecContext(ctx, `INSERT INTO gateway_touches (rollout_id, replica_id, created_us) VALUES ($1, $2, $3)
				ON CONFLICT (rollout_id, replica_id) DO NOTHING`, id, f.ReplicaID, now); err != nil {
				return fmt.Errorf("touch rollout: %w", err)
			}
			if !counted[id] {
				continue
			}
			// A counted completion renews a live lease like a heartbeat.
			if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET lease_expires_us = $2 + lease_granted_us
				WHERE id = $1 AND state = 'leased' AND lease_expires_us > $2 AND lease_expires_us < $2 + lease_granted_us`,
				id, now); err != nil {
				return fmt.Errorf("extend lease: %w", err)
			}
		}
		if f.Beat == nil {
			return nil
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO replicas (id, heartbeat_us, expires_us, flushed_through_us, started_us)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO UPDATE SET heartbeat_us = excluded.heartbeat_us, expires_us = excluded.expires_us,
			flushed_through_us = CASE WHEN excluded.flushed_through_us > replicas.flushed_through_us
				THEN excluded.flushed_through_us ELSE replicas.flushed_through_us END`,
			f.ReplicaID, now, now+f.Beat.TTL.Microseconds(), store.Micros(f.Beat.FlushedThrough), store.Micros(f.Beat.Started))
		if err != nil {
			return fmt.Errorf("replica beat: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record gateway: %w", err)
	}
	return nil
}

// protocolOf is a record's protocol, chat when unset.
func protocolOf(r store.GatewayRecord) string {
	if r.Protocol == "" {
		return "chat"
	}
	return r.Protocol
}

func microsPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return store.Micros(*t)
}

// StopReplica marks the replica dead now.
func (s *Store) StopReplica(ctx context.Context, replicaID string, drained bool) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		now, err := s.leaseNow(ctx, tx)
		if err != nil {
			return err
		}
		flushed := `flushed_through_us`
		if drained {
			flushed = fmt.Sprint(int64(math.MaxInt64))
		}
		_, err = tx.ExecContext(ctx, `UPDATE replicas SET expires_us = $2, flushed_through_us = `+flushed+` WHERE id = $1`,
			replicaID, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("stop replica: %w", err)
	}
	return nil
}

const gatewayCallCols = `id, tenant_id, rollout_id, agent_id, seq, replica_id, policy, upstream, model, requested_model,
	status, counted, reason, stream, received_us, first_byte_us, done_us, request_blob, response_blob, usage,
	total_tokens, cost_usd, fingerprint, emitted_ids, consumed_ids, arrival, protocol, response_id`

func scanGatewayCall(row scanner) (store.GatewayCall, error) {
	var (
		c                 store.GatewayCall
		received          int64
		firstByte, done   sql.NullInt64
		usage, fp         sql.NullString
		emitted, consumed string
		tokens            sql.NullInt64
		cost              sql.NullFloat64
		arrival           int64
	)
	if err := row.Scan(&c.ID, &c.TenantID, &c.RolloutID, &c.AgentID, &c.Seq, &c.ReplicaID, &c.Policy, &c.Upstream,
		&c.Model, &c.RequestedModel, &c.Status, &c.Counted, &c.Reason, &c.Stream, &received, &firstByte, &done,
		&c.RequestBlob, &c.ResponseBlob, &usage, &tokens, &cost, &fp, &emitted, &consumed, &arrival, &c.Protocol,
		&c.ResponseID); err != nil {
		return store.GatewayCall{}, err
	}
	c.ReceivedAt, c.FirstByteAt, c.DoneAt = store.FromMicros(received), timePtr(firstByte), timePtr(done)
	c.Arrival = uint64(arrival)
	if usage.Valid {
		c.Usage = json.RawMessage(usage.String)
	}
	if fp.Valid {
		c.Fingerprint = json.RawMessage(fp.String)
	}
	if tokens.Valid {
		c.TotalTokens = &tokens.Int64
	}
	if cost.Valid {
		c.CostUSD = &cost.Float64
	}
	if err := json.Unmarshal([]byte(emitted), &c.EmittedIDs); err != nil {
		return store.GatewayCall{}, fmt.Errorf("emitted ids: %w", err)
	}
	if err := json.Unmarshal([]byte(consumed), &c.ConsumedIDs); err != nil {
		return store.GatewayCall{}, fmt.Errorf("consumed ids: %w", err)
	}
	return c, nil
}

// GatewayCalls returns the rollout's records in order of arrival, numbered
// 1, 2, … in that order. The stored seq is the order of writing, which a
// call finishing after a later one would get wrong; it only breaks ties.
func (s *Store) GatewayCalls(ctx context.Context, tenantID, rolloutID string) ([]store.GatewayCall, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+gatewayCallCols+` FROM gateway_calls
		WHERE tenant_id = $1 AND rollout_id = $2 ORDER BY received_us, arrival, seq`, tenantID, rolloutID)
	if err != nil {
		return nil, fmt.Errorf("gateway calls: %w", err)
	}
	defer rows.Close()
	var out []store.GatewayCall
	for rows.Next() {
		c, err := scanGatewayCall(rows)
		if err != nil {
			return nil, fmt.Errorf("gateway calls: %w", err)
		}
		c.Seq = len(out) + 1
		out = append(out, c)
	}
	return out, rows.Err()
}

// GatewayCallByResponse returns the rollout's latest record whose
// Responses answer had the id responseID.
func (s *Store) GatewayCallByResponse(ctx context.Context, tenantID, rolloutID, responseID string) (store.GatewayRecord, error) {
	c, err := scanGatewayCall(s.reader.QueryRowContext(ctx, `SELECT `+gatewayCallCols+` FROM gateway_calls
		WHERE tenant_id = $1 AND rollout_id = $2 AND response_id = $3 ORDER BY received_us DESC, arrival DESC, seq DESC LIMIT 1`,
		tenantID, rolloutID, responseID))
	if err != nil {
		return store.GatewayRecord{}, fmt.Errorf("gateway call by response: %w", notFound("gateway call", err))
	}
	return c.GatewayRecord, nil
}

// GatewayRequestedModels lists the distinct models asked for in the
// rollout's durable records, sorted.
func (s *Store) GatewayRequestedModels(ctx context.Context, rolloutID string) ([]string, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT DISTINCT requested_model FROM gateway_calls
		WHERE rollout_id = $1 AND requested_model IS NOT NULL ORDER BY requested_model`, rolloutID)
	if err != nil {
		return nil, fmt.Errorf("requested models: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return nil, fmt.Errorf("requested models: %w", err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// SealGateway seals a submitted rollout for reconciliation and reports
// whether every replica that touched it has flushed through the seal or
// is dead. The seal is written under the rollout's row lock, after the
// acceptance that revoked the token committed, so the lease clock at the
// seal is later than every credential read that admitted a request.
func (s *Store) SealGateway(ctx context.Context, rolloutID string) (store.GatewaySeal, error) {
	var out store.GatewaySeal
	err := s.write(ctx, func(tx *sql.Tx) error {
		out = store.GatewaySeal{}
		now, err := s.leaseNow(ctx, tx)
		if err != nil {
			return err
		}
		var (
			state   gyre.RolloutState
			revoked sql.NullInt64
			sealed  sql.NullInt64
		)
		if err := tx.QueryRowContext(ctx, `SELECT r.state, r.gw_revoked_us, r.gw_sealed_us FROM rollouts r WHERE r.id = $1`+
			s.d.LockRows, rolloutID).Scan(&state, &revoked, &sealed); err != nil {
			return notFound("rollout", err)
		}
		if !revoked.Valid || state == gyre.StateLeased || state == gyre.StateQueued {
			return fmt.Errorf("rollout %s is %s with a live gateway token: nothing to seal", rolloutID, state)
		}
		if !sealed.Valid {
			sealed = sql.NullInt64{Int64: now, Valid: true}
			if _, err := tx.ExecContext(ctx, `UPDATE rollouts SET gw_sealed_us = $2 WHERE id = $1`, rolloutID, now); err != nil {
				return fmt.Errorf("seal: %w", err)
			}
		}
		out.SealedAt = store.FromMicros(sealed.Int64)
		rows, err := tx.QueryContext(ctx, `SELECT t.replica_id, rp.flushed_through_us, rp.expires_us FROM gateway_touches t
			LEFT JOIN replicas rp ON rp.id = t.replica_id WHERE t.rollout_id = $1 ORDER BY t.replica_id`, rolloutID)
		if err != nil {
			return fmt.Errorf("read touches: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				replica          string
				flushed, expires sql.NullInt64
			)
			if err := rows.Scan(&replica, &flushed, &expires); err != nil {
				return fmt.Errorf("read touches: %w", err)
			}
			switch {
			case flushed.Valid && flushed.Int64 >= sealed.Int64:
			case !expires.Valid || expires.Int64 <= now:
				out.Lost = true
			default:
				out.Waiting = append(out.Waiting, replica)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read touches: %w", err)
		}
		out.Ready = len(out.Waiting) == 0
		return nil
	})
	if err != nil {
		return store.GatewaySeal{}, fmt.Errorf("seal gateway: %w", err)
	}
	return out, nil
}

// FinishReconciliation stores a rollout's reconciliation and the
// training-grade decision it completes.
func (s *Store) FinishReconciliation(ctx context.Context, r store.ReconcileResult) error {
	reasons, err := json.Marshal(nonNil(r.Reasons))
	if err != nil {
		return fmt.Errorf("finish reconciliation: %w", err)
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE rollouts SET reconciliation = $2, reconciliation_reason = $3,
			server_fingerprint = $4, training_grade = $5, not_training_grade = $6 WHERE id = $1`,
			r.RolloutID, r.Reconciliation, r.ReconciliationReason, nullJSON(r.ServerFingerprint), r.TrainingGrade, string(reasons))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			return fmt.Errorf("rollout %s: %w", r.RolloutID, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("finish reconciliation: %w", err)
	}
	return nil
}
