package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/grade"
)

// taskRefJSON names a created task.
type taskRefJSON struct {
	TaskID string `json:"task_id"`
	CaseID string `json:"case_id"`
}

func (a *app) tasksCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "Make tasks from a suite or from production turns (over the API)",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	cmd.AddCommand(a.tasksCreateCommand(), a.tasksFromTurnsCommand())
	return cmd
}

func (a *app) tasksCreateCommand() *cobra.Command {
	var (
		f              adminFlags
		suiteName, ver string
	)
	cmd := &cobra.Command{
		Use:   "create --suite NAME [--version V]",
		Short: "Make one task per case of an uploaded suite version (admin)",
		Long: `Make one task per case of a suite version the server holds (the latest
unless --version), with the case's graders frozen on it. A case with files
cannot become a task (422 files_unsupported) and then no task is made.`,
		Example: `  gyre tasks create --server http://127.0.0.1:7070 --key-file admin.key --suite refunds`,
		Args:    argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "suite"); err != nil {
				return err
			}
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			body := map[string]string{"suite": suiteName}
			if cmd.Flags().Lookup("version").Changed {
				body["version"] = ver
			}
			var raw json.RawMessage
			if err := c.Call(cmd.Context(), http.MethodPost, "/api/v1/tasks", body, &raw); err != nil {
				return err
			}
			if f.json {
				return writeRawJSON(a.stdout, raw)
			}
			var ans struct {
				Suite   string        `json:"suite"`
				Version string        `json:"version"`
				Items   []taskRefJSON `json:"items"`
			}
			if err := decodeItem(raw, &ans); err != nil {
				return err
			}
			if err := a.writeTaskRefs("CASE", ans.Items); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "made %d tasks from suite %s version %s\n", len(ans.Items), ans.Suite, ans.Version)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&suiteName, "suite", "", "suite name")
	cmd.Flags().StringVar(&ver, "version", "", "suite version (default: the latest)")
	return cmd
}

