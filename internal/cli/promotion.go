package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/promotion"
	"github.com/gyrehq/gyre/internal/store"
)

// Exit codes of gyre policy promote --wait (the evaluator's convention):
// 0 promoted, 100 rejected, 1 failed or cancelled.
const exitRejected = eval.ExitFailed

// promotionJSON is a promotion as the API shows it (SPEC §10).
type promotionJSON struct {
	ID              string       `json:"id"`
	AgentID         string       `json:"agent_id"`
	Candidate       string       `json:"candidate"`
	Baseline        string       `json:"baseline"`
	Suite           *string      `json:"suite"`
	SuiteVersion    *versionName `json:"suite_version"`
	TaskIDs         []string     `json:"task_ids"`
	Repetitions     int          `json:"repetitions"`
	MinDelta        float64      `json:"min_delta"`
	MaxExcludedRate float64      `json:"max_excluded_rate"`
	DeadlineS       float64      `json:"deadline_s"`
	Seed            uint64       `json:"seed"`
	State           string       `json:"state"`
	Reasons         []string     `json:"reasons"`
	Batches         struct {
		Baseline  *string `json:"baseline"`
		Candidate *string `json:"candidate"`
	} `json:"batches"`
	Evidence   *promotion.Evidence `json:"evidence"`
	CreatedBy  string              `json:"created_by"`
	CreatedAt  time.Time           `json:"created_at"`
	DeadlineAt time.Time           `json:"deadline_at"`
	DecidedAt  *time.Time          `json:"decided_at"`
}

// promotionRaw is a promotion decoded for the tables and kept as the
// server sent it for --json, so no field the server adds is lost.
type promotionRaw struct {
	promotionJSON
	raw json.RawMessage
}

func (p *promotionRaw) UnmarshalJSON(b []byte) error {
	p.raw = append(json.RawMessage(nil), b...)
	return json.Unmarshal(b, &p.promotionJSON)
}

func (p promotionRaw) MarshalJSON() ([]byte, error) {
	if len(p.raw) == 0 {
		return json.Marshal(p.promotionJSON)
	}
	return p.raw, nil
}

// versionName is a suite version id: a string (an explicit version name
// or the content hash, docs/suites.md), read from a JSON number too.
type versionName string

func (v *versionName) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*v = versionName(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("suite_version: %w", err)
	}
	*v = versionName(n.String())
	return nil
}

func (a *app) promotionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "promotions",
		Short: "List, show and cancel promotions with their decisions and evidence (over the API)",
		Long: `Promotions are started by gyre policy promote. Each runs the agent under the
baseline and the candidate policy over the same tasks and decides promoted
or rejected by the promotion gate (docs/promotion.md).`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(a.promotionsListCommand(), a.promotionsShowCommand(), a.promotionsCancelCommand())
	return cmd
}

