package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Summary is every stage's figures: gyre demo --json prints it, and the
// stage blocks are drawn from it. A stage that did not run is zero.
type Summary struct {
	Serve         ServeStage         `json:"serve"`
	Agent         AgentStage         `json:"agent"`
	Policies      PoliciesStage      `json:"policies"`
	Turns         TurnsStage         `json:"turns"`
	Tasks         TasksStage         `json:"tasks"`
	Batch         BatchStage         `json:"batch"`
	TrainingGrade TrainingGradeStage `json:"training_grade"`
	Dataset       DatasetStage       `json:"dataset"`
	Promotion     PromotionStage     `json:"promotion"`
	Experiment    *ExperimentStage   `json:"experiment"`
	// Failed names the stage that failed, null when none did.
	Failed *string `json:"failed_stage"`
	// Error is why it failed.
	Error *string `json:"error"`
	// Explore holds commands to run next.
	Explore []string `json:"explore"`
}

// Block is one stage's result as printed: a title and its figures.
type Block struct {
	Title string
	Lines [][2]string // label, value
}

// Print writes the block.
func (b Block) Print(w io.Writer) {
	width := 0
	for _, l := range b.Lines {
		width = max(width, len(l[0]))
	}
	fmt.Fprintf(w, "\n== %s\n", b.Title)
	for _, l := range b.Lines {
		// A line without a label continues the one above it.
		fmt.Fprintf(w, "   %-*s  %s\n", width, l[0], l[1])
	}
}

// ServeStage is the in-process gyre serve and the scripted upstream.
type ServeStage struct {
	URL          string   `json:"url"`
	UI           string   `json:"ui_url"`
	Store        string   `json:"store"`
	Config       string   `json:"config"`
	AdminKeyFile string   `json:"admin_key_file"`
	Upstream     string   `json:"upstream"`
	UpstreamURL  string   `json:"upstream_url"`
	Models       []string `json:"models"`
}

// Block is the stage's block.
func (s ServeStage) Block() Block {
	return Block{Title: "serve", Lines: [][2]string{
		{"gyre serve", s.URL + " (" + s.Store + ")"},
		{"config", s.Config},
		{"upstream", fmt.Sprintf("%s at %s: the %s, not a language model", s.Upstream, s.UpstreamURL, "scripted demo model")},
		{"models", strings.Join(s.Models, ", ")},
	}}
}

// AgentStage is this run's agent id and key.
type AgentStage struct {
	ID      string `json:"id"`
	KeyFile string `json:"key_file"`
	// Earlier is how many demo agents earlier runs made.
	Earlier int `json:"earlier_runs"`
}

func (s AgentStage) block() Block {
	note := "the first demo run on this data"
	switch {
	case s.Earlier == 1:
		note = "a new agent: demo-1 is an earlier run's"
	case s.Earlier > 1:
		note = fmt.Sprintf("a new agent: demo-1 … demo-%d are earlier runs'", s.Earlier)
	}
	return Block{Title: "agent", Lines: [][2]string{{"agent id", s.ID + " (" + note + ")"}, {"agent key", s.KeyFile}}}
}

// PolicyInfo is one policy.
type PolicyInfo struct {
	Name     string `json:"name"`
	Upstream string `json:"upstream"`
	Model    string `json:"model"`
	Default  bool   `json:"default"`
}

// PoliciesStage is the two policies.
type PoliciesStage struct {
	Policies []PolicyInfo `json:"policies"`
}

func (s PoliciesStage) block(agent string) Block {
	b := Block{Title: "policies"}
	for _, p := range s.Policies {
		note := ""
		if p.Default {
			note = fmt.Sprintf("; the default policy, so %s's policy until a promotion", agent)
		}
		b.Lines = append(b.Lines, [2]string{p.Name, fmt.Sprintf("upstream %s, model %s%s", p.Upstream, p.Model, note)})
	}
	return b
}

