package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// batchSummaryJSON is a batch as GET /api/v1/batches lists it.
type batchSummaryJSON struct {
	BatchID     string         `json:"batch_id"`
	AgentID     string         `json:"agent_id"`
	State       string         `json:"state"`
	Policy      *string        `json:"policy"`
	GroupSize   int            `json:"group_size"`
	DeadlineS   float64        `json:"deadline_s"`
	MaxAttempts int            `json:"max_attempts"`
	RetryOn     []string       `json:"retry_on"`
	Tasks       int            `json:"tasks"`
	CreatedAt   time.Time      `json:"created_at"`
	CancelledAt *time.Time     `json:"cancelled_at"`
	Counts      map[string]int `json:"counts"`
	Groups      int            `json:"groups"`
	GroupsDone  int            `json:"groups_complete"`
	Outcomes    struct {
		Passed   int `json:"passed"`
		Failed   int `json:"failed"`
		Unscored int `json:"unscored"`
		Excluded int `json:"excluded"`
	} `json:"outcomes"`
	PassRate *struct {
		Value    float64 `json:"value"`
		Interval struct {
			Low  float64 `json:"low"`
			High float64 `json:"high"`
		} `json:"interval"`
		N int `json:"n"`
	} `json:"pass_rate"`
	MeanReward *struct {
		Value float64 `json:"value"`
		N     int     `json:"n"`
	} `json:"mean_reward"`
	Finished                int            `json:"finished"`
	TrainingGrade           int            `json:"training_grade"`
	TrainingGradeYield      *float64       `json:"training_grade_yield"`
	NotTrainingGradeReasons map[string]int `json:"not_training_grade_reasons"`
}

// passRate prints a pass rate with its Wilson interval, "-" when none.
func (b batchSummaryJSON) passRate() string {
	if b.PassRate == nil {
		return "-"
	}
	p := b.PassRate
	return fmt.Sprintf("%.2f [%.2f, %.2f] n=%d", p.Value, p.Interval.Low, p.Interval.High, p.N)
}

// rollouts is the total of the batch's rollouts by state.
func (b batchSummaryJSON) rollouts() int {
	n := 0
	for _, c := range b.Counts {
		n += c
	}
	return n
}

func (a *app) batchesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batches",
		Short: "Create, list, show, cancel and regrade batches of rollouts (over the API)",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	cmd.AddCommand(a.batchesCreateCommand(), a.batchesListCommand(), a.batchesShowCommand(),
		a.batchesCancelCommand(), a.batchesRegradeCommand())
	return cmd
}

func (a *app) batchesCreateCommand() *cobra.Command {
	var (
		f                             adminFlags
		agent, suiteName, ver, policy string
		idemKey                       string
		tasks, retryOn                []string
		groupSize, maxAttempts        int
		deadline                      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create --agent A (--task ID... | --suite NAME [--version V]) [--group-size N] [--deadline D] [--max-attempts N] [--policy P] [--retry-on R]...",
		Short: "Queue rollouts of tasks for an agent (admin)",
		Long: `Create a batch: --group-size rollouts of each task (listed with --task, or
every case of a suite with --suite), queued for the agent's workers. Each
rollout has --deadline to finish and up to --max-attempts attempts; --policy
names the gateway policy its calls go through (default: the agent's promoted
policy). Every call creates a new batch, unless it repeats an
--idempotency-key of the last 24 hours: then it answers the original batch
(and is retried on network errors), and the same key with another body is
refused (409 idempotency_key_reused).`,
		Example: `  gyre batches create --server http://127.0.0.1:7070 --key-file admin.key --agent support-bot --suite refunds --group-size 4`,
		Args:    argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "agent"); err != nil {
				return err
			}
			fs := cmd.Flags()
			switch {
			case len(tasks) > 0 && fs.Lookup("suite").Changed:
				return usagef("--task and --suite are exclusive: list tasks or name a suite")
			case len(tasks) == 0 && !fs.Lookup("suite").Changed:
				return usagef("name the tasks: --task ID (repeatable) or --suite NAME")
			case fs.Lookup("version").Changed && !fs.Lookup("suite").Changed:
				return usagef("--version needs --suite")
			}
			body := map[string]any{"agent_id": agent}
			if len(tasks) > 0 {
				body["task_ids"] = tasks
			} else {
				body["suite"] = suiteName
				if fs.Lookup("version").Changed {
					body["version"] = ver
				}
			}
			if fs.Lookup("group-size").Changed {
				body["group_size"] = groupSize
			}
			if fs.Lookup("deadline").Changed {
				body["deadline_s"] = deadline.Seconds()
			}
			if fs.Lookup("max-attempts").Changed {
				body["max_attempts"] = maxAttempts
			}
			if fs.Lookup("policy").Changed {
				body["policy"] = policy
			}
			if fs.Lookup("retry-on").Changed {
				body["retry_on"] = retryOn
			}
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if idemKey != "" {
				err = c.CallIdempotent(cmd.Context(), "/api/v1/batches", idemKey, body, &raw)
			} else {
				err = c.Call(cmd.Context(), http.MethodPost, "/api/v1/batches", body, &raw)
			}
			if err != nil {
				return err
			}
			if f.json {
				return writeRawJSON(a.stdout, raw)
			}
			var ans struct {
				BatchID    string   `json:"batch_id"`
				RolloutIDs []string `json:"rollout_ids"`
				Warnings   []string `json:"warnings"`
			}
			if err := decodeItem(raw, &ans); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BATCH\tROLLOUTS")
			fmt.Fprintf(tw, "%s\t%d\n", ans.BatchID, len(ans.RolloutIDs))
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, w := range ans.Warnings {
				fmt.Fprintf(a.stderr, "warning: %s\n", w)
			}
			fmt.Fprintf(a.stderr, "queued %d rollouts for agent %s; follow them with: gyre batches show %s\n", len(ans.RolloutIDs), agent, ans.BatchID)
			return nil
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&agent, "agent", "", "agent id whose workers run the rollouts")
	fs.StringArrayVar(&tasks, "task", nil, "task id (repeatable)")
	fs.StringVar(&suiteName, "suite", "", "make tasks of every case of this suite")
	fs.StringVar(&ver, "version", "", "suite version (default: the latest)")
	fs.IntVar(&groupSize, "group-size", 1, "rollouts per task")
	fs.DurationVar(&deadline, "deadline", 600*time.Second, "time each rollout has to finish")
	fs.IntVar(&maxAttempts, "max-attempts", 2, "attempts per rollout, retries included")
	fs.StringVar(&policy, "policy", "", "gateway policy (default: the agent's promoted policy)")
	fs.StringVar(&idemKey, "idempotency-key", "", "make the call safe to repeat: the same key answers the original batch")
	fs.StringArrayVar(&retryOn, "retry-on", nil, "exclusion reason that earns a retry (repeatable; default capacity, substrate_unavailable, flywheel_crash)")
	return cmd
}

