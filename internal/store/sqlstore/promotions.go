package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

const promotionCols = `id, tenant_id, agent_id, candidate, baseline, expected_policy, suite, suite_version, task_ids,
	repetitions, min_delta, max_excluded_rate, deadline_s, seed, state, reasons, baseline_batch_id, candidate_batch_id,
	evidence, created_by, created_us, deadline_us, decided_us`

// CreatePromotion stores a running promotion with its tasks, both batches
// and its job, in one transaction. The promotion row goes in first: the
// partial unique index on (tenant, agent) of running promotions refuses a
// second one before any task or batch is made, and on PostgreSQL a
// concurrent create blocks on the index entry until the first commits.
func (s *Store) CreatePromotion(ctx context.Context, np store.NewPromotion) (store.Promotion, error) {
	if err := checkNewPromotion(np); err != nil {
		return store.Promotion{}, fmt.Errorf("create promotion: %w", err)
	}
	if err := refuseNUL("/agent_id", np.AgentID, "/candidate", np.Candidate, "/baseline", np.Baseline,
		"/created_by", np.CreatedBy); err != nil {
		return store.Promotion{}, fmt.Errorf("create promotion: %w", err)
	}
	var out store.Promotion
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.now()
		if err := s.agentExists(ctx, tx, np.TenantID, np.AgentID); err != nil {
			return &store.FieldError{Pointer: "/agent_id", Err: err}
		}
		for _, p := range []struct{ ptr, name string }{{"/candidate", np.Candidate}, {"/baseline", np.Baseline}} {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM policies WHERE tenant_id = $1 AND name = $2`, np.TenantID, p.name).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return &store.FieldError{Pointer: p.ptr, Err: fmt.Errorf("policy %q: %w", p.name, store.ErrPolicyNotFound)}
			}
			if err != nil {
				return fmt.Errorf("check policy: %w", err)
			}
		}
		var suite, version *string
		if np.SuiteTasks != nil {
			suite, version = &np.SuiteTasks.SuiteName, &np.SuiteTasks.SuiteVersion
		}
		deadline := now + int64(math.Round(np.DeadlineS*1e6))
		if _, err := tx.ExecContext(ctx, `INSERT INTO promotions (id, tenant_id, agent_id, candidate, baseline,
			expected_policy, suite, suite_version, task_ids, repetitions, min_delta, max_excluded_rate, deadline_s, seed,
			state, reasons, created_by, created_us, deadline_us)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '[]', $9, $10, $11, $12, $13, $14, '[]', $15, $16, $17)`,
			np.ID, np.TenantID, np.AgentID, np.Candidate, np.Baseline, np.ExpectedPolicy, suite, version,
			np.Repetitions, np.MinDelta, np.MaxExcludedRate, np.DeadlineS, int64(np.Seed), promotion.StateRunning,
			np.CreatedBy, now, deadline); err != nil {
			if s.d.IsUniqueViolation(err) {
				return fmt.Errorf("agent %q: %w", np.AgentID, promotion.ErrRunning)
			}
			return fmt.Errorf("insert promotion: %w", err)
		}
		taskIDs := np.TaskIDs
		if np.SuiteTasks != nil {
			tasks, err := s.insertSuiteTasks(ctx, tx, *np.SuiteTasks, now)
			if errors.Is(err, store.ErrNotFound) {
				return &store.FieldError{Pointer: "/suite", Err: err}
			}
			if err != nil {
				return err
			}
			taskIDs = make([]string, len(tasks))
			for i, t := range tasks {
				taskIDs[i] = t.ID
			}
		}
		batchIDs := map[string]string{}
		for _, side := range []struct{ name, policy string }{
			{promotion.SideBaseline, np.Baseline}, {promotion.SideCandidate, np.Candidate},
		} {
			id, _, err := s.insertBatch(ctx, tx, store.NewBatch{
				TenantID: np.TenantID, AgentID: np.AgentID, Policy: &side.policy, TaskIDs: taskIDs,
				GroupSize: np.Repetitions, DeadlineS: np.BatchDeadlineS, MaxAttempts: np.MaxAttempts,
				RetryOn: np.RetryOn, PromotionID: &np.ID, PromotionSide: &side.name,
			}, now)
			if err != nil {
				return err
			}
			batchIDs[side.name] = id
		}
		ids, err := json.Marshal(taskIDs)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE promotions SET task_ids = $2, baseline_batch_id = $3,
			candidate_batch_id = $4 WHERE id = $1`, np.ID, string(ids), batchIDs[promotion.SideBaseline],
			batchIDs[promotion.SideCandidate]); err != nil {
			return fmt.Errorf("record promotion batches: %w", err)
		}
		if err := s.enqueue(ctx, tx, store.JobPromotion, np.ID, now); err != nil {
			return err
		}
		out, err = s.promotion(ctx, tx, `id = $1`, np.ID)
		return err
	})
	if err != nil {
		return store.Promotion{}, fmt.Errorf("create promotion: %w", err)
	}
	if len(s.d.AnalyzeRollouts) > 0 && 2*len(out.TaskIDs)*out.Repetitions >= analyzeAfterRollouts {
		_ = s.analyzeRollouts(ctx) // best effort, as in CreateBatch
	}
	return out, nil
}