// TurnsStage is the production traffic.
type TurnsStage struct {
	Questions int    `json:"questions"`
	Captured  int    `json:"captured"`
	Endpoint  string `json:"endpoint"`
	// WithoutLookup counts captured turns whose agent acted without
	// lookup_order: demo-base's mistake, visible in production.
	WithoutLookup int `json:"without_lookup"`
}

func (s TurnsStage) block(agent string) Block {
	return Block{Title: "production turns", Lines: [][2]string{
		{"answered", fmt.Sprintf("%d questions by the example agent (gyre demo agent) through %s", s.Questions, s.Endpoint)},
		{"captured", fmt.Sprintf("%d turns, with their tool calls, through the SDK's production capture (gyre turns list --agent %s)", s.Captured, agent)},
		{"mistakes", fmt.Sprintf("%d of them acted without lookup_order (demo-base's mistake)", s.WithoutLookup)},
	}}
}

// TasksStage is the tasks made.
type TasksStage struct {
	FromTurns       int             `json:"from_turns"`
	TurnsMatched    int             `json:"turns_matched"`
	SkippedExisting int             `json:"skipped_existing"`
	TurnGraders     json.RawMessage `json:"turn_graders"`
	FromSuite       int             `json:"from_suite"`
	Suite           string          `json:"suite"`
	SuiteVersion    string          `json:"suite_version"`
	SuiteFile       string          `json:"suite_file"`
	TaskIDs         []string        `json:"task_ids"`
	// PromotionTaskIDs are the suite's tasks but its TroubleCases: the
	// promotion's tasks.
	PromotionTaskIDs []string `json:"promotion_task_ids"`
}

func (s TasksStage) block() Block {
	return Block{Title: "tasks", Lines: [][2]string{
		{"from turns", fmt.Sprintf("%d (of %d turns; %d skipped, already tasks), graded by %s", s.FromTurns, s.TurnsMatched, s.SkippedExisting, s.TurnGraders)},
		{"from suite", fmt.Sprintf("%d cases of %s (%s), %d of them meeting infrastructure trouble on purpose", s.FromSuite, s.Suite, s.SuiteFile, s.FromSuite-len(s.PromotionTaskIDs))},
		{"total", fmt.Sprintf("%d in the batch; the promotion runs the %d suite tasks without trouble", len(s.TaskIDs), len(s.PromotionTaskIDs))},
	}}
}

// Rate is a pass rate with its 95% interval over n rollouts.
type Rate struct {
	Value float64 `json:"value"`
	Low   float64 `json:"low"`
	High  float64 `json:"high"`
	N     int     `json:"n"`
}

// BatchStage is the batch the workers ran.
type BatchStage struct {
	ID     string `json:"id"`
	Policy string `json:"policy"`
	// Rollouts is how many the batch minted, one per task; Retries how
	// many more the server minted to retry an attempt (an exclusion in
	// the batch's retry_on, e.g. substrate_unavailable, or abandoned).
	Rollouts int `json:"rollouts"`
	Retries  int `json:"retries"`
	Graded   int `json:"graded"`
	Passed   int `json:"passed"`
	Failed   int `json:"failed"`
	Unscored int `json:"unscored"`
	Excluded int `json:"excluded"`
	// Exclusions counts the excluded rollouts by exclusion reason.
	Exclusions map[string]int `json:"exclusions"`
	PassRate   *Rate          `json:"pass_rate"`
	// Trouble is how the rollouts of the suite's TroubleCases came out.
	Trouble []TroubleRollout `json:"trouble"`
}

// TroubleRollout is a rollout of a case that meets the example agent's
// infrastructure trouble.
type TroubleRollout struct {
	CaseID    string `json:"case_id"`
	RolloutID string `json:"rollout_id"`
	// Outcome is excluded, or else passed, failed or unscored.
	Outcome string `json:"outcome"`
	// Exclusion is the reason the agent reported, null when none.
	Exclusion *string `json:"exclusion"`
	// Abstained lists the graders that abstained, with their reasons.
	Abstained               []string `json:"abstained"`
	NotTrainingGradeReasons []string `json:"not_training_grade_reasons"`
}