func (a *app) policyPromoteCommand() *cobra.Command {
	var (
		f                          adminFlags
		agent, candidate, baseline string
		suite, suiteVersion        string
		repetitions                int
		taskIDs                    []string
		minDelta, maxExcluded      float64
		deadline                   time.Duration
		wait                       bool
	)
	cmd := &cobra.Command{
		Use:   "promote --agent A --candidate P (--suite S [--suite-version V] | --task ID...) [flags]",
		Short: "Start a promotion: run baseline and candidate over the same tasks and let the gate decide (admin)",
		Long: `Start a durable promotion job on the server. It runs the agent under the
baseline policy (--baseline, else the agent's promoted policy, else the
tenant's default) and under the candidate over the same tasks (made once
from --suite, or the given --task ids), --repetitions rollouts of each task
per side, and promotes the candidate only if the paired-bootstrap 95%
interval of the mean per-task pass-rate difference has its lower bound at or
above --min-delta, no task goes from all-pass to all-fail, and neither
side's excluded-plus-abandoned rate exceeds --max-excluded-rate.

Without --wait it prints the promotion and exits 0. With --wait it polls
until the promotion is decided, prints the decision and its evidence, and
exits 0 when promoted, 100 when rejected, 1 when failed or cancelled.`,
		Example: `  gyre policy promote --server http://127.0.0.1:7070 --agent support-bot --candidate cand-v2 --suite support --wait
  gyre policy promote --agent support-bot --candidate cand-v2 --task 0192… --task 0193… --repetitions 8 --json`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "agent", "candidate"); err != nil {
				return err
			}
			fs := cmd.Flags()
			changed := func(n string) bool { return fs.Lookup(n).Changed }
			switch {
			case changed("suite") && changed("task"):
				return usagef("--suite and --task are exclusive: promote over a suite's cases or over given task ids")
			case !changed("suite") && !changed("task"):
				return usagef("one of --suite or --task is required")
			case changed("suite-version") && !changed("suite"):
				return usagef("--suite-version needs --suite")
			case changed("suite") && suite == "":
				return usagef("--suite must not be empty")
			case changed("suite-version") && suiteVersion == "":
				return usagef("--suite-version must not be empty")
			case changed("repetitions") && (repetitions < 1 || repetitions > 100):
				return usagef("--repetitions must be between 1 and 100, got %d", repetitions)
			case math.IsNaN(minDelta) || minDelta < -1 || minDelta > 1:
				return usagef("--min-delta must be between -1 and 1, got %v", minDelta)
			case math.IsNaN(maxExcluded) || maxExcluded < 0 || maxExcluded > 1:
				return usagef("--max-excluded-rate must be between 0 and 1, got %v", maxExcluded)
			case changed("deadline") && (deadline < time.Second || deadline%time.Second != 0):
				return usagef("--deadline must be a whole number of seconds, at least 1s, got %s", deadline)
			}
			for _, id := range taskIDs {
				if id == "" {
					return usagef("--task must not be empty")
				}
			}
			body := map[string]any{"agent_id": agent, "candidate": candidate}
			if changed("baseline") {
				body["baseline"] = baseline
			}
			if changed("suite") {
				body["suite"] = suite
			}
			if changed("suite-version") {
				body["suite_version"] = suiteVersion
			}
			if changed("task") {
				body["task_ids"] = taskIDs
			}
			if changed("repetitions") {
				body["repetitions"] = repetitions
			}
			if changed("min-delta") {
				body["min_delta"] = minDelta
			}
			if changed("max-excluded-rate") {
				body["max_excluded_rate"] = maxExcluded
			}
			if changed("deadline") {
				body["deadline_s"] = int64(deadline / time.Second)
			}
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var p promotionRaw
			err = c.Call(ctx, http.MethodPost, "/api/v1/promotions", body, &p)
			var se *eval.ServerError
			if errors.As(err, &se) && se.Code == "promotion_running" {
				return fmt.Errorf("agent %q already has a running promotion (gyre promotions list --agent %s --state running): %s", agent, agent, se.Message)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "promotion %s started: %s against baseline %s, %d task(s) × %d repetition(s) per side\n",
				p.ID, p.Candidate, p.Baseline, len(p.TaskIDs), p.Repetitions)
			if !wait {
				if f.json {
					return writeJSONTo(a.stdout, p)
				}
				fmt.Fprintf(a.stdout, "%s\t%s\n", p.ID, p.State)
				return nil
			}
			if p, err = a.waitDecided(ctx, c, p); err != nil {
				return err
			}
			if f.json {
				err = writeJSONTo(a.stdout, p)
			} else {
				err = printPromotion(a.stdout, p.promotionJSON)
			}
			if err != nil {
				return err
			}
			return decisionExit(p.promotionJSON)
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&agent, "agent", "", "agent id")
	fs.StringVar(&candidate, "candidate", "", "policy to promote")
	fs.StringVar(&baseline, "baseline", "", "policy to compare against (default: the agent's promoted policy, else the tenant's default)")
	fs.StringVar(&suite, "suite", "", "suite whose cases become the tasks (exclusive with --task)")
	fs.StringVar(&suiteVersion, "suite-version", "", "suite version id (default: the latest)")
	fs.StringArrayVar(&taskIDs, "task", nil, "task id to run on both sides (repeatable; exclusive with --suite)")
	fs.IntVar(&repetitions, "repetitions", 5, "rollouts of each task per side, 1 to 100")
	fs.Float64Var(&minDelta, "min-delta", promotion.DefaultRules(0).MinDelta, "least lower bound of the interval of the mean pass-rate difference, -1 to 1")
	fs.Float64Var(&maxExcluded, "max-excluded-rate", promotion.DefaultRules(0).MaxExcludedRate, "largest excluded-plus-abandoned rate of either side, 0 to 1")
	fs.DurationVar(&deadline, "deadline", 24*time.Hour, "bound of the whole job; at the deadline it fails and its batches are cancelled")
	fs.BoolVar(&wait, "wait", false, "wait for the decision; exit 0 promoted, 100 rejected, 1 failed or cancelled")
	return cmd
}

