package api

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

// Bounds of a promotion's body that SPEC §10 leaves open.
const (
	// maxPromotionDeadlineS bounds deadline_s: a year.
	maxPromotionDeadlineS = 366 * 24 * 3600
	// maxPromotionTasks bounds task_ids.
	maxPromotionTasks = 10_000
)

// promotionRoutes registers promotions (SPEC §10): an admin starts and
// cancels one; readers list and read them.
func (s *Server) promotionRoutes() {
	s.handle("POST /api/v1/promotions", adminOnly, s.createPromotion)
	s.handle("GET /api/v1/promotions", reader, s.listPromotions)
	s.handle("GET /api/v1/promotions/{id}", reader, s.getPromotion)
	s.handle("POST /api/v1/promotions/{id}/cancel", adminOnly, s.cancelPromotion)
}

// promotionBody is POST /api/v1/promotions. SuiteVersion takes a version
// name or a number (a version named by digits).
type promotionBody struct {
	AgentID         *string         `json:"agent_id"`
	Candidate       *string         `json:"candidate"`
	Baseline        *string         `json:"baseline"`
	Suite           *string         `json:"suite"`
	SuiteVersion    json.RawMessage `json:"suite_version"`
	TaskIDs         []string        `json:"task_ids"`
	Repetitions     *int            `json:"repetitions"`
	MinDelta        *float64        `json:"min_delta"`
	MaxExcludedRate *float64        `json:"max_excluded_rate"`
	DeadlineS       *float64        `json:"deadline_s"`
}

// promotionJSON is a promotion as the API shows it.
type promotionJSON struct {
	ID              string            `json:"id"`
	AgentID         string            `json:"agent_id"`
	Candidate       string            `json:"candidate"`
	Baseline        string            `json:"baseline"`
	Suite           *string           `json:"suite"`
	SuiteVersion    *string           `json:"suite_version"`
	TaskIDs         []string          `json:"task_ids"`
	Repetitions     int               `json:"repetitions"`
	MinDelta        float64           `json:"min_delta"`
	MaxExcludedRate float64           `json:"max_excluded_rate"`
	DeadlineS       float64           `json:"deadline_s"`
	Seed            uint64            `json:"seed"`
	State           string            `json:"state"`
	Reasons         []string          `json:"reasons"`
	Batches         promotionBatchIDs `json:"batches"`
	Evidence        json.RawMessage   `json:"evidence"`
	CreatedBy       string            `json:"created_by"`
	CreatedAt       time.Time         `json:"created_at"`
	DeadlineAt      time.Time         `json:"deadline_at"`
	DecidedAt       *time.Time        `json:"decided_at"`
}

// promotionBatchIDs are a promotion's batches, one per side.
type promotionBatchIDs struct {
	Baseline  *string `json:"baseline"`
	Candidate *string `json:"candidate"`
}

func toPromotionJSON(p store.Promotion) promotionJSON {
	return promotionJSON{
		ID: p.ID, AgentID: p.AgentID, Candidate: p.Candidate, Baseline: p.Baseline, Suite: p.Suite,
		SuiteVersion: p.SuiteVersion, TaskIDs: nonNilStrings(p.TaskIDs), Repetitions: p.Repetitions,
		MinDelta: p.MinDelta, MaxExcludedRate: p.MaxExcludedRate, DeadlineS: p.DeadlineS, Seed: p.Seed,
		State: p.State, Reasons: nonNilStrings(p.Reasons),
		Batches:  promotionBatchIDs{Baseline: p.BaselineBatchID, Candidate: p.CandidateBatchID},
		Evidence: rawOrNull(p.Evidence), CreatedBy: p.CreatedBy, CreatedAt: p.CreatedAt, DeadlineAt: p.DeadlineAt,
		DecidedAt: p.DecidedAt,
	}
}

