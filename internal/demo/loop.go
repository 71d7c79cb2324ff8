package demo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gyrehq/gyre/internal/demo/scripted"
	"github.com/gyrehq/gyre/internal/grade"
)

// Gyre runs gyre commands: the demo drives its server through the same
// commands a user types (policy create, tasks from-turns, batches create,
// worker, dataset export, policy promote…), in-process.
type Gyre interface {
	// Command runs gyre with args until it ends or ctx ends, and returns
	// what it printed on stdout.
	Command(ctx context.Context, args ...string) ([]byte, error)
}

// Defaults of LoopConfig.
const (
	DefaultTurns       = 8
	DefaultRepetitions = 2
	DefaultConcurrency = 4
)

// The demo's policies: one per model of the scripted upstream.
const (
	BasePolicy      = scripted.Base
	CandidatePolicy = scripted.Candidate
)

// turnGraders judge the tasks made from production turns: the order is
// looked up and no tool call fails, which is what demo-base gets wrong on
// refunds and cancellations.
const turnGraders = `[{"tool_called":{"name":"lookup_order"}},{"all_tools_ok":{}}]`

// LoopConfig is what the flywheel stages of gyre demo need.
type LoopConfig struct {
	// Server is the running gyre serve's base URL.
	Server string
	// AdminKeyFile holds an admin key of the tenant "default".
	AdminKeyFile string
	// Dir is where the demo writes its files (<data>/demo).
	Dir string
	// Agent is the example agent's argv: gyre itself, re-executed as
	// "gyre demo agent".
	Agent []string
	// Upstream is the name of the scripted model's upstream in gyre.yaml.
	Upstream string
	// Turns is how many production questions the agent answers (default 8).
	Turns int
	// Repetitions is the promotion's rollouts per task and side (default 2).
	Repetitions int
	// Concurrency is the worker's (default 4).
	Concurrency int
	// Wait bounds each wait for the server (a batch, a promotion).
	Wait time.Duration
	// Progress receives progress lines (stderr).
	Progress io.Writer
	// Block, when set, is called with each stage's block as it ends.
	Block func(Block)
}

// StageError says which stage failed and why.
type StageError struct {
	Stage string
	Err   error
}

func (e *StageError) Error() string { return "stage " + e.Stage + ": " + e.Err.Error() }
func (e *StageError) Unwrap() error { return e.Err }

// loop runs the stages.
type loop struct {
	cfg      LoopConfig
	g        Gyre
	sum      *Summary
	agentKey string
	keyFile  string
	batchIDs []string
	// troubleTasks maps the tasks of the suite's TroubleCases to their
	// case ids.
	troubleTasks map[string]string
}

