package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/promotion"
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

// batchSummaryView is a batch as GET /api/v1/batches lists it: its
// settings, progress and results (SPEC §4.8).
type batchSummaryView struct {
	BatchID         string                    `json:"batch_id"`
	AgentID         string                    `json:"agent_id"`
	State           gyre.BatchState           `json:"state"`
	Policy          *string                   `json:"policy"`
	GroupSize       int                       `json:"group_size"`
	DeadlineS       float64                   `json:"deadline_s"`
	MaxAttempts     int                       `json:"max_attempts"`
	RetryOn         []string                  `json:"retry_on"`
	Limits          json.RawMessage           `json:"limits"`
	Tasks           int                       `json:"tasks"`
	CreatedAt       time.Time                 `json:"created_at"`
	CancelledAt     *time.Time                `json:"cancelled_at"`
	Counts          map[gyre.RolloutState]int `json:"counts"`
	Groups          int                       `json:"groups"`
	GroupsComplete  int                       `json:"groups_complete"`
	GroupsCancelled int                       `json:"groups_cancelled"`
	Outcomes        outcomesView              `json:"outcomes"`
	// PassRate is passed ÷ (passed + failed) with its Wilson 95%
	// interval; null when no rollout passed or failed.
	PassRate *grade.Estimate `json:"pass_rate"`
	// MeanReward is the mean reward of graded rollouts without an
	// exclusion that have one; null when none.
	MeanReward *meanView `json:"mean_reward"`
	// Finished, TrainingGrade and TrainingGradeYield (training grade ÷
	// finished, null when nothing finished) follow store.BatchSummary.
	Finished                int            `json:"finished"`
	TrainingGrade           int            `json:"training_grade"`
	TrainingGradeYield      *float64       `json:"training_grade_yield"`
	NotTrainingGradeReasons map[string]int `json:"not_training_grade_reasons"`
	// PromotionID and PromotionSide (baseline or candidate) tag a batch a
	// promotion created; null otherwise.
	PromotionID   *string `json:"promotion_id"`
	PromotionSide *string `json:"promotion_side"`
}

// outcomesView counts graded rollouts: passed, failed and unscored (every
// deciding grader abstained) among those without an exclusion, and
// excluded ones apart.
type outcomesView struct {
	Passed   int `json:"passed"`
	Failed   int `json:"failed"`
	Unscored int `json:"unscored"`
	Excluded int `json:"excluded"`
}

// meanView is a mean over N items.
type meanView struct {
	Value float64 `json:"value"`
	N     int     `json:"n"`
}

// batchView is GET /api/v1/batches/{id}: the summary and the task ids.
type batchView struct {
	batchSummaryView
	TaskIDs []string `json:"task_ids"`
}

// toBatchSummaryView shows a store summary, computing the pass rate's
// Wilson interval and the training-grade yield.
func toBatchSummaryView(sum store.BatchSummary) batchSummaryView {
	v := batchSummaryView{
		BatchID: sum.ID, AgentID: sum.AgentID, State: sum.State, Policy: sum.Policy, GroupSize: sum.GroupSize,
		DeadlineS: sum.DeadlineS, MaxAttempts: sum.MaxAttempts, RetryOn: nonNilStrings(sum.RetryOn),
		Limits: rawOrNull(sum.Limits), Tasks: len(sum.TaskIDs), CreatedAt: sum.CreatedAt, CancelledAt: sum.CancelledAt,
		Counts: sum.Counts, Groups: sum.Groups, GroupsComplete: sum.GroupsComplete, GroupsCancelled: sum.GroupsCancelled,
		Outcomes:      outcomesView{Passed: sum.Passed, Failed: sum.Failed, Unscored: sum.Unscored, Excluded: sum.Excluded},
		Finished:      sum.Finished,
		TrainingGrade: sum.TrainingGrade, NotTrainingGradeReasons: sum.NotTrainingGrade,
		PromotionID: sum.PromotionID, PromotionSide: sum.PromotionSide,
	}
	if v.Counts == nil {
		v.Counts = map[gyre.RolloutState]int{}
	}
	if v.NotTrainingGradeReasons == nil {
		v.NotTrainingGradeReasons = map[string]int{}
	}
	if n := sum.Passed + sum.Failed; n > 0 {
		lo, hi := grade.Wilson(sum.Passed, n)
		v.PassRate = &grade.Estimate{Value: float64(sum.Passed) / float64(n), Interval: grade.Interval{Low: lo, High: hi}, N: n}
	}
	if sum.MeanReward != nil {
		v.MeanReward = &meanView{Value: *sum.MeanReward, N: sum.RewardN}
	}
	if sum.Finished > 0 {
		y := float64(sum.TrainingGrade) / float64(sum.Finished)
		v.TrainingGradeYield = &y
	}
	return v
}

// Batch warnings in a 201 answer: the batch is created, but something
// will make its rollouts fail (SPEC §6.1).
const (
	// warnNoPolicy: neither the batch, nor the agent's promoted policy,
	// nor the server's default names a policy the tenant has, so every LLM
	// call of its rollouts will be answered 503 no_policy.
	warnNoPolicy = "no_policy"
)

