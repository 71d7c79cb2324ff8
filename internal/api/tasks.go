package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/sample"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/suite"
)

// maxTurnTasks bounds the turn_ids of one POST /api/v1/tasks/from-turns.
const maxTurnTasks = 1000

// taskRefJSON names a created task.
type taskRefJSON struct {
	TaskID string `json:"task_id"`
	CaseID string `json:"case_id"`
}

// suiteTasksJSON is the answer of POST /api/v1/tasks: the tasks, in case
// order, and the suite version they were made from (the latest when the
// request named none).
type suiteTasksJSON struct {
	Suite   string        `json:"suite"`
	Version string        `json:"version"`
	Items   []taskRefJSON `json:"items"`
}

// turnTasksJSON is the answer of POST /api/v1/tasks/from-turns: the tasks
// made, in the order of turn_ids or of receipt, and what was left out.
// Matched counts the listed turns, or the turns the filters selected;
// SkippedExisting those left out because they already had a task;
// SkippedNoInputText the selected ones whose input_text is null. Sample
// and Seed echo the sample drawn, null without one.
type turnTasksJSON struct {
	Items              []taskRefJSON `json:"items"`
	Matched            int           `json:"matched"`
	SkippedExisting    int           `json:"skipped_existing"`
	SkippedNoInputText int           `json:"skipped_no_input_text"`
	Sample             *int          `json:"sample"`
	Seed               *int64        `json:"seed"`
}

// taskSourceJSON says what a task was made from: a suite case (kind
// "suite") or a stored production turn (kind "turn").
type taskSourceJSON struct {
	Kind    string `json:"kind"`
	Suite   string `json:"suite,omitempty"`
	Version string `json:"version,omitempty"`
	AgentID string `json:"agent_id,omitempty"`
	TurnID  string `json:"turn_id,omitempty"`
}

// taskJSON is a task as the API shows it.
type taskJSON struct {
	TaskID    string          `json:"task_id"`
	CaseID    string          `json:"case_id"`
	TurnInput string          `json:"turn_input"`
	Input     json.RawMessage `json:"input"`
	Graders   json.RawMessage `json:"graders"`
	Source    taskSourceJSON  `json:"source"`
	CreatedAt time.Time       `json:"created_at"`
}

func toTaskJSON(t store.Task) taskJSON {
	src := taskSourceJSON{Kind: "suite", Suite: t.SuiteName, Version: t.SuiteVersion}
	if t.SourceTurnID != "" {
		src = taskSourceJSON{Kind: "turn", AgentID: t.SourceAgentID, TurnID: t.SourceTurnID}
	}
	return taskJSON{
		TaskID: t.ID, CaseID: t.CaseID, TurnInput: t.TurnInput, Input: t.Input,
		Graders: t.Graders, Source: src, CreatedAt: t.CreatedAt,
	}
}

func taskRefs(tasks []store.Task) []taskRefJSON {
	out := make([]taskRefJSON, len(tasks))
	for i, t := range tasks {
		out[i] = taskRefJSON{TaskID: t.ID, CaseID: t.CaseID}
	}
	return out
}

// createTasks is POST /api/v1/tasks {suite, version?}: one task per case
// of the suite version (the latest when version is absent), all or none;
// see makeSuiteTasks.
func (s *Server) createTasks(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	var body struct {
		Suite   *string `json:"suite"`
		Version *string `json:"version"`
	}
	if err := s.decodeJSON(r, &body); err != nil {
		return err
	}
	if body.Suite == nil {
		return gyre.Errorf(gyre.CodeInvalidBody, "suite is required: the name of an uploaded suite").AtPointer("/suite")
	}
	v, tasks, err := s.makeSuiteTasks(r.Context(), p.TenantID, *body.Suite, body.Version)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, suiteTasksJSON{Suite: v.Name, Version: v.Version, Items: taskRefs(tasks)})
	return nil
}

// suiteTasks makes the tasks of a suite version for a batch given by
// suite (POST /api/v1/batches {suite, version?}) and returns their ids in
// case order. Errors point at /suite and /version, as in the batch body.
func (s *Server) suiteTasks(ctx context.Context, tenantID, suiteName string, version *string) ([]string, error) {
	_, tasks, err := s.makeSuiteTasks(ctx, tenantID, suiteName, version)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	return ids, nil
}

