package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/store"
)

// Bounds on a batch, so one request cannot queue without limit.
const (
	maxGroupSize      = 1024
	maxBatchAttempts  = 10
	maxBatchRollouts  = 100_000
	maxBatchDeadlineS = 7 * 24 * 3600
)

// batchBody is POST /api/v1/batches (SPEC §4.2).
type batchBody struct {
	AgentID     *string         `json:"agent_id"`
	TaskIDs     []string        `json:"task_ids"`
	Suite       *string         `json:"suite"`
	Version     *string         `json:"version"`
	GroupSize   *int            `json:"group_size"`
	DeadlineS   *float64        `json:"deadline_s"`
	Policy      *string         `json:"policy"`
	MaxAttempts *int            `json:"max_attempts"`
	RetryOn     []string        `json:"retry_on"`
	Limits      json.RawMessage `json:"limits"`
}

// batchLimits are the gateway limits a batch may set (SPEC §6.1).
type batchLimits struct {
	MaxCompletions        *int64   `json:"max_completions"`
	MaxTotalTokens        *int64   `json:"max_total_tokens"`
	MaxCostUSD            *float64 `json:"max_cost_usd"`
	MaxConcurrentRequests *int64   `json:"max_concurrent_requests"`
}

// batchView is a batch as the API shows it.
type batchView struct {
	BatchID        string                    `json:"batch_id"`
	AgentID        string                    `json:"agent_id"`
	Policy         *string                   `json:"policy"`
	GroupSize      int                       `json:"group_size"`
	DeadlineS      float64                   `json:"deadline_s"`
	MaxAttempts    int                       `json:"max_attempts"`
	RetryOn        []string                  `json:"retry_on"`
	Limits         json.RawMessage           `json:"limits"`
	TaskIDs        []string                  `json:"task_ids"`
	CreatedAt      time.Time                 `json:"created_at"`
	CancelledAt    *time.Time                `json:"cancelled_at"`
	Counts         map[gyre.RolloutState]int `json:"counts"`
	Groups         int                       `json:"groups"`
	GroupsComplete int                       `json:"groups_complete"`
	TrainingGrade  int                       `json:"training_grade"`
}

// createBatch is POST /api/v1/batches.
func (s *Server) createBatch(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	var body batchBody
	if err := s.decodeJSON(r, &body); err != nil {
		return err
	}
	nb, err := s.newBatch(r.Context(), p.TenantID, body)
	if err != nil {
		return err
	}
	if nb.IdempotencyKey, err = idempotencyKey(r); err != nil {
		return err
	}
	b, ids, existed, err := s.store.CreateBatch(r.Context(), nb)
	var fe *store.FieldError
	switch {
	case errors.As(err, &fe) && errors.Is(err, store.ErrPolicyNotFound):
		return gyre.Errorf(gyre.CodePolicyNotFound, "policy %q does not exist in this tenant", *nb.Policy).AtPointer(fe.Pointer)
	case errors.As(err, &fe) && errors.Is(err, store.ErrNotFound):
		return gyre.Errorf(gyre.CodeInvalidBody, "no such task in this tenant").AtPointer(fe.Pointer)
	case err != nil:
		return err
	}
	if !existed && s.rollout != nil {
		s.rollout.WorkQueued(p.TenantID, b.AgentID)
	}
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	writeJSON(w, status, map[string]any{"batch_id": b.ID, "rollout_ids": nonNilStrings(ids)})
	return nil
}

