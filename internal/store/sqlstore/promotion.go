package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

// SetPromotedPolicy compares-and-sets the agent's promoted policy and
// appends the change to its history, in one transaction. The UPDATE's
// WHERE clause is the compare: on PostgreSQL a concurrent change blocks on
// the row lock and re-evaluates it after the first commits, so of several
// changes expecting the same policy exactly one matches; on SQLite writes
// are serialised.
func (s *Store) SetPromotedPolicy(ctx context.Context, c promotion.Change) (promotion.Entry, error) {
	if err := refuseNUL("/policy", c.Policy, "/set_by", c.SetBy, "/promotion_id", derefOr(c.PromotionID)); err != nil {
		return promotion.Entry{}, err
	}
	var e promotion.Entry
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		e, err = s.setPromotedPolicy(ctx, tx, c, s.now())
		return err
	})
	return e, err
}

// setPromotedPolicy is SetPromotedPolicy inside tx.
func (s *Store) setPromotedPolicy(ctx context.Context, tx *sql.Tx, c promotion.Change, now int64) (promotion.Entry, error) {
	var res sql.Result
	var err error
	if c.Expected == nil {
		res, err = tx.ExecContext(ctx, `UPDATE agents SET promoted_policy = $3
			WHERE tenant_id = $1 AND agent_id = $2 AND promoted_policy IS NULL`, c.TenantID, c.AgentID, c.Policy)
	} else {
		res, err = tx.ExecContext(ctx, `UPDATE agents SET promoted_policy = $3
			WHERE tenant_id = $1 AND agent_id = $2 AND promoted_policy = $4`, c.TenantID, c.AgentID, c.Policy, *c.Expected)
	}
	if err != nil {
		return promotion.Entry{}, fmt.Errorf("set promoted policy: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return promotion.Entry{}, fmt.Errorf("set promoted policy: %w", err)
	} else if n == 0 {
		if err := s.agentExists(ctx, tx, c.TenantID, c.AgentID); err != nil {
			return promotion.Entry{}, err
		}
		return promotion.Entry{}, fmt.Errorf("set promoted policy: %w", promotion.ErrPolicyChanged)
	}
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM policies WHERE tenant_id = $1 AND name = $2`, c.TenantID, c.Policy).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return promotion.Entry{}, fmt.Errorf("set promoted policy %q: %w", c.Policy, promotion.ErrPolicyNotFound)
	} else if err != nil {
		return promotion.Entry{}, fmt.Errorf("check policy: %w", err)
	}
	var seq int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM agent_policy_history
		WHERE tenant_id = $1 AND agent_id = $2`, c.TenantID, c.AgentID).Scan(&seq); err != nil {
		return promotion.Entry{}, fmt.Errorf("next history entry: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO agent_policy_history
		(tenant_id, agent_id, seq, policy, set_by, set_us, promotion_id) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		c.TenantID, c.AgentID, seq, c.Policy, c.SetBy, now, c.PromotionID); err != nil {
		return promotion.Entry{}, fmt.Errorf("record history entry: %w", err)
	}
	return promotion.Entry{Seq: seq, Policy: c.Policy, SetBy: c.SetBy, SetAt: store.FromMicros(now), PromotionID: c.PromotionID}, nil
}

// RollbackPolicy pops the newest live history entry and restores the one
// before it. The agents row is locked first (an UPDATE that changes
// nothing), so concurrent rollbacks on PostgreSQL pop one entry each.
func (s *Store) RollbackPolicy(ctx context.Context, tenantID, agentID, by string) (promotion.Entry, error) {
	if err := refuseNUL("/set_by", by); err != nil {
		return promotion.Entry{}, err
	}
	var restored promotion.Entry
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE agents SET promoted_policy = promoted_policy
			WHERE tenant_id = $1 AND agent_id = $2`, tenantID, agentID)
		if err != nil {
			return fmt.Errorf("lock agent: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("lock agent: %w", err)
		} else if n == 0 {
			return fmt.Errorf("rollback policy: %w", promotion.ErrAgentNotFound)
		}
		live, err := s.history(ctx, tx, tenantID, agentID, `AND rolled_back_us IS NULL ORDER BY seq DESC LIMIT 2`)
		if err != nil {
			return err
		}
		if len(live) < 2 {
			return fmt.Errorf("rollback policy: %w", promotion.ErrNoPreviousPolicy)
		}
		now := s.now()
		if _, err := tx.ExecContext(ctx, `UPDATE agent_policy_history SET rolled_back_us = $4, rolled_back_by = $5
			WHERE tenant_id = $1 AND agent_id = $2 AND seq = $3`, tenantID, agentID, live[0].Seq, now, by); err != nil {
			return fmt.Errorf("pop history entry: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE agents SET promoted_policy = $3 WHERE tenant_id = $1 AND agent_id = $2`,
			tenantID, agentID, live[1].Policy); err != nil {
			return fmt.Errorf("restore promoted policy: %w", err)
		}
		restored = live[1]
		return nil
	})
	return restored, err
}

// PolicyHistory lists the agent's history entries, oldest first.
func (s *Store) PolicyHistory(ctx context.Context, tenantID, agentID string) ([]promotion.Entry, error) {
	return s.history(ctx, s.reader, tenantID, agentID, `ORDER BY seq`)
}

func (s *Store) history(ctx context.Context, q querier, tenantID, agentID, tail string) ([]promotion.Entry, error) {
	rows, err := q.QueryContext(ctx, `SELECT seq, policy, set_by, set_us, promotion_id, rolled_back_us, rolled_back_by
		FROM agent_policy_history WHERE tenant_id = $1 AND agent_id = $2 `+tail, tenantID, agentID)
	if err != nil {
		return nil, fmt.Errorf("policy history: %w", err)
	}
	defer rows.Close()
	var out []promotion.Entry
	for rows.Next() {
		var (
			e      promotion.Entry
			set    int64
			promo  sql.NullString
			backUS sql.NullInt64
			backBy sql.NullString
		)
		if err := rows.Scan(&e.Seq, &e.Policy, &e.SetBy, &set, &promo, &backUS, &backBy); err != nil {
			return nil, fmt.Errorf("policy history: %w", err)
		}
		e.SetAt = store.FromMicros(set)
		if promo.Valid {
			e.PromotionID = &promo.String
		}
		e.RolledBackAt = timePtr(backUS)
		if backBy.Valid {
			e.RolledBackBy = &backBy.String
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("policy history: %w", err)
	}
	return out, nil
}

// agentExists is nil when gyre has seen the agent in the tenant, else
// promotion.ErrAgentNotFound.
func (s *Store) agentExists(ctx context.Context, q querier, tenantID, agentID string) error {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM agents WHERE tenant_id = $1 AND agent_id = $2`, tenantID, agentID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("agent %q: %w", agentID, promotion.ErrAgentNotFound)
	}
	if err != nil {
		return fmt.Errorf("check agent: %w", err)
	}
	return nil
}