// RunLoop runs the flywheel stages against a running gyre serve, in
// order: the agent id and its key, the policies, production turns, tasks,
// a batch run by workers, the training-grade yield, an sft export and a
// promotion. It fills sum as it goes, so a failed run still shows what
// finished; the error is a *StageError.
func RunLoop(ctx context.Context, g Gyre, cfg LoopConfig, sum *Summary) error {
	if cfg.Turns == 0 {
		cfg.Turns = DefaultTurns
	}
	if cfg.Repetitions == 0 {
		cfg.Repetitions = DefaultRepetitions
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Wait == 0 {
		cfg.Wait = 5 * time.Minute
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Turns > len(scripted.Questions()) {
		return &StageError{"turns", fmt.Errorf("at most %d questions", len(scripted.Questions()))}
	}
	l := &loop{cfg: cfg, g: g, sum: sum}
	stages := []struct {
		name string
		run  func(context.Context) error
	}{
		{"agent", l.agent},
		{"policies", l.policies},
		{"turns", l.turns},
		{"tasks", l.tasks},
		{"batch", l.batchAndPromotion},
	}
	for _, s := range stages {
		if err := s.run(ctx); err != nil {
			var se *StageError
			if errors.As(err, &se) {
				return err
			}
			return &StageError{Stage: s.name, Err: err}
		}
	}
	return nil
}

func (l *loop) progress(format string, args ...any) {
	fmt.Fprintf(l.cfg.Progress, "gyre demo: "+format+"\n", args...)
}

func (l *loop) block(b Block) {
	if l.cfg.Block != nil {
		l.cfg.Block(b)
	}
}

// admin runs an admin command against the demo's server with its key.
func (l *loop) admin(ctx context.Context, args ...string) ([]byte, error) {
	args = append(args, "--server", l.cfg.Server, "--key-file", l.cfg.AdminKeyFile)
	return l.g.Command(ctx, args...)
}

// adminJSON runs an admin command with --json and decodes its stdout.
func (l *loop) adminJSON(ctx context.Context, v any, args ...string) error {
	out, err := l.admin(ctx, append(args, "--json")...)
	if err != nil {
		return fmt.Errorf("gyre %s: %w", strings.Join(args, " "), err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("gyre %s: unexpected output: %w", strings.Join(args, " "), err)
	}
	return nil
}

var demoAgentRE = regexp.MustCompile(`^demo-([1-9][0-9]*)$`)

// agent picks this run's agent id, the next free demo-N, and creates its
// agent key: each run is its own agent, so that every stage shows again
// on the same data (turns deduplicate, turns already made into tasks are
// skipped, and demo-candidate is promoted for an agent only once).
func (l *loop) agent(ctx context.Context) error {
	var list struct {
		Items []struct {
			AgentID string `json:"agent_id"`
		} `json:"items"`
	}
	if err := l.adminJSON(ctx, &list, "agents", "list"); err != nil {
		return err
	}
	n := 0
	for _, a := range list.Items {
		if m := demoAgentRE.FindStringSubmatch(a.AgentID); m != nil {
			if v, err := strconv.Atoi(m[1]); err == nil && v > n {
				n = v
			}
		}
	}
	id := fmt.Sprintf("demo-%d", n+1)
	out, err := l.g.Command(ctx, "keys", "create", "--tenant", "default", "--role", "agent", "--agent", id, "--name", "gyre demo "+id)
	if err != nil {
		return fmt.Errorf("gyre keys create: %w", err)
	}
	l.agentKey = strings.TrimSpace(string(out))
	l.keyFile = filepath.Join(l.cfg.Dir, id+".agent.key")
	if err := os.MkdirAll(l.cfg.Dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(l.keyFile, []byte(l.agentKey+"\n"), 0o600); err != nil {
		return err
	}
	l.sum.Agent = AgentStage{ID: id, KeyFile: l.keyFile, Earlier: n}
	l.block(l.sum.Agent.block())
	return nil
}

// policies creates the two policies on the scripted upstream (an
// identical policy again is no change). demo-base is the server's default
// policy, so it is what a new agent gets: on the policy endpoint and in
// batches that name no policy.
func (l *loop) policies(ctx context.Context) error {
	var ps []PolicyInfo
	for _, name := range []string{BasePolicy, CandidatePolicy} {
		var p struct {
			Name     string `json:"name"`
			Upstream string `json:"upstream"`
			Model    string `json:"model"`
		}
		if err := l.adminJSON(ctx, &p, "policy", "create", "--name", name, "--upstream", l.cfg.Upstream, "--model", name); err != nil {
			return err
		}
		ps = append(ps, PolicyInfo{Name: p.Name, Upstream: p.Upstream, Model: p.Model, Default: name == BasePolicy})
	}
	l.sum.Policies = PoliciesStage{Policies: ps}
	l.block(l.sum.Policies.block(l.sum.Agent.ID))
	return nil
}

// TurnQuestions are the questions the demo's production traffic asks:
// the second phrasing of every question, so they differ from the suite's.
func TurnQuestions(n int) []scripted.Question {
	qs := scripted.Questions()
	// Questions lists phrasing by phrasing, 9 each; start at the second.
	qs = append(qs[9:], qs[:9]...)
	return qs[:n]
}

// turns runs the example agent in production mode on the demo's
// questions: gyre demo agent, talking to the model through the agent's
// policy endpoint and capturing each turn through the SDK.
func (l *loop) turns(ctx context.Context) error {
	id := l.sum.Agent.ID
	qs := TurnQuestions(l.cfg.Turns)
	l.progress("production: the example agent answers %d questions as %s through %s/agents/%s/v1", len(qs), id, l.cfg.Server, id)
	env := childEnv(map[string]string{
		"OPENAI_BASE_URL": l.cfg.Server + "/agents/" + id + "/v1", "OPENAI_API_KEY": l.agentKey,
		"GYRE_CAPTURE_URL": l.cfg.Server, "GYRE_CAPTURE_KEY": l.agentKey, "GYRE_CAPTURE_AGENT": id,
	})
	errs := make([]error, len(qs))
	sem := make(chan struct{}, l.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cmd := exec.CommandContext(ctx, l.cfg.Agent[0], append(slices.Clone(l.cfg.Agent[1:]), q.Text)...)
			cmd.Env = append(slices.Clone(env), fmt.Sprintf("GYRE_CONVERSATION_ID=%s-conv-%02d", id, i+1))
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = io.Discard, &stderr
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("the agent on %q: %w: %s", q.Text, err, strings.TrimSpace(stderr.String()))
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var page struct {
		Items []struct {
			ToolCalls []struct {
				Name string `json:"name"`
			} `json:"tool_calls"`
		} `json:"items"`
	}
	if err := l.adminJSON(ctx, &page, "turns", "list", "--agent", id, "--all"); err != nil {
		return err
	}
	st := TurnsStage{Questions: len(qs), Captured: len(page.Items), Endpoint: l.cfg.Server + "/agents/" + id + "/v1"}
	for _, t := range page.Items {
		if !slices.ContainsFunc(t.ToolCalls, func(c struct {
			Name string `json:"name"`
		}) bool {
			return c.Name == "lookup_order"
		}) {
			st.WithoutLookup++
		}
	}
	if st.Captured != len(qs) {
		return fmt.Errorf("%d turns captured of %d answered", st.Captured, len(qs))
	}
	l.sum.Turns = st
	l.block(st.block(id))
	return nil
}

// childEnv is the environment of a process the demo starts: the basics
// of its own environment and vars, nothing else (no GYRE_* or OPENAI_*
// of the user's).
func childEnv(vars map[string]string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "TZ", "TMPDIR", "GOCOVERDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+vars[k])
	}
	return env
}

type taskRefs struct {
	Items []struct {
		TaskID string `json:"task_id"`
		CaseID string `json:"case_id"`
	} `json:"items"`
	Matched         int `json:"matched"`
	SkippedExisting int `json:"skipped_existing"`
}

// tasks pushes the agent suite and makes tasks of its cases and of the
// production turns not made into tasks yet.
func (l *loop) tasks(ctx context.Context) error {
	path, err := WriteAgentSuite(l.cfg.Dir)
	if err != nil {
		return err
	}
	var pushed map[string]any
	if err := l.adminJSON(ctx, &pushed, "suites", "push", path); err != nil {
		return err
	}
	var fromSuite, fromTurns taskRefs
	if err := l.adminJSON(ctx, &fromSuite, "tasks", "create", "--suite", AgentSuiteName); err != nil {
		return err
	}
	if err := l.adminJSON(ctx, &fromTurns, "tasks", "from-turns", "--agent", l.sum.Agent.ID, "--graders", turnGraders, "--skip-existing"); err != nil {
		return err
	}
	st := TasksStage{Suite: AgentSuiteName, SuiteFile: path, FromSuite: len(fromSuite.Items), FromTurns: len(fromTurns.Items),
		TurnsMatched: fromTurns.Matched, SkippedExisting: fromTurns.SkippedExisting, TurnGraders: json.RawMessage(turnGraders)}
	if v, ok := pushed["version"].(string); ok {
		st.SuiteVersion = v
	}
	for _, t := range append(fromTurns.Items, fromSuite.Items...) {
		st.TaskIDs = append(st.TaskIDs, t.TaskID)
	}
	st.PromotionTaskIDs = []string{}
	l.troubleTasks = map[string]string{}
	for _, t := range fromSuite.Items {
		if slices.Contains(TroubleCases, t.CaseID) {
			l.troubleTasks[t.TaskID] = t.CaseID
		} else {
			st.PromotionTaskIDs = append(st.PromotionTaskIDs, t.TaskID)
		}
	}
	if st.FromTurns == 0 || st.FromSuite == 0 {
		return fmt.Errorf("%d tasks from turns and %d from the suite: want some of each", st.FromTurns, st.FromSuite)
	}
	l.sum.Tasks = st
	l.block(st.block())
	return nil
}

// batchAndPromotion runs the workers for the batch and the promotion,
// then stops them.
func (l *loop) batchAndPromotion(ctx context.Context) error {
	id := l.sum.Agent.ID
	wctx, stop := context.WithCancel(ctx)
	werr := make(chan error, 1)
	args := []string{"worker", "--server", l.cfg.Server, "--agent", id, "--key-file", l.keyFile,
		"--concurrency", strconv.Itoa(l.cfg.Concurrency), "--root", filepath.Join(l.cfg.Dir, "worker"), "--"}
	args = append(args, l.cfg.Agent...)
	l.progress("gyre worker --agent %s --concurrency %d runs the example agent (%s) for every rollout", id, l.cfg.Concurrency, strings.Join(l.cfg.Agent, " "))
	go func() {
		_, err := l.g.Command(wctx, args...)
		werr <- err
	}()
	err := l.runBatch(ctx, werr)
	if err == nil {
		err = l.dataset(ctx)
	}
	if err == nil {
		err = l.promotion(ctx, werr)
	}
	stop()
	if e := <-werr; e != nil && err == nil && ctx.Err() == nil {
		err = &StageError{"worker", e}
	}
	return err
}

// batchJSON is what the demo reads of a batch summary.
type batchJSON struct {
	BatchID  string         `json:"batch_id"`
	State    string         `json:"state"`
	Policy   *string        `json:"policy"`
	Counts   map[string]int `json:"counts"`
	Outcomes struct {
		Passed, Failed, Unscored, Excluded int
	} `json:"outcomes"`
	PassRate *struct {
		Value    float64 `json:"value"`
		Interval struct {
			Low  float64 `json:"low"`
			High float64 `json:"high"`
		} `json:"interval"`
		N int `json:"n"`
	} `json:"pass_rate"`
	Finished                int            `json:"finished"`
	TrainingGrade           int            `json:"training_grade"`
	TrainingGradeYield      *float64       `json:"training_grade_yield"`
	NotTrainingGradeReasons map[string]int `json:"not_training_grade_reasons"`
}

// waitFor polls fn every 200 ms until it says done, the worker fails, or
// the wait ends.
func (l *loop) waitFor(ctx context.Context, werr <-chan error, what string, fn func() (bool, error)) error {
	deadline := time.Now().Add(l.cfg.Wait)
	for {
		done, err := fn()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done after %s", what, l.cfg.Wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-werr:
			return &StageError{"worker", fmt.Errorf("gyre worker stopped while waiting for %s: %v", what, e)}
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (l *loop) runBatch(ctx context.Context, werr <-chan error) error {
	id := l.sum.Agent.ID
	args := []string{"batches", "create", "--agent", id, "--group-size", "1"}
	for _, t := range l.sum.Tasks.TaskIDs {
		args = append(args, "--task", t)
	}
	var created struct {
		BatchID    string   `json:"batch_id"`
		RolloutIDs []string `json:"rollout_ids"`
	}
	if err := l.adminJSON(ctx, &created, args...); err != nil {
		return &StageError{"batch", err}
	}
	l.progress("batch %s: %d rollouts queued for %s", created.BatchID, len(created.RolloutIDs), id)
	var b batchJSON
	err := l.waitFor(ctx, werr, "batch "+created.BatchID, func() (bool, error) {
		if err := l.adminJSON(ctx, &b, "batches", "show", created.BatchID); err != nil {
			return false, err
		}
		return b.State != "running" && b.Finished >= len(created.RolloutIDs), nil
	})
	if err != nil {
		return &StageError{"batch", err}
	}
	st := BatchStage{ID: b.BatchID, Rollouts: len(created.RolloutIDs), Graded: b.Counts["graded"],
		Passed: b.Outcomes.Passed, Failed: b.Outcomes.Failed, Unscored: b.Outcomes.Unscored, Excluded: b.Outcomes.Excluded}
	if b.Policy != nil {
		st.Policy = *b.Policy
	}
	if b.PassRate != nil {
		st.PassRate = &Rate{Value: b.PassRate.Value, Low: b.PassRate.Interval.Low, High: b.PassRate.Interval.High, N: b.PassRate.N}
	}
	if err := l.batchRollouts(ctx, &st); err != nil {
		return &StageError{"batch", err}
	}
	l.sum.Batch = st
	l.block(st.block())
	tg := TrainingGradeStage{Finished: b.Finished, TrainingGrade: b.TrainingGrade, Yield: b.TrainingGradeYield, Reasons: b.NotTrainingGradeReasons}
	if tg.Reasons == nil {
		tg.Reasons = map[string]int{}
	}
	l.sum.TrainingGrade = tg
	l.block(tg.block())
	return nil
}

// batchRollouts reads the batch's rollouts into st: the retries, the
// graded rollouts' exclusions by reason, and how the rollouts of the
// suite's TroubleCases came out (excluded, or unscored with the graders
// that abstained), in case order.
func (l *loop) batchRollouts(ctx context.Context, st *BatchStage) error {
	var page struct {
		Items []struct {
			RolloutID       string  `json:"rollout_id"`
			TaskID          string  `json:"task_id"`
			Attempt         int     `json:"attempt"`
			State           string  `json:"state"`
			ExclusionReason *string `json:"exclusion_reason"`
		} `json:"items"`
	}
	if err := l.adminJSON(ctx, &page, "rollouts", "list", "--batch", st.ID, "--all"); err != nil {
		return err
	}
	out := []TroubleRollout{}
	st.Exclusions = map[string]int{}
	for _, it := range page.Items {
		if it.Attempt > 1 {
			st.Retries++
		}
		if it.State == "graded" && it.ExclusionReason != nil {
			st.Exclusions[*it.ExclusionReason]++
		}
		caseID, ok := l.troubleTasks[it.TaskID]
		if !ok {
			continue
		}
		var r struct {
			Exclusion *struct {
				Reason string `json:"reason"`
			} `json:"exclusion"`
			Verdicts                []grade.Verdict `json:"verdicts"`
			NotTrainingGradeReasons []string        `json:"not_training_grade_reasons"`
		}
		if err := l.adminJSON(ctx, &r, "rollouts", "show", it.RolloutID); err != nil {
			return err
		}
		// The agent suite marks no grader optional, so every verdict
		// decides.
		tr := TroubleRollout{CaseID: caseID, RolloutID: it.RolloutID, Outcome: string(grade.Classify(r.Verdicts, nil)),
			Abstained: []string{}, NotTrainingGradeReasons: r.NotTrainingGradeReasons}
		if r.Exclusion != nil {
			tr.Outcome, tr.Exclusion = "excluded", &r.Exclusion.Reason
		}
		for _, v := range r.Verdicts {
			if v.Abstained() {
				tr.Abstained = append(tr.Abstained, fmt.Sprintf("%s (%s)", v.Grader, v.Reason))
			}
		}
		if tr.NotTrainingGradeReasons == nil {
			tr.NotTrainingGradeReasons = []string{}
		}
		out = append(out, tr)
	}
	sort.SliceStable(out, func(i, j int) bool {
		return slices.Index(TroubleCases, out[i].CaseID) < slices.Index(TroubleCases, out[j].CaseID)
	})
	st.Trouble = out
	return nil
}

// dataset exports the batch's training-grade rollouts as sft and checks
// the file against its manifest.
func (l *loop) dataset(ctx context.Context) error {
	id := l.sum.Agent.ID
	out := filepath.Join(l.cfg.Dir, id+".sft.jsonl")
	if _, err := l.admin(ctx, "dataset", "export", "--agent", id, "--format", "sft", "--batch", l.sum.Batch.ID, "--out", out); err != nil {
		return &StageError{"dataset", fmt.Errorf("gyre dataset export: %w", err)}
	}
	mb, err := os.ReadFile(out + ".manifest.json")
	if err != nil {
		return &StageError{"dataset", err}
	}
	var m struct {
		DatasetID           string         `json:"dataset_id"`
		Rows                int            `json:"rows"`
		RolloutsSelected    int            `json:"rollouts_selected"`
		FileSHA256          string         `json:"file_sha256"`
		FileBytes           int64          `json:"file_bytes"`
		NotExportedByReason map[string]int `json:"not_exported_by_reason"`
	}
	if err := json.Unmarshal(mb, &m); err != nil {
		return &StageError{"dataset", fmt.Errorf("manifest: %w", err)}
	}
	fb, err := os.ReadFile(out)
	if err != nil {
		return &StageError{"dataset", err}
	}
	sum := sha256.Sum256(fb)
	if got := hex.EncodeToString(sum[:]); got != m.FileSHA256 {
		return &StageError{"dataset", fmt.Errorf("%s has SHA-256 %s, its manifest says %s", out, got, m.FileSHA256)}
	}
	st := DatasetStage{ID: m.DatasetID, Format: "sft", Rows: m.Rows, RolloutsSelected: m.RolloutsSelected, SHA256: m.FileSHA256,
		Bytes: m.FileBytes, File: out, Manifest: out + ".manifest.json", NotExported: m.NotExportedByReason}
	if st.NotExported == nil {
		st.NotExported = map[string]int{}
	}
	l.sum.Dataset = st
	l.block(st.block())
	return nil
}

// promotionJSON is what the demo reads of a promotion.
type promotionJSON struct {
	ID          string   `json:"id"`
	State       string   `json:"state"`
	Reasons     []string `json:"reasons"`
	Baseline    string   `json:"baseline"`
	Candidate   string   `json:"candidate"`
	TaskIDs     []string `json:"task_ids"`
	Repetitions int      `json:"repetitions"`
	MinDelta    float64  `json:"min_delta"`
	Evidence    *struct {
		Seed           uint64    `json:"seed"`
		MeanDifference *float64  `json:"mean_difference"`
		Interval       []float64 `json:"interval"`
		Tasks          []struct {
			TaskID     string   `json:"task_id"`
			CaseID     *string  `json:"case_id"`
			Difference *float64 `json:"difference"`
		} `json:"tasks"`
	} `json:"evidence"`
}

// promotion promotes demo-candidate over the agent's baseline (demo-base,
// the default) on the agent suite's tasks and waits for the gate.
//
// The promotion names its tasks (--task) instead of the suite: the
// suite's TroubleCases meet infrastructure trouble on every rollout (D4
// excluded, E5 unscored), which measures no policy, and on both sides the
// excluded rate would be above the gate's max_excluded_rate (5%), so the
// gate would rightly reject. The gate keeps its defaults.
func (l *loop) promotion(ctx context.Context, werr <-chan error) error {
	id := l.sum.Agent.ID
	var p promotionJSON
	args := []string{"policy", "promote", "--agent", id, "--candidate", CandidatePolicy, "--repetitions", strconv.Itoa(l.cfg.Repetitions)}
	for _, t := range l.sum.Tasks.PromotionTaskIDs {
		args = append(args, "--task", t)
	}
	if err := l.adminJSON(ctx, &p, args...); err != nil {
		return &StageError{"promotion", err}
	}
	l.progress("promotion %s: %s against %s on %d tasks × %d repetitions per side", p.ID, p.Candidate, p.Baseline, len(p.TaskIDs), p.Repetitions)
	err := l.waitFor(ctx, werr, "promotion "+p.ID, func() (bool, error) {
		if err := l.adminJSON(ctx, &p, "promotions", "show", p.ID); err != nil {
			return false, err
		}
		return p.State != "running", nil
	})
	if err != nil {
		return &StageError{"promotion", err}
	}
	st := PromotionStage{ID: p.ID, Decision: p.State, Reasons: p.Reasons, Baseline: p.Baseline, Candidate: p.Candidate,
		Tasks: len(p.TaskIDs), Repetitions: p.Repetitions, MinDelta: p.MinDelta, Fixed: []string{}, Regressed: []string{}}
	if st.Reasons == nil {
		st.Reasons = []string{}
	}
	if e := p.Evidence; e != nil {
		st.MeanDifference = e.MeanDifference
		if len(e.Interval) == 2 {
			st.Interval = &[2]float64{e.Interval[0], e.Interval[1]}
		}
		st.Seed = e.Seed
		for _, t := range e.Tasks {
			name := t.TaskID
			if t.CaseID != nil {
				name = *t.CaseID
			}
			switch {
			case t.Difference == nil:
			case *t.Difference > 0:
				st.Fixed = append(st.Fixed, name)
			case *t.Difference < 0:
				st.Regressed = append(st.Regressed, name)
			default:
				st.Unchanged++
			}
		}
	}
	l.sum.Promotion = st
	l.block(st.block())
	if st.Decision != "promoted" {
		return &StageError{"promotion", fmt.Errorf("promotion %s %s %s", p.ID, p.State, strings.Join(p.Reasons, ", "))}
	}
	return nil
}