func (a *app) tasksFromTurnsCommand() *cobra.Command {
	var (
		f                               adminFlags
		agent, conversation, since, til string
		turns                           []string
		sample                          int
		seed                            int64
		skipExisting                    bool
		graders                         string
	)
	cmd := &cobra.Command{
		Use:   "from-turns --agent A --graders FILE|JSON [--turn ID]... [--conversation C] [--since T] [--until T] [--sample N [--seed S]] [--skip-existing]",
		Short: "Make tasks that replay stored production turns (admin)",
		Long: `Make one task per stored production turn of an agent, replaying its
input_text, every task judged by the grader declarations of --graders (a
YAML or JSON file holding a list, or an inline JSON list such as '[]').

Either list the turns (--turn, repeatable) or select them: --conversation,
--since (inclusive) and --until (exclusive), each an RFC 3339 time or a
duration before now (24h), and --sample N to keep N of them chosen by --seed
(default 0: the same seed picks the same turns). Without --turn and filters
every turn of the agent is selected. A call makes at most 1000 tasks; select
more only with --sample. --skip-existing leaves out turns already made into
tasks, so running the same command again makes tasks only of new turns.
Selected turns whose input_text is null are skipped and counted.`,
		Example: `  gyre tasks from-turns --server http://127.0.0.1:7070 --agent support-bot --since 24h --sample 50 --seed 7 --skip-existing --graders graders.yaml
  gyre tasks from-turns --server http://127.0.0.1:7070 --agent support-bot --turn t-1 --turn t-2 --graders '[{"contains":"refund"}]'`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "agent", "graders"); err != nil {
				return err
			}
			fs := cmd.Flags()
			if len(turns) > 0 {
				for _, n := range []string{"conversation", "since", "until", "sample", "seed"} {
					if fs.Lookup(n).Changed {
						return usagef("--turn lists turns and --%s selects them: use one or the other", n)
					}
				}
			}
			if fs.Lookup("seed").Changed && !fs.Lookup("sample").Changed {
				return usagef("--seed chooses which turns --sample keeps: set --sample too")
			}
			g, err := gradersArg(graders)
			if err != nil {
				return err
			}
			body := map[string]any{"agent_id": agent, "graders": g}
			if len(turns) > 0 {
				body["turn_ids"] = turns
			}
			if fs.Lookup("conversation").Changed {
				body["conversation_id"] = conversation
			}
			now := time.Now()
			for _, tf := range []struct {
				flag, key, v string
			}{{"since", "since", since}, {"until", "until", til}} {
				if !fs.Lookup(tf.flag).Changed {
					continue
				}
				t, err := parseSince(tf.flag, tf.v, now)
				if err != nil {
					return err
				}
				body[tf.key] = t
			}
			if fs.Lookup("sample").Changed {
				body["sample"] = sample
				body["seed"] = seed
			}
			if skipExisting {
				body["skip_existing"] = true
			}
			raw, shown, err := a.adminCall(cmd, &f, http.MethodPost, "/api/v1/tasks/from-turns", body)
			if err != nil || shown {
				return err
			}
			var ans struct {
				Items              []taskRefJSON `json:"items"`
				Matched            int           `json:"matched"`
				SkippedExisting    int           `json:"skipped_existing"`
				SkippedNoInputText int           `json:"skipped_no_input_text"`
			}
			if err := decodeItem(raw, &ans); err != nil {
				return err
			}
			if err := a.writeTaskRefs("TURN", ans.Items); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "made %d tasks: %d turns matched, %d skipped as already tasks, %d skipped with input_text null\n",
				len(ans.Items), ans.Matched, ans.SkippedExisting, ans.SkippedNoInputText)
			return nil
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&agent, "agent", "", "agent id whose turns to replay")
	fs.StringArrayVar(&turns, "turn", nil, "a turn id to replay (repeatable); exclusive with the filters")
	fs.StringVar(&conversation, "conversation", "", "select the turns of this conversation_id")
	fs.StringVar(&since, "since", "", "select turns received at or after this time (RFC 3339, or a duration before now)")
	fs.StringVar(&til, "until", "", "select turns received before this time (RFC 3339, or a duration before now)")
	fs.IntVar(&sample, "sample", 0, "keep this many of the selected turns, 1 to 1000")
	fs.Int64Var(&seed, "seed", 0, "the seed that chooses the sample")
	fs.BoolVar(&skipExisting, "skip-existing", false, "leave out turns already made into tasks")
	fs.StringVar(&graders, "graders", "", "grader declarations: a YAML or JSON file holding a list, or an inline JSON list")
	return cmd
}

// gradersArg reads a --graders value: an inline JSON list, or a file
// holding one in YAML or JSON, checked here so a mistake is a usage
// error.
func gradersArg(v string) (json.RawMessage, error) {
	if t := strings.TrimSpace(v); strings.HasPrefix(t, "[") {
		raw := json.RawMessage(t)
		if !json.Valid(raw) {
			return nil, usagef("--graders: %q is not a JSON list", v)
		}
		specs, err := grade.ParseSpecsAt(raw, "")
		if err != nil {
			return nil, usagef("--graders: %v", err)
		}
		if _, err := grade.Compile(specs); err != nil {
			return nil, usagef("--graders: %v", err)
		}
		return raw, nil
	}
	raw, _, err := readGradersFile(v)
	if err != nil {
		return nil, err
	}
	return compactJSON(raw), nil
}

// compactJSON drops a JSON value's insignificant whitespace.
func compactJSON(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// writeTaskRefs prints created tasks: their ids and the case (or turn)
// each came from.
func (a *app) writeTaskRefs(what string, items []taskRefJSON) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TASK\t%s\n", what)
	for _, t := range items {
		fmt.Fprintf(tw, "%s\t%s\n", t.TaskID, t.CaseID)
	}
	return tw.Flush()
}