// makeSuiteTasks creates one task per case of the tenant's suite version
// (the latest when version is nil), all or none, in case order; see
// suiteTaskRequest.
func (s *Server) makeSuiteTasks(ctx context.Context, tenantID, suiteName string, version *string) (store.SuiteVersion, []store.Task, error) {
	v, req, err := s.suiteTaskRequest(ctx, tenantID, suiteName, version)
	if err != nil {
		return v, nil, err
	}
	tasks, err := s.store.CreateSuiteTasks(ctx, req)
	if err != nil {
		return v, nil, err
	}
	return v, tasks, nil
}

// suiteTaskRequest prepares the tasks of the tenant's suite version (the
// latest when version is nil), one per case in case order, without
// storing them. A task's turn_input follows suite.TaskInput and its
// compiled verifier suite — the case's effective graders — is frozen on
// it. A case with files cannot become a task: 422 files_unsupported,
// pointing at the case in the suite document. An unknown suite or version
// is 404 with a pointer to /suite or /version.
func (s *Server) suiteTaskRequest(ctx context.Context, tenantID, suiteName string, version *string) (store.SuiteVersion, store.SuiteTasks, error) {
	var v store.SuiteVersion
	var req store.SuiteTasks
	if !suite.ValidName(suiteName) {
		return v, req, gyre.Errorf(gyre.CodeInvalidBody, "suite must be a suite name").AtPointer("/suite")
	}
	var err error
	if version != nil {
		if !suite.ValidName(*version) {
			return v, req, gyre.Errorf(gyre.CodeInvalidBody, "version must be a version name or content hash").AtPointer("/version")
		}
		v, err = s.store.SuiteVersion(ctx, tenantID, suiteName, *version)
		if errors.Is(err, store.ErrNotFound) {
			return v, req, gyre.Errorf(gyre.CodeNotFound, "suite %q has no version %q in this tenant", suiteName, *version).AtPointer("/version")
		}
	} else {
		v, err = s.store.LatestSuiteVersion(ctx, tenantID, suiteName)
		if errors.Is(err, store.ErrNotFound) {
			return v, req, gyre.Errorf(gyre.CodeNotFound, "no suite %q in this tenant", suiteName).AtPointer("/suite")
		}
	}
	if err != nil {
		return v, req, err
	}
	st, err := parseStoredSuite(v)
	if err != nil {
		return v, req, err
	}
	req = store.SuiteTasks{TenantID: tenantID, SuiteName: v.Name, SuiteVersion: v.Version}
	for _, c := range st.Cases {
		turnInput, err := c.TurnInput()
		if err != nil {
			return v, req, err // files_unsupported, at the case's files
		}
		compiled, err := c.Compile()
		if err != nil {
			// %v: graders stored with an accepted suite failing now is
			// gyre's problem, not the client's 422.
			return v, req, fmt.Errorf("case %s: compile graders: %v", c.ID, err)
		}
		graders, err := json.Marshal(compiled)
		if err != nil {
			return v, req, fmt.Errorf("case %s: freeze graders: %w", c.ID, err)
		}
		req.Tasks = append(req.Tasks, store.NewTask{CaseID: c.ID, Input: c.Input, TurnInput: turnInput, Graders: graders})
	}
	return v, req, nil
}