// createPromotion is POST /api/v1/promotions: it checks the body,
// resolves the baseline, and stores the promotion with its tasks, both
// batches and its durable job in one transaction; the runner decides it.
func (s *Server) createPromotion(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	var body promotionBody
	if err := s.decodeJSON(r, &body); err != nil {
		return err
	}
	np, err := s.newPromotion(r.Context(), p.TenantID, body)
	if err != nil {
		return err
	}
	np.CreatedBy = promotion.ByKey(p.KeyID)
	pr, err := s.store.CreatePromotion(r.Context(), np)
	var fe *store.FieldError
	switch {
	case errors.Is(err, promotion.ErrRunning):
		return gyre.Errorf(gyre.CodePromotionRunning,
			"agent %q already has a running promotion; wait for its decision or cancel it", np.AgentID)
	case errors.As(err, &fe) && errors.Is(err, promotion.ErrAgentNotFound):
		return errUnknownAgent(np.AgentID)
	case errors.As(err, &fe) && errors.Is(err, store.ErrPolicyNotFound):
		return gyre.Errorf(gyre.CodePolicyNotFound, "no policy of that name in this tenant").AtPointer(fe.Pointer)
	case errors.As(err, &fe) && errors.Is(err, store.ErrNotFound):
		return gyre.Errorf(gyre.CodeInvalidBody, "no such %s in this tenant", pointerNoun(fe.Pointer)).AtPointer(fe.Pointer)
	case err != nil:
		return err
	}
	if s.rollout != nil {
		s.rollout.WorkQueued(p.TenantID, pr.AgentID)
	}
	if s.promos != nil {
		s.promos.Wake()
	}
	w.Header().Set("Location", "/api/v1/promotions/"+pr.ID)
	writeJSON(w, http.StatusCreated, toPromotionJSON(pr))
	return nil
}

func pointerNoun(ptr string) string {
	if ptr == "/suite" {
		return "suite version"
	}
	return "task"
}

func errUnknownAgent(agentID string) error {
	return gyre.Errorf(gyre.CodeInvalidBody, "gyre has never seen agent %q in this tenant (no turns, batches or rollouts)",
		agentID).AtPointer("/agent_id")
}