func (s BatchStage) block() Block {
	rate := "none (nothing passed or failed)"
	if r := s.PassRate; r != nil {
		rate = fmt.Sprintf("%.3f, 95%% interval [%.3f, %.3f] over %d (passed and failed only)", r.Value, r.Low, r.High, r.N)
	}
	b := Block{Title: "batch", Lines: [][2]string{
		{"batch", fmt.Sprintf("%s under policy %s, run by gyre worker through the gateway", s.ID, s.Policy)},
		{"graded", fmt.Sprintf("%d of %d rollouts: %d passed, %d failed, %d unscored, %d excluded", s.Graded, s.Rollouts+s.Retries, s.Passed, s.Failed, s.Unscored, s.Excluded)},
		{"retries", fmt.Sprintf("%d: the server runs a task again when its rollout ends excluded for a retryable reason such as substrate_unavailable (max_attempts 2)", s.Retries)},
		{"excluded", fmt.Sprintf("%d (%s): infrastructure trouble the agent reported, not failures", s.Excluded, counts(s.Exclusions))},
		{"unscored", fmt.Sprintf("%d: every grader abstained, which is not a failure either", s.Unscored)},
		{"pass rate", rate},
	}}
	label := "trouble"
	for _, c := range TroubleCases {
		var got []string
		for _, t := range s.Trouble {
			if t.CaseID == c {
				got = append(got, t.describe())
			}
		}
		if len(got) == 0 {
			continue
		}
		line := c + ": " + strings.Join(slices.Compact(got), "; then ")
		if n := len(got); n > 1 {
			line += fmt.Sprintf(" (%d attempts)", n)
		}
		b.Lines = append(b.Lines, [2]string{label, line})
		label = ""
	}
	return b
}

// describe says how the rollout came out and why.
func (t TroubleRollout) describe() string {
	switch {
	case t.Exclusion != nil:
		return "excluded, " + *t.Exclusion
	case len(t.Abstained) > 0:
		return fmt.Sprintf("%s, abstained: %s", t.Outcome, strings.Join(t.Abstained, ", "))
	}
	return t.Outcome
}

// counts prints counts by key, sorted: "a 2, b 1", or "none".
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// TrainingGradeStage is the batch's training-grade yield.
type TrainingGradeStage struct {
	Finished      int            `json:"finished"`
	TrainingGrade int            `json:"training_grade"`
	Yield         *float64       `json:"yield"`
	Reasons       map[string]int `json:"not_training_grade_reasons"`
}

func (s TrainingGradeStage) block() Block {
	y := "null"
	if s.Yield != nil {
		y = fmt.Sprintf("%.3f", *s.Yield)
	}
	return Block{Title: "training grade", Lines: [][2]string{
		{"yield", fmt.Sprintf("%d of %d finished rollouts are training grade (%s); a retried task counts once, by its last attempt", s.TrainingGrade, s.Finished, y)},
		{"not, because", counts(s.Reasons)},
		{"", "(training grade: reported, reconciled with the gateway, graded; a failed rollout can be training grade,"},
		{"", " an excluded one (excluded:<reason>) or one no grader could judge (no_verdict) cannot)"},
	}}
}

// DatasetStage is the sft export.
type DatasetStage struct {
	ID               string         `json:"id"`
	Format           string         `json:"format"`
	Rows             int            `json:"rows"`
	RolloutsSelected int            `json:"rollouts_selected"`
	SHA256           string         `json:"sha256"`
	Bytes            int64          `json:"bytes"`
	File             string         `json:"file"`
	Manifest         string         `json:"manifest"`
	NotExported      map[string]int `json:"not_exported_by_reason"`
}

func (s DatasetStage) block() Block {
	return Block{Title: "dataset", Lines: [][2]string{
		{"sft", fmt.Sprintf("dataset %s: %d rows of %d rollouts selected", s.ID, s.Rows, s.RolloutsSelected)},
		{"left out", counts(s.NotExported)},
		{"file", fmt.Sprintf("%s (%d bytes)", s.File, s.Bytes)},
		{"sha-256", s.SHA256 + " (matches the manifest)"},
		{"manifest", s.Manifest},
	}}
}

