package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/gyrehq/gyre/internal/store"
)

// RecordGradingCall stores one judge call in grading_calls, never in
// gateway_calls: nothing that counts, lists or budgets a rollout's
// gateway traffic reads this table.
func (s *Store) RecordGradingCall(ctx context.Context, c store.GradingCall) error {
	var usage any
	if len(c.Usage) > 0 {
		usage = string(c.Usage)
	}
	var resp any
	if c.Response != nil {
		resp = c.Response
	}
	req := []byte(c.Request)
	if req == nil {
		req = []byte{}
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO grading_calls (id, tenant_id, subject_kind, subject_id, attempt,
			policy, upstream, model, status, error, request, response, usage, started_us, done_us)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
			c.ID, c.TenantID, c.SubjectKind, c.SubjectID, c.Attempt, c.Policy, c.Upstream, c.Model, c.Status,
			c.Error, req, resp, usage, store.Micros(c.StartedAt), store.Micros(c.DoneAt))
		if err != nil && s.d.IsUniqueViolation(err) {
			return fmt.Errorf("grading call %s: %w", c.ID, store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("record grading call: %w", err)
	}
	return nil
}

// GradingCalls lists a subject's grading calls, oldest first.
func (s *Store) GradingCalls(ctx context.Context, tenantID, subjectKind, subjectID string) ([]store.GradingCall, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT id, tenant_id, subject_kind, subject_id, attempt, policy, upstream,
		model, status, error, request, response, usage, started_us, done_us FROM grading_calls
		WHERE tenant_id = $1 AND subject_kind = $2 AND subject_id = $3 ORDER BY started_us, attempt, id`,
		tenantID, subjectKind, subjectID)
	if err != nil {
		return nil, fmt.Errorf("grading calls: %w", err)
	}
	defer rows.Close()
	var out []store.GradingCall
	for rows.Next() {
		var (
			c             store.GradingCall
			req, resp     []byte
			usage         sql.NullString
			started, done int64
		)
		if err := rows.Scan(&c.ID, &c.TenantID, &c.SubjectKind, &c.SubjectID, &c.Attempt, &c.Policy, &c.Upstream,
			&c.Model, &c.Status, &c.Error, &req, &resp, &usage, &started, &done); err != nil {
			return nil, fmt.Errorf("grading calls: %w", err)
		}
		c.Request = json.RawMessage(req)
		c.Response = resp
		if usage.Valid {
			c.Usage = json.RawMessage(usage.String)
		}
		c.StartedAt, c.DoneAt = store.FromMicros(started), store.FromMicros(done)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("grading calls: %w", err)
	}
	return out, nil
}