// newPromotion checks a promotion body, fills in SPEC §10's defaults,
// resolves the baseline and prepares the tasks; every refusal is 422
// with a pointer to the member at fault.
func (s *Server) newPromotion(ctx context.Context, tenantID string, body promotionBody) (store.NewPromotion, error) {
	bad := func(ptr, format string, args ...any) error {
		return gyre.Errorf(gyre.CodeInvalidBody, format, args...).AtPointer(ptr)
	}
	np := store.NewPromotion{
		TenantID: tenantID, Repetitions: promotion.DefaultRepetitions, MinDelta: promotion.DefaultMinDelta,
		MaxExcludedRate: promotion.DefaultMaxExcludedRate, DeadlineS: promotion.DefaultDeadlineS,
		BatchDeadlineS: gyre.DefaultDeadlineS, MaxAttempts: gyre.DefaultMaxAttempts, RetryOn: gyre.DefaultRetryOn,
	}
	if body.AgentID == nil {
		return np, bad("/agent_id", "agent_id is required")
	}
	if err := flywheel.ValidateAgentID(*body.AgentID); err != nil {
		return np, bad("/agent_id", "agent_id is not a valid flywheel/1 agent_id: %v", err)
	}
	np.AgentID = *body.AgentID
	if body.Candidate == nil || *body.Candidate == "" {
		return np, bad("/candidate", "candidate is required: the name of the policy to promote")
	}
	np.Candidate = *body.Candidate
	if body.Repetitions != nil {
		if *body.Repetitions < 1 || *body.Repetitions > promotion.MaxRepetitions {
			return np, bad("/repetitions", "repetitions must be an integer from 1 to %d", promotion.MaxRepetitions)
		}
		np.Repetitions = *body.Repetitions
	}
	if body.MinDelta != nil {
		if *body.MinDelta < -1 || *body.MinDelta > 1 {
			return np, bad("/min_delta", "min_delta must be a number from -1 to 1")
		}
		np.MinDelta = *body.MinDelta
	}
	if body.MaxExcludedRate != nil {
		if *body.MaxExcludedRate < 0 || *body.MaxExcludedRate > 1 {
			return np, bad("/max_excluded_rate", "max_excluded_rate must be a number from 0 to 1")
		}
		np.MaxExcludedRate = *body.MaxExcludedRate
	}
	if body.DeadlineS != nil {
		if !(*body.DeadlineS >= 1 && *body.DeadlineS <= maxPromotionDeadlineS) {
			return np, bad("/deadline_s", "deadline_s must be a number of seconds from 1 to %d", maxPromotionDeadlineS)
		}
		np.DeadlineS = *body.DeadlineS
	}
	version, err := suiteVersionOf(body.SuiteVersion)
	if err != nil {
		return np, err
	}
	switch {
	case body.Suite != nil && body.TaskIDs != nil:
		return np, bad("/task_ids", "give suite or task_ids, not both")
	case body.TaskIDs != nil:
		if version != nil {
			return np, bad("/suite_version", "suite_version goes with suite, not task_ids")
		}
		if len(body.TaskIDs) == 0 || len(body.TaskIDs) > maxPromotionTasks {
			return np, bad("/task_ids", "task_ids must list 1 to %d task ids", maxPromotionTasks)
		}
		seen := map[string]bool{}
		for i, id := range body.TaskIDs {
			ptr := "/task_ids/" + strconv.Itoa(i)
			if !isUUID(id) {
				return np, bad(ptr, "task ids are UUIDs")
			}
			if seen[id] {
				return np, bad(ptr, "task %s is listed twice; use repetitions for several rollouts per task", id)
			}
			seen[id] = true
		}
		np.TaskIDs = body.TaskIDs
	case body.Suite != nil:
		_, req, err := s.suiteTaskRequest(ctx, tenantID, *body.Suite, version)
		var ge *gyre.Error
		if errors.As(err, &ge) && ge.Code == gyre.CodeNotFound {
			// A suite the promotion cannot run is a bad body, not a
			// missing resource.
			ptr := "/suite"
			if ge.Pointer == "/version" {
				ptr = "/suite_version"
			}
			return np, bad(ptr, "%s", ge.Message)
		}
		if err != nil {
			return np, err
		}
		if len(req.Tasks) == 0 {
			return np, bad("/suite", "suite %q has no cases to run", *body.Suite)
		}
		np.SuiteTasks = &req
	default:
		return np, bad("/suite", "give suite or task_ids")
	}
	tasks := len(np.TaskIDs)
	if np.SuiteTasks != nil {
		tasks = len(np.SuiteTasks.Tasks)
	}
	if tasks*np.Repetitions > maxBatchRollouts {
		return np, bad("/repetitions", "each side may mint at most %d rollouts", maxBatchRollouts)
	}
	// The agent must be one gyre has seen, before its promoted policy is
	// read (an unknown agent has none).
	if seen, err := s.store.AgentSeen(ctx, tenantID, np.AgentID); err != nil {
		return np, err
	} else if !seen {
		return np, errUnknownAgent(np.AgentID)
	}
	promoted, err := s.store.AgentPolicy(ctx, tenantID, np.AgentID)
	if err != nil {
		return np, err
	}
	np.ExpectedPolicy = promoted
	if body.Baseline != nil && *body.Baseline != "" {
		np.Baseline = *body.Baseline
	} else {
		np.Baseline = promotion.BatchPolicy(nil, promoted, s.defaultPolicy())
		if np.Baseline == "" {
			return np, bad("/baseline", "agent %q has no promoted policy and there is no default policy: name the baseline", np.AgentID)
		}
		if promoted == nil || *promoted == "" {
			// The server's default is a baseline only if the tenant has it.
			if _, err := s.store.GetPolicy(ctx, tenantID, np.Baseline); errors.Is(err, store.ErrNotFound) {
				return np, bad("/baseline", "agent %q has no promoted policy and this tenant has no default policy %q: name the baseline",
					np.AgentID, np.Baseline)
			} else if err != nil {
				return np, err
			}
		}
	}
	if np.Baseline == np.Candidate {
		return np, bad("/candidate", "the candidate %q is the baseline: a policy cannot be compared with itself", np.Candidate)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return np, err
	}
	np.ID = id.String()
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return np, err
	}
	// 53 bits: the seed stays an exact JSON number for every client.
	np.Seed = binary.BigEndian.Uint64(seed[:]) & (1<<53 - 1)
	return np, nil
}