// waitDecided polls the promotion until it leaves running, with a backoff
// from 100 ms to 5 s, printing each change of state on stderr.
func (a *app) waitDecided(ctx context.Context, c *eval.RemoteRecorder, p promotionRaw) (promotionRaw, error) {
	if p.State == "running" {
		fmt.Fprintf(a.stderr, "waiting for promotion %s to be decided (it fails at its deadline, %s)\n", p.ID, p.DeadlineAt.Format(time.RFC3339))
	}
	delay := 100 * time.Millisecond
	for p.State == "running" {
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("stopped waiting for promotion %s, which keeps running on the server (gyre promotions show %s): %w", p.ID, p.ID, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Second)
		var next promotionRaw
		if err := c.Call(ctx, http.MethodGet, "/api/v1/promotions/"+pathSegment(p.ID), nil, &next); err != nil {
			return p, err
		}
		p = next
	}
	fmt.Fprintf(a.stderr, "promotion %s %s\n", p.ID, stateWithReasons(p.promotionJSON))
	return p, nil
}

// decisionExit is the exit of a decided promotion: nil when promoted, 100
// when rejected, 1 otherwise.
func decisionExit(p promotionJSON) error {
	switch p.State {
	case "promoted":
		return nil
	case "rejected":
		return exitError{code: exitRejected, err: fmt.Errorf("promotion %s rejected: %s", p.ID, strings.Join(p.Reasons, ", "))}
	}
	return exitError{code: ExitError, err: fmt.Errorf("promotion %s %s", p.ID, stateWithReasons(p))}
}

// stateWithReasons is "rejected: a, b", or the bare state without reasons.
func stateWithReasons(p promotionJSON) string {
	if len(p.Reasons) == 0 {
		return p.State
	}
	return p.State + ": " + strings.Join(p.Reasons, ", ")
}

func (a *app) promotionsListCommand() *cobra.Command {
	var (
		f            adminFlags
		agent, state string
	)
	cmd := &cobra.Command{
		Use:   "list [--agent A] [--state running|promoted|rejected|failed]",
		Short: "List promotions, newest first",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch state {
			case "", "running", "promoted", "rejected", "failed":
			default:
				return usagef("--state must be running, promoted, rejected or failed, got %q", state)
			}
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			q := url.Values{}
			if agent != "" {
				q.Set("agent_id", agent)
			}
			if state != "" {
				q.Set("state", state)
			}
			path := "/api/v1/promotions"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			ps, err := listAll[promotionRaw](cmd.Context(), c, path)
			if err != nil {
				return err
			}
			if f.json {
				if ps == nil {
					ps = []promotionRaw{}
				}
				return writeJSONTo(a.stdout, map[string]any{"items": ps})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tAGENT\tCANDIDATE\tBASELINE\tSTATE\tMEAN DIFF\tINTERVAL\tREASONS\tCREATED")
			for _, p := range ps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.AgentID, p.Candidate, p.Baseline, p.State,
					meanOf(p.Evidence), intervalOf(p.Evidence), listOrDash(p.Reasons), p.CreatedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's promotions")
	cmd.Flags().StringVar(&state, "state", "", "only promotions in this state")
	return cmd
}

func (a *app) promotionsShowCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a promotion: its decision, reasons and evidence per task",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			var p promotionRaw
			err = c.Call(cmd.Context(), http.MethodGet, "/api/v1/promotions/"+pathSegment(args[0]), nil, &p)
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("no promotion %q in this tenant", args[0])
			}
			if err != nil {
				return err
			}
			if f.json {
				return writeJSONTo(a.stdout, p)
			}
			return printPromotion(a.stdout, p.promotionJSON)
		},
	}
	f.register(cmd)
	return cmd
}