func (a *app) batchesListCommand() *cobra.Command {
	var (
		f            adminFlags
		p            pageFlags
		agent, state string
	)
	cmd := &cobra.Command{
		Use:   "list [--agent A] [--state running|finished|cancelled]",
		Short: "List batches, newest first, with progress and results",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.check(cmd); err != nil {
				return err
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
			page, raw, err := fetchList(cmd.Context(), c, "/api/v1/batches", q, p)
			if err != nil {
				return err
			}
			return a.writeList(f.json, page, raw, "BATCH\tAGENT\tSTATE\tTASKS\tROLLOUTS\tPASS RATE\tTRAINING GRADE\tCREATED",
				func(tw io.Writer, it json.RawMessage) error {
					var b batchSummaryJSON
					if err := decodeItem(it, &b); err != nil {
						return err
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%d/%d\t%s\n", b.BatchID, b.AgentID, b.State, b.Tasks, b.rollouts(),
						b.passRate(), b.TrainingGrade, b.Finished, b.CreatedAt.UTC().Format(time.RFC3339))
					return nil
				})
		},
	}
	f.register(cmd)
	p.register(cmd)
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's batches")
	cmd.Flags().StringVar(&state, "state", "", "only batches in this state: running, finished or cancelled")
	return cmd
}

func (a *app) batchesShowCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "show BATCH_ID",
		Short: "Show a batch: settings, rollouts by state, pass rate, training-grade yield",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, shown, err := a.adminCall(cmd, &f, http.MethodGet, "/api/v1/batches/"+pathSegment(args[0]), nil)
			if err != nil || shown {
				return err
			}
			var b batchSummaryJSON
			if err := decodeItem(raw, &b); err != nil {
				return err
			}
			yield := "-"
			if b.TrainingGradeYield != nil {
				yield = fmt.Sprintf("%.2f (%d of %d finished)", *b.TrainingGradeYield, b.TrainingGrade, b.Finished)
			}
			mean := "-"
			if b.MeanReward != nil {
				mean = fmt.Sprintf("%.3f n=%d", b.MeanReward.Value, b.MeanReward.N)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			for _, kv := range [][2]string{
				{"batch", b.BatchID}, {"agent", b.AgentID}, {"state", b.State}, {"policy", ptrOrDash(b.Policy)},
				{"created", b.CreatedAt.UTC().Format(time.RFC3339)}, {"cancelled", timeOrDash(b.CancelledAt)},
				{"tasks", strconv.Itoa(b.Tasks)}, {"group size", strconv.Itoa(b.GroupSize)},
				{"deadline", (time.Duration(b.DeadlineS * float64(time.Second))).String()},
				{"max attempts", strconv.Itoa(b.MaxAttempts)}, {"retry on", strings.Join(b.RetryOn, ", ")},
				{"rollouts", counts(b.Counts)}, {"groups complete", fmt.Sprintf("%d of %d", b.GroupsDone, b.Groups)},
				{"outcomes", fmt.Sprintf("passed=%d failed=%d unscored=%d excluded=%d", b.Outcomes.Passed, b.Outcomes.Failed, b.Outcomes.Unscored, b.Outcomes.Excluded)},
				{"pass rate", b.passRate()}, {"mean reward", mean},
				{"training grade", yield}, {"not training grade", counts(b.NotTrainingGradeReasons)},
			} {
				fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
			}
			return tw.Flush()
		},
	}
	f.register(cmd)
	return cmd
}