// createTasksFromTurns is POST /api/v1/tasks/from-turns: one task per
// stored production turn of agent_id, replaying its input_text, all judged
// by graders (frozen on each task). The turns are either listed (turn_ids)
// or selected by filter (conversation_id, since, until), optionally a
// deterministic sample of them (sample, seed); the two ways are exclusive.
// skip_existing leaves out turns already made into tasks. A listed turn
// that is not stored, or whose input_text is null, fails the request with
// 422 at /turn_ids/<i>; a selected turn whose input_text is null is
// skipped and counted. At most maxTurnTasks tasks are made per call: a
// selection of more fails with 422 unless sample bounds it. Nothing is
// created on any error.
func (s *Server) createTasksFromTurns(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	var body struct {
		AgentID        string          `json:"agent_id"`
		TurnIDs        []string        `json:"turn_ids"`
		ConversationID *string         `json:"conversation_id"`
		Since          *string         `json:"since"`
		Until          *string         `json:"until"`
		Sample         *int            `json:"sample"`
		Seed           *int64          `json:"seed"`
		SkipExisting   bool            `json:"skip_existing"`
		Graders        json.RawMessage `json:"graders"`
	}
	if err := s.decodeJSON(r, &body); err != nil {
		return err
	}
	if body.AgentID == "" {
		return gyre.Errorf(gyre.CodeInvalidBody, "agent_id is required").AtPointer("/agent_id")
	}
	if flywheel.ValidateAgentID(body.AgentID) != nil {
		return gyre.Errorf(gyre.CodeInvalidBody, "agent_id must be 1 to 255 characters without control characters, surrounding whitespace, slash or backslash, and not \".\" or \"..\"").AtPointer("/agent_id")
	}
	listed := body.TurnIDs != nil
	if listed {
		filters := []struct {
			name string
			set  bool
		}{
			{"conversation_id", body.ConversationID != nil}, {"since", body.Since != nil}, {"until", body.Until != nil},
			{"sample", body.Sample != nil}, {"seed", body.Seed != nil},
		}
		for _, f := range filters {
			if f.set {
				return gyre.Errorf(gyre.CodeInvalidBody, "%s selects turns by filter and cannot be combined with turn_ids: list the turns or select them, not both", f.name).AtPointer("/" + f.name)
			}
		}
		if err := checkTurnIDs(body.TurnIDs); err != nil {
			return err
		}
	}
	sel := store.TurnSelection{TenantID: p.TenantID, AgentID: body.AgentID}
	if body.ConversationID != nil {
		if *body.ConversationID == "" {
			return gyre.Errorf(gyre.CodeInvalidBody, "conversation_id must not be empty").AtPointer("/conversation_id")
		}
		sel.ConversationID = *body.ConversationID
	}
	if sel.Since, err = bodyTime(body.Since, "since"); err != nil {
		return err
	}
	if sel.Until, err = bodyTime(body.Until, "until"); err != nil {
		return err
	}
	if !sel.Since.IsZero() && !sel.Until.IsZero() && !sel.Until.After(sel.Since) {
		return gyre.Errorf(gyre.CodeInvalidBody, "until must be after since").AtPointer("/until")
	}
	if body.Sample != nil && (*body.Sample < 1 || *body.Sample > maxTurnTasks) {
		return gyre.Errorf(gyre.CodeInvalidBody, "sample must be a count of turns from 1 to %d", maxTurnTasks).AtPointer("/sample")
	}
	if body.Seed != nil && body.Sample == nil {
		return gyre.Errorf(gyre.CodeInvalidBody, "seed chooses which turns sample keeps: set sample too").AtPointer("/seed")
	}
	if len(body.Graders) == 0 || string(body.Graders) == "null" {
		return gyre.Errorf(gyre.CodeInvalidBody, "graders is required: a list of grader declarations (it may be empty)").AtPointer("/graders")
	}
	specs, err := grade.ParseSpecsAt(body.Graders, "/graders")
	if err != nil {
		return err
	}
	if err := s.checkCommands(r.Context(), p.TenantID, specs); err != nil {
		return err
	}
	compiled, err := grade.Compile(specs)
	if err != nil {
		return err
	}
	graders, err := json.Marshal(compiled)
	if err != nil {
		return fmt.Errorf("freeze graders: %w", err)
	}

	ans := turnTasksJSON{Items: []taskRefJSON{}}
	ids := body.TurnIDs
	if listed {
		ans.Matched = len(ids)
	} else {
		var seed int64
		if body.Seed != nil {
			seed = *body.Seed
		}
		pick, err := s.selectTurns(r.Context(), sel, body.Sample, seed, body.SkipExisting, &ans)
		if err != nil {
			return err
		}
		ids = pick
		if body.Sample != nil {
			ans.Sample, ans.Seed = body.Sample, &seed
		}
	}
	if len(ids) > 0 {
		tasks, err := s.store.CreateTurnTasks(r.Context(), store.TurnTasks{
			TenantID: p.TenantID, AgentID: body.AgentID, TurnIDs: ids, Graders: graders, SkipExisting: body.SkipExisting,
		})
		var re *store.TurnRefError
		switch {
		case errors.As(err, &re) && errors.Is(err, store.ErrNoInputText):
			return gyre.Errorf(gyre.CodeInvalidBody, "turn %q has input_text null: there is no input to replay", re.TurnID).
				AtPointer("/turn_ids/" + strconv.Itoa(re.Index))
		case errors.As(err, &re) && listed:
			return gyre.Errorf(gyre.CodeInvalidBody, "agent %q has no stored turn %q in this tenant", body.AgentID, re.TurnID).
				AtPointer("/turn_ids/" + strconv.Itoa(re.Index))
		case err != nil:
			return err
		}
		ans.Items = taskRefs(tasks)
		// Turns another call made into tasks since they were selected.
		ans.SkippedExisting += len(ids) - len(tasks)
	}
	status := http.StatusCreated
	if len(ans.Items) == 0 {
		status = http.StatusOK
	}
	writeJSON(w, status, ans)
	return nil
}