func checkNewPromotion(np store.NewPromotion) error {
	switch {
	case np.ID == "" || np.TenantID == "" || np.AgentID == "":
		return errors.New("id, tenant and agent are required")
	case (np.SuiteTasks == nil) == (len(np.TaskIDs) == 0):
		return errors.New("give suite tasks or task ids, exactly one")
	case np.SuiteTasks != nil && len(np.SuiteTasks.Tasks) == 0:
		return errors.New("the suite has no tasks")
	case np.Repetitions < 1 || np.MaxAttempts < 1 || np.BatchDeadlineS <= 0 || !(np.DeadlineS > 0):
		return errors.New("repetitions, attempts and deadlines must be positive")
	case np.Seed > math.MaxInt64:
		return errors.New("seed does not fit the store")
	}
	if np.SuiteTasks != nil {
		for i, nt := range np.SuiteTasks.Tasks {
			if err := checkNewTask(nt); err != nil {
				return fmt.Errorf("task %d: %w", i, err)
			}
		}
	}
	return nil
}

// AgentSeen reports whether the agent has a row in the tenant.
func (s *Store) AgentSeen(ctx context.Context, tenantID, agentID string) (bool, error) {
	err := s.agentExists(ctx, s.reader, tenantID, agentID)
	if errors.Is(err, promotion.ErrAgentNotFound) {
		return false, nil
	}
	return err == nil, err
}

// GetPromotion returns one of the tenant's promotions.
func (s *Store) GetPromotion(ctx context.Context, tenantID, id string) (store.Promotion, error) {
	return s.promotion(ctx, s.reader, `tenant_id = $2 AND id = $1`, id, tenantID)
}

// PromotionByID returns a promotion whatever its tenant.
func (s *Store) PromotionByID(ctx context.Context, id string) (store.Promotion, error) {
	return s.promotion(ctx, s.reader, `id = $1`, id)
}

func (s *Store) promotion(ctx context.Context, q querier, where string, args ...any) (store.Promotion, error) {
	p, err := scanPromotion(q.QueryRowContext(ctx, `SELECT `+promotionCols+` FROM promotions WHERE `+where, args...))
	if err != nil {
		return store.Promotion{}, notFound("promotion", err)
	}
	return p, nil
}

