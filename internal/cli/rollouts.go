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

// rolloutSummaryJSON is a rollout as GET /api/v1/rollouts lists it.
type rolloutSummaryJSON struct {
	RolloutID       string     `json:"rollout_id"`
	AgentID         string     `json:"agent_id"`
	BatchID         string     `json:"batch_id"`
	Attempt         int        `json:"attempt"`
	State           string     `json:"state"`
	CreatedAt       time.Time  `json:"created_at"`
	SubmittedAt     *time.Time `json:"submitted_at"`
	ExclusionReason *string    `json:"exclusion_reason"`
	Reconciliation  *string    `json:"reconciliation"`
	TrainingGrade   *bool      `json:"training_grade"`
}

// rolloutDetailJSON is the part of GET /api/v1/rollouts/{id} the table
// shows.
type rolloutDetailJSON struct {
	RolloutID   string     `json:"rollout_id"`
	AgentID     string     `json:"agent_id"`
	TaskID      string     `json:"task_id"`
	BatchID     string     `json:"batch_id"`
	GroupID     string     `json:"group_id"`
	Attempt     int        `json:"attempt"`
	State       string     `json:"state"`
	WorkerID    *string    `json:"worker_id"`
	CreatedAt   time.Time  `json:"created_at"`
	ClaimedAt   *time.Time `json:"claimed_at"`
	SubmittedAt *time.Time `json:"submitted_at"`
	TurnInput   string     `json:"turn_input"`
	Output      *struct {
		FinalText *string `json:"final_text"`
		Success   *bool   `json:"success"`
	} `json:"output"`
	Exclusion *struct {
		Reason string `json:"reason"`
	} `json:"exclusion"`
	Gateway struct {
		Completions int `json:"completions"`
		Failed      int `json:"failed"`
	} `json:"gateway"`
	Reconciliation       *string  `json:"reconciliation"`
	ReconciliationReason *string  `json:"reconciliation_reason"`
	Reward               *float64 `json:"reward"`
	Verdicts             []struct {
		Grader string   `json:"grader"`
		Pass   *bool    `json:"pass"`
		Score  *float64 `json:"score"`
		Reason string   `json:"reason"`
	} `json:"verdicts"`
	TrainingGrade           *bool    `json:"training_grade"`
	NotTrainingGradeReasons []string `json:"not_training_grade_reasons"`
}

func (a *app) rolloutsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollouts",
		Short: "List, show and cancel rollouts; read their gateway calls and trajectories (over the API)",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	cmd.AddCommand(a.rolloutsListCommand(), a.rolloutsShowCommand(), a.rolloutsCallsCommand(),
		a.rolloutsTrajectoryCommand(), a.rolloutsCancelCommand())
	return cmd
}

func (a *app) rolloutsListCommand() *cobra.Command {
	var (
		f                   adminFlags
		p                   pageFlags
		agent, state, batch string
	)
	cmd := &cobra.Command{
		Use:   "list [--agent A] [--state S] [--batch ID]",
		Short: "List rollouts, newest first",
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
			for k, v := range map[string]string{"agent_id": agent, "state": state, "batch_id": batch} {
				if v != "" {
					q.Set(k, v)
				}
			}
			page, raw, err := fetchList(cmd.Context(), c, "/api/v1/rollouts", q, p)
			if err != nil {
				return err
			}
			return a.writeList(f.json, page, raw, "ROLLOUT\tAGENT\tSTATE\tATTEMPT\tEXCLUSION\tTRAINING GRADE\tCREATED",
				func(tw io.Writer, it json.RawMessage) error {
					var r rolloutSummaryJSON
					if err := decodeItem(it, &r); err != nil {
						return err
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.RolloutID, r.AgentID, r.State, r.Attempt,
						ptrOrDash(r.ExclusionReason), boolOrDash(r.TrainingGrade), r.CreatedAt.UTC().Format(time.RFC3339))
					return nil
				})
		},
	}
	f.register(cmd)
	p.register(cmd)
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's rollouts")
	cmd.Flags().StringVar(&state, "state", "", "only rollouts in this state (queued, leased, submitted, graded, abandoned, deadline_exceeded, cancelled, released)")
	cmd.Flags().StringVar(&batch, "batch", "", "only this batch's rollouts")
	return cmd
}

