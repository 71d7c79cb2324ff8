package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/rollout"
	"github.com/gyrehq/gyre/internal/store"
)

// regradeRoutes registers regrading (SPEC §8): a rollout, a page of a
// batch, an experiment's runs. A regrade never runs the agent or the
// harness again.
func (s *Server) regradeRoutes() {
	s.handle("POST /api/v1/rollouts/{id}/regrade", adminOnly, s.regradeRollout)
	s.handle("POST /api/v1/batches/{id}/regrade", adminOnly, s.regradeBatch)
	s.handle("POST /api/v1/experiments/{id}/regrade", evaluatorOnly, s.regradeExperiment)
}

// regradeGraders reads a regrade's optional body {"graders": […]}: the
// graders to use, validated like a suite's (with the command allow-list),
// or nil — no body, no member, or null — for the subject's own frozen
// graders. A bad declaration is 422 at its pointer.
func (s *Server) regradeGraders(r *http.Request, tenantID string) (*grade.Suite, error) {
	if err := requireJSON(r); err != nil {
		return nil, err
	}
	b, err := readBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	var body struct {
		Graders json.RawMessage `json:"graders"`
	}
	if err := decodeObject(b, &body); err != nil {
		return nil, err
	}
	if len(body.Graders) == 0 || string(body.Graders) == "null" {
		return nil, nil
	}
	specs, err := grade.ParseSpecsAt(body.Graders, "/graders")
	if err != nil {
		return nil, err
	}
	if err := s.checkCommands(r.Context(), tenantID, specs); err != nil {
		return nil, err
	}
	suite, err := grade.Compile(specs)
	if err != nil {
		return nil, err
	}
	return &suite, nil
}

// verdictSetView is one verdict set as the API shows it: in a rollout's
// verdict_history and in a regrade's answer.
type verdictSetView struct {
	GradedAt time.Time `json:"graded_at"`
	// Source is "task" (the task's frozen graders) or "request" (a
	// regrade's graders, shown in Graders; null otherwise).
	Source         string          `json:"source"`
	GraderVersions json.RawMessage `json:"grader_versions"`
	Graders        json.RawMessage `json:"graders"`
	Verdicts       json.RawMessage `json:"verdicts"`
	Reward         *float64        `json:"reward"`
}

// verdictSetViewOf shows a stored set with its reward (SPEC §9).
func verdictSetViewOf(v store.VerdictSet) verdictSetView {
	return verdictSetView{GradedAt: v.CreatedAt, Source: v.Source, GraderVersions: rawOrNull(v.GraderVersions),
		Graders: rawOrNull(v.Graders), Verdicts: rawOrNull(v.Verdicts), Reward: setReward(v)}
}

// setReward is a stored set's reward: the weighted mean score of its
// non-abstaining, non-optional verdicts; nil when there is none or the
// set cannot be read.
func setReward(v store.VerdictSet) *float64 {
	var (
		verdicts []grade.Verdict
		graders  []grade.GraderRef
	)
	if json.Unmarshal(v.Verdicts, &verdicts) != nil {
		return nil
	}
	_ = json.Unmarshal(v.GraderVersions, &graders)
	return grade.VerdictSet{Verdicts: verdicts, Graders: graders}.Reward()
}

// regradedView is a regraded rollout: its new current set and the
// training-grade decision that follows it.
type regradedView struct {
	RolloutID string `json:"rollout_id"`
	verdictSetView
	TrainingGrade           *bool    `json:"training_grade"`
	NotTrainingGradeReasons []string `json:"not_training_grade_reasons"`
}

func regradedViewOf(r rollout.Regraded) regradedView {
	return regradedView{RolloutID: r.RolloutID, verdictSetView: verdictSetViewOf(r.Set),
		TrainingGrade: r.TrainingGrade, NotTrainingGradeReasons: nonNilStrings(r.Reasons)}
}