func scanPromotion(row interface{ Scan(...any) error }) (store.Promotion, error) {
	var (
		p                 store.Promotion
		taskIDs, reasons  string
		evidence          sql.NullString
		seed              int64
		created, deadline int64
		decided           sql.NullInt64
	)
	if err := row.Scan(&p.ID, &p.TenantID, &p.AgentID, &p.Candidate, &p.Baseline, &p.ExpectedPolicy, &p.Suite,
		&p.SuiteVersion, &taskIDs, &p.Repetitions, &p.MinDelta, &p.MaxExcludedRate, &p.DeadlineS, &seed, &p.State,
		&reasons, &p.BaselineBatchID, &p.CandidateBatchID, &evidence, &p.CreatedBy, &created, &deadline,
		&decided); err != nil {
		return store.Promotion{}, err
	}
	if err := json.Unmarshal([]byte(taskIDs), &p.TaskIDs); err != nil {
		return store.Promotion{}, fmt.Errorf("promotion task_ids: %w", err)
	}
	if err := json.Unmarshal([]byte(reasons), &p.Reasons); err != nil {
		return store.Promotion{}, fmt.Errorf("promotion reasons: %w", err)
	}
	if evidence.Valid {
		p.Evidence = json.RawMessage(evidence.String)
	}
	p.Seed = uint64(seed)
	p.CreatedAt = store.FromMicros(created)
	p.DeadlineAt = store.FromMicros(deadline)
	p.DecidedAt = timePtr(decided)
	return p, nil
}

// ListPromotions lists the tenant's promotions, newest first (ids are
// UUIDv7, so id order is creation order).
func (s *Store) ListPromotions(ctx context.Context, tenantID string, f store.PromotionFilter, p store.Page) ([]store.Promotion, string, error) {
	cur := listCursor(tenantID, "promotions", append([]string{f.AgentID, f.State}, windowScope(f.Since, f.Until)...)...)
	after, err := cur.decodeID(p.Cursor)
	if err != nil {
		return nil, "", err
	}
	n := limit(p)
	q := `SELECT ` + promotionCols + ` FROM promotions WHERE tenant_id = $1`
	args := []any{tenantID}
	if f.AgentID != "" {
		args = append(args, f.AgentID)
		q += fmt.Sprintf(" AND agent_id = $%d", len(args))
	}
	if f.State != "" {
		args = append(args, f.State)
		q += fmt.Sprintf(" AND state = $%d", len(args))
	}
	if !f.Since.IsZero() {
		args = append(args, f.Since.UnixMicro())
		q += fmt.Sprintf(" AND created_us >= $%d", len(args))
	}
	if !f.Until.IsZero() {
		args = append(args, f.Until.UnixMicro())
		q += fmt.Sprintf(" AND created_us < $%d", len(args))
	}
	if after != "" {
		args = append(args, after)
		q += fmt.Sprintf(" AND id < $%d", len(args))
	}
	args = append(args, n+1)
	q += fmt.Sprintf(" ORDER BY id DESC LIMIT $%d", len(args))
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list promotions: %w", err)
	}
	out := []store.Promotion{}
	err = eachRow(rows, func() error {
		pr, err := scanPromotion(rows)
		if err != nil {
			return err
		}
		out = append(out, pr)
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("list promotions: %w", err)
	}
	next := ""
	if len(out) > n {
		out = out[:n]
		next = cur.encode(out[n-1].ID)
	}
	return out, next, nil
}