// newBatch checks a batch body and fills in SPEC §4.2's defaults.
func (s *Server) newBatch(ctx context.Context, tenantID string, body batchBody) (store.NewBatch, error) {
	bad := func(ptr, format string, args ...any) error {
		return gyre.Errorf(gyre.CodeInvalidBody, format, args...).AtPointer(ptr)
	}
	nb := store.NewBatch{
		TenantID: tenantID, GroupSize: gyre.DefaultGroupSize, DeadlineS: gyre.DefaultDeadlineS,
		MaxAttempts: gyre.DefaultMaxAttempts, RetryOn: gyre.DefaultRetryOn, Policy: body.Policy,
	}
	if body.AgentID == nil {
		return nb, bad("/agent_id", "agent_id is required")
	}
	if err := flywheel.ValidateAgentID(*body.AgentID); err != nil {
		return nb, bad("/agent_id", "agent_id is not a valid flywheel/1 agent_id: %v", err)
	}
	nb.AgentID = *body.AgentID
	switch {
	case body.TaskIDs != nil && body.Suite != nil:
		return nb, bad("/suite", "give task_ids or suite, not both")
	case body.TaskIDs != nil:
		if len(body.TaskIDs) == 0 {
			return nb, bad("/task_ids", "task_ids must not be empty")
		}
		if body.Version != nil {
			return nb, bad("/version", "version goes with suite, not task_ids")
		}
		seen := map[string]bool{}
		for i, id := range body.TaskIDs {
			ptr := fmt.Sprintf("/task_ids/%d", i)
			if !isUUID(id) {
				return nb, bad(ptr, "task ids are UUIDs")
			}
			if seen[id] {
				return nb, bad(ptr, "task %s is listed twice; use group_size for several rollouts per task", id)
			}
			seen[id] = true
		}
		nb.TaskIDs = body.TaskIDs
	case body.Suite != nil:
		ids, err := s.suiteTasks(ctx, tenantID, *body.Suite, body.Version)
		if err != nil {
			return nb, err
		}
		nb.TaskIDs = ids
	default:
		return nb, bad("/task_ids", "give task_ids or suite")
	}
	if body.GroupSize != nil {
		if *body.GroupSize < 1 || *body.GroupSize > maxGroupSize {
			return nb, bad("/group_size", "group_size must be an integer from 1 to %d", maxGroupSize)
		}
		nb.GroupSize = *body.GroupSize
	}
	if len(nb.TaskIDs)*nb.GroupSize > maxBatchRollouts {
		return nb, bad("/group_size", "a batch may mint at most %d rollouts", maxBatchRollouts)
	}
	if body.DeadlineS != nil {
		if !(*body.DeadlineS > 0 && *body.DeadlineS <= maxBatchDeadlineS) {
			return nb, bad("/deadline_s", "deadline_s must be a number of seconds above 0 and at most %d", maxBatchDeadlineS)
		}
		nb.DeadlineS = *body.DeadlineS
	}
	if body.MaxAttempts != nil {
		if *body.MaxAttempts < 1 || *body.MaxAttempts > maxBatchAttempts {
			return nb, bad("/max_attempts", "max_attempts must be an integer from 1 to %d", maxBatchAttempts)
		}
		nb.MaxAttempts = *body.MaxAttempts
	}
	if body.RetryOn != nil {
		for i, reason := range body.RetryOn {
			ptr := fmt.Sprintf("/retry_on/%d", i)
			if !slices.Contains(flywheel.ExclusionReasons, flywheel.ExclusionReason(reason)) {
				return nb, bad(ptr, "%q is not a flywheel/1 exclusion reason", reason)
			}
			if reason == string(flywheel.ExclusionDeadlineExceeded) {
				return nb, bad(ptr, "deadline_exceeded is never retried")
			}
		}
		nb.RetryOn = body.RetryOn
	}
	if body.Policy != nil && *body.Policy == "" {
		return nb, bad("/policy", "policy must be a policy name")
	}
	if len(body.Limits) > 0 {
		var lim batchLimits
		if err := decodeObject(body.Limits, &lim); err != nil {
			var ge *gyre.Error
			if errors.As(err, &ge) {
				return nb, ge.AtPointer("/limits" + ge.Pointer)
			}
			return nb, err
		}
		for name, v := range map[string]float64{
			"max_completions": i64(lim.MaxCompletions), "max_total_tokens": i64(lim.MaxTotalTokens),
			"max_concurrent_requests": i64(lim.MaxConcurrentRequests), "max_cost_usd": f64(lim.MaxCostUSD),
		} {
			if v < 0 {
				return nb, bad("/limits/"+name, "%s must not be negative", name)
			}
		}
		canon, err := json.Marshal(lim)
		if err != nil {
			return nb, err
		}
		nb.Limits = canon
	}
	return nb, nil
}

func i64(p *int64) float64 {
	if p == nil {
		return 0
	}
	return float64(*p)
}

func f64(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// getBatch is GET /api/v1/batches/{id}.
func (s *Server) getBatch(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	sum, err := s.store.BatchSummary(r.Context(), p.TenantID, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, batchView{
		BatchID: sum.ID, AgentID: sum.AgentID, Policy: sum.Policy, GroupSize: sum.GroupSize, DeadlineS: sum.DeadlineS,
		MaxAttempts: sum.MaxAttempts, RetryOn: nonNilStrings(sum.RetryOn), Limits: rawOrNull(sum.Limits),
		TaskIDs: nonNilStrings(sum.TaskIDs), CreatedAt: sum.CreatedAt, CancelledAt: sum.CancelledAt,
		Counts: sum.Counts, Groups: sum.Groups, GroupsComplete: sum.GroupsComplete, TrainingGrade: sum.TrainingGrade,
	})
	return nil
}

// cancelBatch is POST /api/v1/batches/{id}/cancel.
func (s *Server) cancelBatch(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	n, err := s.store.CancelBatch(r.Context(), p.TenantID, id)
	s.forgetCredentials()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"batch_id": id, "cancelled": n})
	return nil
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