// errNotGraded maps store.ErrNotGraded to 409 not_graded.
func errNotGraded(err error, what string) error {
	if errors.Is(err, store.ErrNotGraded) {
		return gyre.Errorf(gyre.CodeNotGraded, "%s", what)
	}
	return err
}

// regradeRollout is POST /api/v1/rollouts/{id}/regrade.
func (s *Server) regradeRollout(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.rollouts()
	if err != nil {
		return err
	}
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	graders, err := s.regradeGraders(r, p.TenantID)
	if err != nil {
		return err
	}
	res, err := svc.RegradeRollout(r.Context(), p.TenantID, id, graders)
	if err != nil {
		return errNotGraded(err, "the rollout has no graded output to grade again: it has no output, or its grading has not run yet")
	}
	writeJSON(w, http.StatusOK, regradedViewOf(res))
	return nil
}

// batchRegradeView is the answer of a batch regrade: one entry per
// regraded rollout of the page, the page's rollouts that had nothing to
// regrade, and the cursor of the next page.
type batchRegradeView struct {
	BatchID    string         `json:"batch_id"`
	Items      []regradedView `json:"items"`
	NotGraded  []string       `json:"not_graded"`
	NextCursor *string        `json:"next_cursor"`
}

// regradeBatch is POST /api/v1/batches/{id}/regrade[?limit=&cursor=]: one
// page of the batch's rollouts (as GET /api/v1/rollouts?batch_id= pages
// them), regraded a few at a time.
func (s *Server) regradeBatch(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.rollouts()
	if err != nil {
		return err
	}
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	q, err := queryParams(r, "limit", "cursor")
	if err != nil {
		return err
	}
	pg, err := page(q)
	if err != nil {
		return err
	}
	graders, err := s.regradeGraders(r, p.TenantID)
	if err != nil {
		return err
	}
	res, err := svc.RegradeBatch(r.Context(), p.TenantID, id, graders, pg)
	if err != nil {
		return err
	}
	out := batchRegradeView{BatchID: id, Items: make([]regradedView, len(res.Regraded)), NotGraded: res.NotGraded}
	for i, rg := range res.Regraded {
		out.Items[i] = regradedViewOf(rg)
	}
	if res.Next != "" {
		out.NextCursor = &res.Next
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// experimentRegradeView is the answer of an experiment regrade: the
// summary recomputed from the latest verdict sets, with how many runs were
// graded again and why the others were not.
type experimentRegradeView struct {
	ExperimentID string         `json:"experiment_id"`
	Regraded     int            `json:"regraded"`
	Skipped      map[string]int `json:"skipped"`
	Summary      eval.Report    `json:"summary"`
}

// regradeExperiment is POST /api/v1/experiments/{id}/regrade: the
// experiment's stored runs graded again through the same Env as the
// server's rollout grading (gyre eval regrade --server).
func (s *Server) regradeExperiment(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	e, err := s.experimentOf(r, p.TenantID)
	if err != nil {
		return err
	}
	graders, err := s.regradeGraders(r, p.TenantID)
	if err != nil {
		return err
	}
	if s.blobs == nil {
		return gyre.Errorf(gyre.CodeUnavailable, "this server has no blob store to read the runs' trajectories from")
	}
	t, err := s.store.TenantByID(r.Context(), p.TenantID)
	if err != nil {
		return err
	}
	rg := eval.Regrader{Store: s.store, Blobs: s.blobs, Tenant: p.TenantID}
	if s.rollout != nil {
		rg.Env = s.rollout.Grader().Env()
	}
	// The tenant's judge policies and command allow-list.
	rg.Env.Subject = grade.Subject{TenantID: t.ID, TenantName: t.Name}
	res, err := rg.Regrade(r.Context(), e.ID, graders)
	if errors.Is(err, eval.ErrNoGraders) {
		return gyre.Errorf(gyre.CodeNotGraded, "the runs of this experiment were recorded without their graders: send {\"graders\": [...]}")
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, experimentRegradeView{ExperimentID: e.ID, Regraded: res.Regraded, Skipped: res.Skipped, Summary: res.Report})
	return nil
}