// TallyPromotion counts the rollouts of the promotion's two batches by
// task, side and ending, leaving out replaced rollouts (their
// replacement counts instead).
func (s *Store) TallyPromotion(ctx context.Context, id string) (store.PromotionTally, error) {
	p, err := s.PromotionByID(ctx, id)
	if err != nil {
		return store.PromotionTally{}, fmt.Errorf("tally promotion: %w", err)
	}
	tally := store.PromotionTally{Tasks: make([]store.TaskTally, len(p.TaskIDs))}
	byTask := make(map[string]*store.TaskTally, len(p.TaskIDs))
	for i, tid := range p.TaskIDs {
		tally.Tasks[i].TaskID = tid
		byTask[tid] = &tally.Tasks[i]
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT b.promotion_side, r.task_id, t.case_id, r.state,
		r.exclusion_reason IS NOT NULL, COALESCE(r.outcome, ''), COUNT(*)
		FROM batches b JOIN rollouts r ON r.batch_id = b.id JOIN tasks t ON t.id = r.task_id
		WHERE b.promotion_id = $1 AND b.tenant_id = $2 AND r.replaced_by IS NULL
		GROUP BY 1, 2, 3, 4, 5, 6`, id, p.TenantID)
	if err != nil {
		return store.PromotionTally{}, fmt.Errorf("tally promotion: %w", err)
	}
	err = eachRow(rows, func() error {
		var (
			side, taskID, caseID, state, outcome string
			excluded                             bool
			n                                    int
		)
		if err := rows.Scan(&side, &taskID, &caseID, &state, &excluded, &outcome, &n); err != nil {
			return err
		}
		tt := byTask[taskID]
		if tt == nil {
			return fmt.Errorf("rollout of task %s, which the promotion does not list", taskID)
		}
		tt.CaseID = caseID
		st := &tt.Baseline
		if side == promotion.SideCandidate {
			st = &tt.Candidate
		}
		switch gyre.RolloutState(state) {
		case gyre.StateQueued, gyre.StateLeased, gyre.StateSubmitted:
			tally.Open += n
			return nil
		case gyre.StateGraded:
			switch {
			case excluded:
				st.Excluded += n
			case outcome == "passed":
				st.Passed += n
			case outcome == "failed":
				st.Failed += n
			default:
				st.Unscored += n
			}
		case gyre.StateDeadlineExceeded:
			st.Excluded += n
		default: // abandoned, cancelled (released rollouts are replaced)
			st.Abandoned += n
		}
		st.Total += n
		return nil
	})
	if err != nil {
		return store.PromotionTally{}, fmt.Errorf("tally promotion: %w", err)
	}
	return tally, nil
}

// EndPromotion ends a running promotion once. The UPDATE's WHERE state =
// 'running' is the compare: on PostgreSQL a concurrent end blocks on the
// row lock and finds the state changed once the first commits.
func (s *Store) EndPromotion(ctx context.Context, tenantID, id string, e store.PromotionEnd) (store.Promotion, error) {
	switch e.State {
	case promotion.StatePromoted, promotion.StateRejected, promotion.StateFailed:
	default:
		return store.Promotion{}, fmt.Errorf("end promotion: %q is not an end state", e.State)
	}
	var out store.Promotion
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.now()
		reasons, err := json.Marshal(nonNil(e.Reasons))
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE promotions SET state = $3, reasons = $4, evidence = $5, decided_us = $6
			WHERE tenant_id = $1 AND id = $2 AND state = 'running'`, tenantID, id, e.State, string(reasons),
			nullJSON(e.Evidence), now)
		if err != nil {
			return fmt.Errorf("end promotion: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			if _, err := s.promotion(ctx, tx, `tenant_id = $2 AND id = $1`, id, tenantID); err != nil {
				return err
			}
			return promotion.ErrDecided
		}
		p, err := s.promotion(ctx, tx, `id = $1`, id)
		if err != nil {
			return err
		}
		failed := e.State == promotion.StateFailed
		if e.State == promotion.StatePromoted {
			_, err := s.setPromotedPolicy(ctx, tx, promotion.Change{TenantID: tenantID, AgentID: p.AgentID,
				Expected: p.ExpectedPolicy, Policy: p.Candidate, SetBy: promotion.ByPromotion(id), PromotionID: &id}, now)
			switch {
			case errors.Is(err, promotion.ErrPolicyChanged):
				// The agent's policy moved since the promotion measured
				// it: promoting would overwrite a change nobody compared.
				if _, err := tx.ExecContext(ctx, `UPDATE promotions SET state = $2, reasons = $3 WHERE id = $1`,
					id, promotion.StateFailed, `["`+promotion.ReasonBaselineChanged+`"]`); err != nil {
					return fmt.Errorf("end promotion: %w", err)
				}
			case err != nil:
				return err
			}
		}
		if failed {
			for _, b := range []*string{p.BaselineBatchID, p.CandidateBatchID} {
				if b == nil {
					continue
				}
				if _, err := s.cancelBatch(ctx, tx, tenantID, *b, now); err != nil {
					return fmt.Errorf("cancel promotion batch: %w", err)
				}
			}
		}
		out, err = s.promotion(ctx, tx, `id = $1`, id)
		return err
	})
	if err != nil {
		return store.Promotion{}, fmt.Errorf("end promotion %s: %w", id, err)
	}
	return out, nil
}