func (a *app) rolloutsShowCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "show ROLLOUT_ID",
		Short: "Show a rollout: state, output, gateway counts, verdicts, training grade",
		Long: `Show a rollout. The table has the fields a person reads first; --json prints
every field the API has (SPEC §4.8), the output and fingerprints whole.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, shown, err := a.adminCall(cmd, &f, http.MethodGet, "/api/v1/rollouts/"+pathSegment(args[0]), nil)
			if err != nil || shown {
				return err
			}
			return a.writeRollout(raw)
		},
	}
	f.register(cmd)
	return cmd
}

// writeRollout prints a rollout detail for people.
func (a *app) writeRollout(raw json.RawMessage) error {
	var r rolloutDetailJSON
	if err := decodeItem(raw, &r); err != nil {
		return err
	}
	output, success := "-", "-"
	if r.Output != nil {
		success = boolOrDash(r.Output.Success)
		if r.Output.FinalText != nil {
			output = clip(*r.Output.FinalText, 100)
		}
	}
	exclusion := "-"
	if r.Exclusion != nil {
		exclusion = r.Exclusion.Reason
	}
	reward := "-"
	if r.Reward != nil {
		reward = strconv.FormatFloat(*r.Reward, 'f', 3, 64)
	}
	recon := ptrOrDash(r.Reconciliation)
	if r.ReconciliationReason != nil {
		recon += " (" + *r.ReconciliationReason + ")"
	}
	reasons := strings.Join(r.NotTrainingGradeReasons, ", ")
	if reasons == "" {
		reasons = "-"
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"rollout", r.RolloutID}, {"agent", r.AgentID}, {"state", r.State}, {"attempt", strconv.Itoa(r.Attempt)},
		{"batch", r.BatchID}, {"task", r.TaskID}, {"group", r.GroupID}, {"worker", ptrOrDash(r.WorkerID)},
		{"created", r.CreatedAt.UTC().Format(time.RFC3339)}, {"claimed", timeOrDash(r.ClaimedAt)}, {"submitted", timeOrDash(r.SubmittedAt)},
		{"turn input", clip(r.TurnInput, 100)}, {"agent's success", success}, {"final text", output}, {"exclusion", exclusion},
		{"gateway", fmt.Sprintf("%d completions, %d failed calls", r.Gateway.Completions, r.Gateway.Failed)},
		{"reconciliation", recon}, {"reward", reward},
		{"training grade", boolOrDash(r.TrainingGrade)}, {"not training grade", reasons},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Verdicts) == 0 {
		fmt.Fprintln(a.stdout, "verdicts          none")
		return nil
	}
	fmt.Fprintln(a.stdout, "\nverdicts:")
	tw = tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GRADER\tPASS\tSCORE\tREASON")
	for _, v := range r.Verdicts {
		pass := "abstained"
		if v.Pass != nil {
			pass = strconv.FormatBool(*v.Pass)
		}
		score := "-"
		if v.Score != nil {
			score = strconv.FormatFloat(*v.Score, 'f', 3, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Grader, pass, score, clip(v.Reason, 80))
	}
	return tw.Flush()
}

// callJSON is the part of a recorded call the calls table shows.
type callJSON struct {
	Seq      int     `json:"seq"`
	Protocol string  `json:"protocol"`
	Status   int     `json:"status"`
	Counted  bool    `json:"counted"`
	Reason   *string `json:"reason"`
	Usage    *struct {
		PromptTokens     *int `json:"prompt_tokens"`
		CompletionTokens *int `json:"completion_tokens"`
	} `json:"usage"`
	Timings struct {
		ReceivedAt time.Time  `json:"received_at"`
		DoneAt     *time.Time `json:"done_at"`
	} `json:"timings"`
}

func (a *app) rolloutsCallsCommand() *cobra.Command {
	var (
		f adminFlags
		p pageFlags
	)
	cmd := &cobra.Command{
		Use:   "calls ROLLOUT_ID",
		Short: "List a rollout's gateway calls; --json has their request, forwarded and response bodies",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.check(cmd); err != nil {
				return err
			}
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			page, raw, err := fetchList(cmd.Context(), c, "/api/v1/rollouts/"+pathSegment(args[0])+"/calls", nil, p)
			if err != nil {
				return err
			}
			return a.writeList(f.json, page, raw, "SEQ\tPROTOCOL\tSTATUS\tCOUNTED\tREASON\tPROMPT TOKENS\tCOMPLETION TOKENS\tDURATION",
				func(tw io.Writer, it json.RawMessage) error {
					var cl callJSON
					if err := decodeItem(it, &cl); err != nil {
						return err
					}
					prompt, completion := "-", "-"
					if cl.Usage != nil {
						if cl.Usage.PromptTokens != nil {
							prompt = strconv.Itoa(*cl.Usage.PromptTokens)
						}
						if cl.Usage.CompletionTokens != nil {
							completion = strconv.Itoa(*cl.Usage.CompletionTokens)
						}
					}
					dur := "-"
					if cl.Timings.DoneAt != nil {
						dur = cl.Timings.DoneAt.Sub(cl.Timings.ReceivedAt).Round(time.Millisecond).String()
					}
					fmt.Fprintf(tw, "%d\t%s\t%d\t%v\t%s\t%s\t%s\t%s\n", cl.Seq, cl.Protocol, cl.Status, cl.Counted,
						ptrOrDash(cl.Reason), prompt, completion, dur)
					return nil
				})
		},
	}
	f.register(cmd)
	p.register(cmd)
	return cmd
}

func (a *app) rolloutsTrajectoryCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "trajectory ROLLOUT_ID",
		Short: "Print a rollout as an ATIF document (JSON, with or without --json)",
		Long: `Print the rollout's trajectory, built by the server from its counted gateway
completions and reported tool calls, as an ATIF document. It is JSON either
way: save it and check it with gyre atif validate. A rollout without a counted
completion has no trajectory yet (409 conflict).`,
		Example: `  gyre rollouts trajectory --server http://127.0.0.1:7070 0193… > rollout.atif.json && gyre atif validate rollout.atif.json`,
		Args:    argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if err := c.Call(cmd.Context(), http.MethodGet, "/api/v1/rollouts/"+pathSegment(args[0])+"/trajectory", nil, &raw); err != nil {
				return err
			}
			return writeRawJSON(a.stdout, raw)
		},
	}
	f.register(cmd)
	return cmd
}

func (a *app) rolloutsCancelCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "cancel ROLLOUT_ID",
		Short: "Cancel a queued or running rollout, revoking its gateway token (admin)",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, shown, err := a.adminCall(cmd, &f, http.MethodPost, "/api/v1/rollouts/"+pathSegment(args[0])+"/cancel", nil)
			if err != nil || shown {
				return err
			}
			var r rolloutSummaryJSON
			if err := decodeItem(raw, &r); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ROLLOUT\tSTATE")
			fmt.Fprintf(tw, "%s\t%s\n", r.RolloutID, r.State)
			return tw.Flush()
		},
	}
	f.register(cmd)
	return cmd
}