// PromotionStage is the promotion of demo-candidate.
type PromotionStage struct {
	ID             string      `json:"id"`
	Decision       string      `json:"decision"`
	Reasons        []string    `json:"reasons"`
	Baseline       string      `json:"baseline"`
	Candidate      string      `json:"candidate"`
	Tasks          int         `json:"tasks"`
	Repetitions    int         `json:"repetitions"`
	MinDelta       float64     `json:"min_delta"`
	MeanDifference *float64    `json:"mean_difference"`
	Interval       *[2]float64 `json:"interval"`
	Seed           uint64      `json:"seed"`
	Fixed          []string    `json:"fixed"`
	Regressed      []string    `json:"regressed"`
	Unchanged      int         `json:"unchanged"`
}

func (s PromotionStage) block() Block {
	decision := s.Decision
	if len(s.Reasons) > 0 {
		decision += ": " + strings.Join(s.Reasons, ", ")
	}
	delta := "null"
	if s.MeanDifference != nil && s.Interval != nil {
		delta = fmt.Sprintf("%+.3f, 95%% paired-bootstrap interval [%.3f, %.3f] (gate: lower bound ≥ %.2f; seed %d)",
			*s.MeanDifference, s.Interval[0], s.Interval[1], s.MinDelta, s.Seed)
	}
	fixed := fmt.Sprintf("%d", len(s.Fixed))
	if len(s.Fixed) > 0 {
		fixed += " (" + strings.Join(s.Fixed, ", ") + ")"
	}
	return Block{Title: "promotion", Lines: [][2]string{
		{"promotion", fmt.Sprintf("%s: %s over %s, %d tasks × %d repetitions per side", s.ID, s.Candidate, s.Baseline, s.Tasks, s.Repetitions)},
		{"decision", decision},
		{"delta", delta},
		{"fixed", fixed},
		{"regressed", fmt.Sprint(len(s.Regressed))},
		{"unchanged", fmt.Sprint(s.Unchanged)},
	}}
}

// ExperimentStage is the evaluator experiment against the desk harness:
// gyre eval run's summary and what the demo adds.
type ExperimentStage struct {
	ID               string   `json:"experiment_id"`
	Suite            string   `json:"suite"`
	SuiteVersion     string   `json:"suite_version"`
	Harness          string   `json:"harness"`
	Cases            int      `json:"cases"`
	Runs             int      `json:"runs"`
	Passed           int      `json:"passed"`
	Failed           int      `json:"failed"`
	Errors           int      `json:"errors"`
	PassRate         *float64 `json:"pass_rate"`
	ExitCode         int      `json:"exit_code"`
	SuiteDir         string   `json:"suite_dir"`
	FailedCases      []string `json:"failed_cases"`
	ExpectedFailures []string `json:"expected_failures"`
	Previous         *string  `json:"previous_experiment_id"`
}

// Block is the stage's block.
func (s ExperimentStage) Block() Block {
	rate := "null"
	if s.PassRate != nil {
		rate = fmt.Sprintf("%.3f", *s.PassRate)
	}
	failed := "none"
	if len(s.FailedCases) > 0 {
		failed = strings.Join(s.FailedCases, ", ")
		if slices.Equal(s.FailedCases, s.ExpectedFailures) {
			failed += " (on purpose: the rule-based desk reads any mention of a refund as a request for one)"
		}
	}
	return Block{Title: "experiment", Lines: [][2]string{
		{"experiment", fmt.Sprintf("%s: suite %s@%s (%s) against the example desk harness (rule-based, offline) at %s", s.ID, s.Suite, s.SuiteVersion, s.SuiteDir, s.Harness)},
		{"runs", fmt.Sprintf("%d (%d cases, repeated): %d passed, %d failed, %d errors", s.Runs, s.Cases, s.Passed, s.Failed, s.Errors)},
		{"pass rate", rate},
		{"failed cases", failed},
	}}
}