func (a *app) promotionsCancelCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a running promotion and its batches; nothing is promoted (admin)",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			var p promotionRaw
			err = c.Call(cmd.Context(), http.MethodPost, "/api/v1/promotions/"+pathSegment(args[0])+"/cancel", nil, &p)
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("no promotion %q in this tenant", args[0])
			}
			var se *eval.ServerError
			if errors.As(err, &se) && se.Code == "promotion_decided" {
				return fmt.Errorf("promotion %s is already decided and cannot be cancelled: %s", args[0], se.Message)
			}
			if err != nil {
				return err
			}
			if f.json {
				return writeJSONTo(a.stdout, p)
			}
			fmt.Fprintf(a.stdout, "%s\t%s\n", p.ID, stateWithReasons(p.promotionJSON))
			fmt.Fprintf(a.stderr, "promotion %s cancelled; its batches are cancelled and nothing was promoted\n", p.ID)
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

// printPromotion prints a promotion for people: its settings and state,
// then its evidence as a table.
func printPromotion(w io.Writer, p promotionJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "promotion\t%s\nagent\t%s\ncandidate\t%s\nbaseline\t%s\n", p.ID, p.AgentID, p.Candidate, p.Baseline)
	switch {
	case p.Suite != nil && p.SuiteVersion != nil:
		fmt.Fprintf(tw, "tasks\t%d from suite %s version %s\n", len(p.TaskIDs), *p.Suite, *p.SuiteVersion)
	case p.Suite != nil:
		fmt.Fprintf(tw, "tasks\t%d from suite %s\n", len(p.TaskIDs), *p.Suite)
	default:
		fmt.Fprintf(tw, "tasks\t%d given\n", len(p.TaskIDs))
	}
	fmt.Fprintf(tw, "repetitions\t%d per task per side\n", p.Repetitions)
	fmt.Fprintf(tw, "rules\tmin_delta %s, max_excluded_rate %s\n", ruleNum(p.MinDelta), ruleNum(p.MaxExcludedRate))
	fmt.Fprintf(tw, "batches\tbaseline %s, candidate %s\n", ptrOrDash(p.Batches.Baseline), ptrOrDash(p.Batches.Candidate))
	fmt.Fprintf(tw, "created\t%s by %s\ndeadline\t%s\n", p.CreatedAt.Format(time.RFC3339), p.CreatedBy, p.DeadlineAt.Format(time.RFC3339))
	decided := "-"
	if p.DecidedAt != nil {
		decided = p.DecidedAt.Format(time.RFC3339)
	}
	fmt.Fprintf(tw, "state\t%s\nreasons\t%s\ndecided\t%s\n", p.State, listOrDash(p.Reasons), decided)
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.Evidence == nil {
		fmt.Fprintf(w, "\nevidence: none yet (seed %d)\n", p.Seed)
		return nil
	}
	fmt.Fprintln(w)
	return printEvidence(w, *p.Evidence)
}

// printEvidence prints a decision's evidence: one row per task, then the
// statistics of the pairing.
func printEvidence(w io.Writer, ev promotion.Evidence) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tCASE\tBASELINE\tCANDIDATE\tDIFFERENCE")
	for _, t := range ev.Tasks {
		diff := "dropped"
		if t.Difference != nil {
			diff = diffText(*t.Difference)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.TaskID, t.CaseID, sideRate(t.Baseline), sideRate(t.Candidate), diff)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "paired tasks\t%d of %d\n", len(ev.Tasks)-len(ev.DroppedTaskIDs), len(ev.Tasks))
	fmt.Fprintf(tw, "mean difference\t%s\n", meanOf(&ev))
	fmt.Fprintf(tw, "95%% interval\t%s\n", intervalOf(&ev))
	fmt.Fprintf(tw, "bootstrap\t%d resamples, seed %d\n", ev.Resamples, ev.Seed)
	fmt.Fprintf(tw, "excluded rate\tbaseline %.3f, candidate %.3f (excluded + abandoned over all rollouts)\n", ev.ExcludedRate.Baseline, ev.ExcludedRate.Candidate)
	fmt.Fprintf(tw, "dropped tasks\t%s\n", listOrDash(ev.DroppedTaskIDs))
	return tw.Flush()
}