// resolveBatchPolicy fills in the policy of a batch whose body names
// none: the agent's promoted policy, else the server's default (SPEC
// §6.1), resolved once here and stored on the batch, so a later promotion
// or rollback never switches its running rollouts. A name the tenant has
// no policy for is not stored (the gateway then answers no_policy, or the
// server's default once the tenant creates it) and is warned about.
func (s *Server) resolveBatchPolicy(ctx context.Context, tenantID string, nb *store.NewBatch) ([]string, error) {
	if nb.Policy != nil {
		return nil, nil // the store checks that it exists
	}
	promoted, err := s.store.AgentPolicy(ctx, tenantID, nb.AgentID)
	if err != nil {
		return nil, err
	}
	name := promotion.BatchPolicy(nil, promoted, s.defaultPolicy())
	if name == "" {
		return []string{warnNoPolicy}, nil
	}
	if _, err := s.store.GetPolicy(ctx, tenantID, name); errors.Is(err, store.ErrNotFound) {
		return []string{warnNoPolicy}, nil
	} else if err != nil {
		return nil, err
	}
	nb.Policy = &name
	return nil, nil
}

// storedBatchWarnings lists what will make an existing batch's rollouts
// fail: no stored policy, and no server default the tenant has.
func (s *Server) storedBatchWarnings(ctx context.Context, tenantID string, policy *string) ([]string, error) {
	if policy != nil {
		return nil, nil
	}
	name := s.defaultPolicy()
	if name == "" {
		return []string{warnNoPolicy}, nil
	}
	if _, err := s.store.GetPolicy(ctx, tenantID, name); errors.Is(err, store.ErrNotFound) {
		return []string{warnNoPolicy}, nil
	} else if err != nil {
		return nil, err
	}
	return nil, nil
}

// defaultPolicy is the server's default policy, "" when none.
func (s *Server) defaultPolicy() string {
	if s.gateway == nil {
		return ""
	}
	return s.gateway.DefaultPolicy()
}

// createBatch is POST /api/v1/batches.
func (s *Server) createBatch(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	if err := requireJSON(r); err != nil {
		return err
	}
	raw, err := readBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	var body batchBody
	if err := decodeObject(raw, &body); err != nil {
		return err
	}
	nb, err := s.newBatch(r.Context(), p.TenantID, body)
	if err != nil {
		return err
	}
	warnings, err := s.resolveBatchPolicy(r.Context(), p.TenantID, &nb)
	if err != nil {
		return err
	}
	if nb.IdempotencyKey, err = idempotencyKey(r); err != nil {
		return err
	}
	if nb.IdempotencyKey != "" {
		// The same key with another body is refused (SPEC §4.2); bodies
		// compare as canonical JSON, so spacing and member order do not
		// matter.
		if nb.RequestSHA256, err = jcs.Hash(raw); err != nil {
			return gyre.Errorf(gyre.CodeInvalidBody, "body is not canonicalizable JSON: %v", err)
		}
	}
	b, ids, existed, err := s.store.CreateBatch(r.Context(), nb)
	var fe *store.FieldError
	switch {
	case errors.Is(err, store.ErrIdempotencyKeyReused):
		return gyre.Errorf(gyre.CodeIdempotencyKeyReused,
			"this Idempotency-Key was used in the last 24 hours with a different body; send a new key for a new batch")
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
	if existed {
		// The original batch's policy stands, whatever was resolved now.
		if warnings, err = s.storedBatchWarnings(r.Context(), p.TenantID, b.Policy); err != nil {
			return err
		}
	}
	writeJSON(w, status, createdBatch{BatchID: b.ID, RolloutIDs: nonNilStrings(ids), Warnings: warnings})
	return nil
}

// createdBatch is the answer to POST /api/v1/batches. Warnings is absent
// when there is none.
type createdBatch struct {
	BatchID    string   `json:"batch_id"`
	RolloutIDs []string `json:"rollout_ids"`
	Warnings   []string `json:"warnings,omitempty"`
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
	if len(body.Limits) > 0 && string(body.Limits) != "null" {
		lim, err := gyre.DecodeLimits(body.Limits)
		if err != nil {
			var ge *gyre.Error
			if errors.As(err, &ge) {
				return nb, ge.AtPointer("/limits" + ge.Pointer)
			}
			return nb, err
		}
		canon, err := json.Marshal(lim)
		if err != nil {
			return nb, err
		}
		nb.Limits = canon
	}
	return nb, nil
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
	writeJSON(w, http.StatusOK, batchView{batchSummaryView: toBatchSummaryView(sum), TaskIDs: nonNilStrings(sum.TaskIDs)})
	return nil
}

// listBatches is GET /api/v1/batches?agent_id&state: batch summaries,
// newest first.
func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	q, err := queryParams(r, "agent_id", "state", "limit", "cursor")
	if err != nil {
		return err
	}
	pg, err := page(q)
	if err != nil {
		return err
	}
	var f store.BatchFilter
	if v, ok := q["agent_id"]; ok {
		if !utf8.ValidString(v) {
			return gyre.Errorf(gyre.CodeInvalidQuery, "agent_id is not valid UTF-8")
		}
		if err := flywheel.ValidateAgentID(v); err != nil {
			return gyre.Errorf(gyre.CodeInvalidQuery, "agent_id is not a valid flywheel/1 agent_id: %v", err)
		}
		f.AgentID = v
	}
	if v, ok := q["state"]; ok {
		f.State = gyre.BatchState(v)
		if !f.State.Valid() {
			return gyre.Errorf(gyre.CodeInvalidQuery, "state must be one of %v", gyre.BatchStates)
		}
	}
	sums, next, err := s.store.ListBatches(r.Context(), p.TenantID, f, pg)
	if err != nil {
		return err
	}
	items := make([]batchSummaryView, len(sums))
	for i, sum := range sums {
		items[i] = toBatchSummaryView(sum)
	}
	writeJSON(w, http.StatusOK, newList(items, next))
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