func (a *app) batchesCancelCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "cancel BATCH_ID",
		Short: "Cancel a batch's queued and leased rollouts (admin)",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, shown, err := a.adminCall(cmd, &f, http.MethodPost, "/api/v1/batches/"+pathSegment(args[0])+"/cancel", nil)
			if err != nil || shown {
				return err
			}
			var ans struct {
				BatchID   string `json:"batch_id"`
				Cancelled int    `json:"cancelled"`
			}
			if err := decodeItem(raw, &ans); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BATCH\tCANCELLED")
			fmt.Fprintf(tw, "%s\t%d\n", ans.BatchID, ans.Cancelled)
			return tw.Flush()
		},
	}
	f.register(cmd)
	return cmd
}

// regradedJSON is one regraded rollout of a batch regrade.
type regradedJSON struct {
	RolloutID               string   `json:"rollout_id"`
	Reward                  *float64 `json:"reward"`
	TrainingGrade           *bool    `json:"training_grade"`
	NotTrainingGradeReasons []string `json:"not_training_grade_reasons"`
}

func (a *app) batchesRegradeCommand() *cobra.Command {
	var (
		f       adminFlags
		graders string
		limit   int
	)
	cmd := &cobra.Command{
		Use:   "regrade BATCH_ID [--graders FILE|JSON]",
		Short: "Grade a batch's stored outputs again (admin)",
		Long: `Grade every graded rollout of a batch again, page by page, from what was
stored: no agent runs again. Without --graders each rollout is graded with
its task's frozen graders; with it, with those declarations instead (the
tasks do not change). Each rollout keeps every verdict set; the latest
decides its reward and training grade. Rollouts without a graded output are
listed as not graded.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Lookup("limit").Changed && (limit < 1 || limit > 500) {
				return usagef("--limit must be from 1 to 500")
			}
			var body any
			if graders != "" {
				g, err := gradersArg(graders)
				if err != nil {
					return err
				}
				body = map[string]any{"graders": g}
			}
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			all := struct {
				BatchID    string            `json:"batch_id"`
				Items      []json.RawMessage `json:"items"`
				NotGraded  []string          `json:"not_graded"`
				NextCursor *string           `json:"next_cursor"`
			}{Items: []json.RawMessage{}, NotGraded: []string{}}
			cursor := ""
			for {
				q := url.Values{}
				if limit > 0 {
					q.Set("limit", strconv.Itoa(limit))
				}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				path := "/api/v1/batches/" + pathSegment(args[0]) + "/regrade"
				if len(q) > 0 {
					path += "?" + q.Encode()
				}
				var page struct {
					BatchID    string            `json:"batch_id"`
					Items      []json.RawMessage `json:"items"`
					NotGraded  []string          `json:"not_graded"`
					NextCursor *string           `json:"next_cursor"`
				}
				if err := c.Call(cmd.Context(), http.MethodPost, path, body, &page); err != nil {
					return err
				}
				all.BatchID = page.BatchID
				all.Items = append(all.Items, page.Items...)
				all.NotGraded = append(all.NotGraded, page.NotGraded...)
				if page.NextCursor == nil || *page.NextCursor == "" {
					break
				}
				cursor = *page.NextCursor
			}
			if f.json {
				return writeJSONTo(a.stdout, all)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ROLLOUT\tREWARD\tTRAINING GRADE\tNOT TRAINING GRADE")
			for _, it := range all.Items {
				var r regradedJSON
				if err := decodeItem(it, &r); err != nil {
					return err
				}
				reward := "-"
				if r.Reward != nil {
					reward = strconv.FormatFloat(*r.Reward, 'f', 3, 64)
				}
				reasons := strings.Join(r.NotTrainingGradeReasons, ", ")
				if reasons == "" {
					reasons = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.RolloutID, reward, boolOrDash(r.TrainingGrade), reasons)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "regraded %d rollouts of batch %s; %d had no graded output\n", len(all.Items), all.BatchID, len(all.NotGraded))
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&graders, "graders", "", "grade with these declarations instead: a YAML or JSON file holding a list, or an inline JSON list")
	cmd.Flags().IntVar(&limit, "limit", 0, "rollouts regraded per request, 1 to 500 (default: the server's)")
	return cmd
}