// sideRate is a side's pass rate with its counts: "0.400 (2/5)", or
// "- (0/0)" with nothing scored; abstentions and exclusions follow.
func sideRate(s promotion.SideEvidence) string {
	r := "-"
	if s.PassRate != nil {
		r = fmt.Sprintf("%.3f", *s.PassRate)
	}
	out := fmt.Sprintf("%s (%d/%d)", r, s.Passed, s.Passed+s.Failed)
	var extra []string
	if s.Unscored > 0 {
		extra = append(extra, fmt.Sprintf("%d unscored", s.Unscored))
	}
	if s.Excluded > 0 {
		extra = append(extra, fmt.Sprintf("%d excluded", s.Excluded))
	}
	if s.Abandoned > 0 {
		extra = append(extra, fmt.Sprintf("%d abandoned", s.Abandoned))
	}
	if len(extra) > 0 {
		out += " +" + strings.Join(extra, ", ")
	}
	return out
}

func meanOf(ev *promotion.Evidence) string {
	if ev == nil || ev.MeanDifference == nil {
		return "-"
	}
	return diffText(*ev.MeanDifference)
}

func intervalOf(ev *promotion.Evidence) string {
	if ev == nil || ev.Interval == nil {
		return "-"
	}
	return fmt.Sprintf("[%s, %s]", diffText(ev.Interval[0]), diffText(ev.Interval[1]))
}

// diffText prints a difference with three decimals and its sign; a value
// that rounds to zero is 0.000, not -0.000.
func diffText(v float64) string {
	if math.Abs(v) < 0.0005 {
		return "0.000"
	}
	return fmt.Sprintf("%+.3f", v)
}

// ruleNum prints a rate or bound without trailing zeros.
func ruleNum(v float64) string { return fmt.Sprintf("%g", v) }

func listOrDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}

// policyPromotions lists the promotions a policy took part in, as
// candidate or baseline, newest first. The API has no filter by policy, so
// the list is filtered here. A server without the promotions API (404)
// gives nil: unknown, not none.
func policyPromotions(ctx context.Context, c *eval.RemoteRecorder, policy string) ([]promotionRaw, error) {
	all, err := listAll[promotionRaw](ctx, c, "/api/v1/promotions")
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := []promotionRaw{}
	for _, p := range all {
		if p.Candidate == policy || p.Baseline == policy {
			out = append(out, p)
		}
	}
	return out, nil
}

// shownEvidence is how many promotions gyre policy show prints the
// evidence of; older ones are one gyre promotions show away.
const shownEvidence = 3

// printPolicyPromotions prints the promotions a policy took part in, then
// the evidence of the newest decided ones.
func printPolicyPromotions(w io.Writer, policy string, ps []promotionRaw) error {
	switch {
	case ps == nil:
		_, err := fmt.Fprintln(w, "\npromotions: unknown (the server does not list promotions)")
		return err
	case len(ps) == 0:
		_, err := fmt.Fprintln(w, "\npromotions: none")
		return err
	}
	fmt.Fprintln(w, "\npromotions:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAGENT\tROLE\tAGAINST\tSTATE\tMEAN DIFF\tINTERVAL\tREASONS\tDECIDED")
	for _, p := range ps {
		role, other := "candidate", p.Baseline
		if p.Candidate != policy {
			role, other = "baseline", p.Candidate
		}
		decided := "-"
		if p.DecidedAt != nil {
			decided = p.DecidedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.AgentID, role, other, p.State,
			meanOf(p.Evidence), intervalOf(p.Evidence), listOrDash(p.Reasons), decided)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	shown := 0
	for _, p := range ps {
		if p.Evidence == nil {
			continue
		}
		if shown == shownEvidence {
			fmt.Fprintln(w, "\nolder evidence: gyre promotions show ID")
			break
		}
		shown++
		fmt.Fprintf(w, "\nevidence of promotion %s (%s against %s: %s):\n", p.ID, p.Candidate, p.Baseline, stateWithReasons(p.promotionJSON))
		if err := printEvidence(w, *p.Evidence); err != nil {
			return err
		}
	}
	return nil
}