// checkTurnIDs checks the turn_ids of a from-turns body: 1 to maxTurnTasks
// distinct ids of the contract's grammar.
func checkTurnIDs(ids []string) error {
	if len(ids) == 0 || len(ids) > maxTurnTasks {
		return gyre.Errorf(gyre.CodeInvalidBody, "turn_ids must list 1 to %d turn ids; leave it out to select turns by filter", maxTurnTasks).AtPointer("/turn_ids")
	}
	seen := make(map[string]int, len(ids))
	for i, id := range ids {
		ptr := "/turn_ids/" + strconv.Itoa(i)
		if flywheel.ValidateTurnID(id) != nil {
			return gyre.Errorf(gyre.CodeInvalidBody, "turn id %q does not follow the contract's turn_id grammar", id).AtPointer(ptr)
		}
		if j, dup := seen[id]; dup {
			return gyre.Errorf(gyre.CodeInvalidBody, "turn id %q is already listed at /turn_ids/%d", id, j).AtPointer(ptr)
		}
		seen[id] = i
	}
	return nil
}

// bodyTime parses the RFC 3339 body member name; the zero time when it is
// absent.
func bodyTime(v *string, name string) (time.Time, error) {
	if v == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *v)
	if err != nil {
		return time.Time{}, gyre.Errorf(gyre.CodeInvalidBody, "%s must be an RFC 3339 date-time such as 2025-01-31T12:00:00Z", name).AtPointer("/" + name)
	}
	return t, nil
}

// selectTurns returns the ids, in order of receipt, of the turns sel
// selects that can become tasks: those with input to replay and, with
// skipExisting, without a task yet; with sample, the sample's picks by
// seed. It counts what it matched and skipped into ans. More than
// maxTurnTasks eligible turns without sample is 422.
func (s *Server) selectTurns(ctx context.Context, sel store.TurnSelection, n *int, seed int64, skipExisting bool, ans *turnTasksJSON) ([]string, error) {
	var (
		eligible []string
		sampler  *sample.Sampler
	)
	if n != nil {
		sampler = sample.New(*n, seed)
	}
	errTooMany := errors.New("too many")
	err := s.store.EachTurnRef(ctx, sel, func(ref store.TurnRef) error {
		ans.Matched++
		switch {
		case skipExisting && ref.HasTask:
			ans.SkippedExisting++
			return nil
		case !ref.HasInput:
			ans.SkippedNoInputText++
			return nil
		}
		if sampler != nil {
			sampler.Offer(ref.TurnID, len(eligible))
		} else if len(eligible) == maxTurnTasks {
			return errTooMany
		}
		eligible = append(eligible, ref.TurnID)
		return nil
	})
	if errors.Is(err, errTooMany) {
		return nil, gyre.Errorf(gyre.CodeInvalidBody,
			"the filters select more than %d turns that can become tasks, the most one call makes: set sample, or narrow since, until or conversation_id", maxTurnTasks).AtPointer("/sample")
	}
	if err != nil {
		return nil, err
	}
	if sampler == nil {
		return eligible, nil
	}
	picked := sampler.Picked()
	out := make([]string, len(picked))
	for i, pos := range picked {
		out[i] = eligible[pos]
	}
	return out, nil
}

// listTasks is GET /api/v1/tasks[?suite=]: the tenant's tasks, oldest
// first.
func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	q, err := queryParams(r, "suite", "limit", "cursor")
	if err != nil {
		return err
	}
	pg, err := page(q)
	if err != nil {
		return err
	}
	var f store.TaskFilter
	if name, ok := q["suite"]; ok {
		if !suite.ValidName(name) {
			return gyre.Errorf(gyre.CodeInvalidQuery, "suite must be a suite name")
		}
		f.Suite = name
	}
	tasks, next, err := s.store.ListTasks(r.Context(), p.TenantID, f, pg)
	if err != nil {
		return err
	}
	items := make([]taskJSON, len(tasks))
	for i, t := range tasks {
		items[i] = toTaskJSON(t)
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// getTask is GET /api/v1/tasks/{id}.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	if _, err := queryParams(r); err != nil {
		return err
	}
	t, err := s.store.Task(r.Context(), p.TenantID, id)
	if errors.Is(err, store.ErrNotFound) {
		return gyre.Errorf(gyre.CodeNotFound, "no task %s in this tenant", id)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toTaskJSON(t))
	return nil
}