// suiteVersionOf reads suite_version: a version name, or a number naming
// a version by its digits; nil when absent.
func suiteVersionOf(raw json.RawMessage) (*string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		return &name, nil
	}
	var n uint64
	if err := json.Unmarshal(raw, &n); err == nil {
		v := strconv.FormatUint(n, 10)
		return &v, nil
	}
	return nil, gyre.Errorf(gyre.CodeInvalidBody, "suite_version must be a version name or number").AtPointer("/suite_version")
}

// getPromotion is GET /api/v1/promotions/{id}.
func (s *Server) getPromotion(w http.ResponseWriter, r *http.Request) error {
	pr, err := s.promotionOf(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toPromotionJSON(pr))
	return nil
}

// promotionOf reads the path's promotion in the caller's tenant.
func (s *Server) promotionOf(r *http.Request) (store.Promotion, error) {
	p, err := principal(r)
	if err != nil {
		return store.Promotion{}, err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return store.Promotion{}, err
	}
	if _, err := queryParams(r); err != nil {
		return store.Promotion{}, err
	}
	pr, err := s.store.GetPromotion(r.Context(), p.TenantID, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Promotion{}, gyre.Errorf(gyre.CodeNotFound, "no promotion %s in this tenant", id)
	}
	return pr, err
}

// promotionStates are the states GET /api/v1/promotions filters on.
var promotionStates = []string{promotion.StateRunning, promotion.StatePromoted, promotion.StateRejected, promotion.StateFailed}

// listPromotions is GET /api/v1/promotions?agent_id&state: newest first.
func (s *Server) listPromotions(w http.ResponseWriter, r *http.Request) error {
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
	var f store.PromotionFilter
	if v, ok := q["agent_id"]; ok {
		if !utf8.ValidString(v) || flywheel.ValidateAgentID(v) != nil {
			return gyre.Errorf(gyre.CodeInvalidQuery, "agent_id is not a valid flywheel/1 agent_id")
		}
		f.AgentID = v
	}
	if v, ok := q["state"]; ok {
		valid := false
		for _, st := range promotionStates {
			valid = valid || v == st
		}
		if !valid {
			return gyre.Errorf(gyre.CodeInvalidQuery, "state must be one of %v", promotionStates)
		}
		f.State = v
	}
	list, next, err := s.store.ListPromotions(r.Context(), p.TenantID, f, pg)
	if err != nil {
		return err
	}
	items := make([]promotionJSON, len(list))
	for i, pr := range list {
		items[i] = toPromotionJSON(pr)
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// cancelPromotion is POST /api/v1/promotions/{id}/cancel: the promotion
// ends failed (cancelled), its batches are cancelled, nothing is
// promoted. A promotion that already ended is 409 promotion_decided.
func (s *Server) cancelPromotion(w http.ResponseWriter, r *http.Request) error {
	pr, err := s.promotionOf(r)
	if err != nil {
		return err
	}
	ended, err := s.store.EndPromotion(r.Context(), pr.TenantID, pr.ID, store.PromotionEnd{
		State: promotion.StateFailed, Reasons: []string{promotion.ReasonCancelled}})
	if errors.Is(err, promotion.ErrDecided) {
		return gyre.Errorf(gyre.CodePromotionDecided, "promotion %s already ended; it cannot be cancelled", pr.ID)
	}
	if err != nil {
		return err
	}
	s.forgetCredentials()
	writeJSON(w, http.StatusOK, toPromotionJSON(ended))
	return nil
}
