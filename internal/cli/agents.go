package cli

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/store"
)

// agentJSON is an agent as GET /api/v1/agents shows it.
type agentJSON struct {
	AgentID     string         `json:"agent_id"`
	FirstSeenAt time.Time      `json:"first_seen_at"`
	Rollouts    map[string]int `json:"rollouts"`
	Exclusions  map[string]int `json:"exclusions"`
}

// agentDetailJSON is GET /api/v1/agents/{agent_id}.
type agentDetailJSON struct {
	agentJSON
	PromotedPolicy *string           `json:"promoted_policy"`
	History        []policyEntryJSON `json:"history"`
}

// policyEntryJSON is one entry of an agent's promoted-policy history.
type policyEntryJSON struct {
	Seq          int64      `json:"seq"`
	Policy       string     `json:"policy"`
	SetBy        string     `json:"set_by"`
	SetAt        time.Time  `json:"set_at"`
	PromotionID  *string    `json:"promotion_id"`
	RolledBackAt *time.Time `json:"rolled_back_at"`
	RolledBackBy *string    `json:"rolled_back_by"`
}

func (a *app) agentsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "List agents and show one with its promoted policy and history (over the API)",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	cmd.AddCommand(a.agentsListCommand(), a.agentsShowCommand())
	return cmd
}

func (a *app) agentsListCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the agents gyre has seen in the tenant, with rollout counts",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			as, err := listAll[agentJSON](cmd.Context(), c, "/api/v1/agents")
			if err != nil {
				return err
			}
			if f.json {
				if as == nil {
					as = []agentJSON{}
				}
				return writeJSONTo(a.stdout, map[string]any{"items": as})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tFIRST SEEN\tROLLOUTS")
			for _, ag := range as {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", ag.AgentID, ag.FirstSeenAt.Format(time.RFC3339), counts(ag.Rollouts))
			}
			return tw.Flush()
		},
	}
	f.register(cmd)
	return cmd
}

func (a *app) agentsShowCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "show AGENT",
		Short: "Show an agent: rollout counts, promoted policy and its history",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			var d agentDetailJSON
			err = c.Call(cmd.Context(), http.MethodGet, "/api/v1/agents/"+pathSegment(args[0]), nil, &d)
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("gyre has never seen agent %q in this tenant", args[0])
			}
			if err != nil {
				return err
			}
			if f.json {
				return writeJSONTo(a.stdout, d)
			}
			fmt.Fprintf(a.stdout, "agent            %s\nfirst seen       %s\npromoted policy  %s\nrollouts         %s\nexclusions       %s\n",
				d.AgentID, d.FirstSeenAt.Format(time.RFC3339), ptrOrDash(d.PromotedPolicy), counts(d.Rollouts), counts(d.Exclusions))
			if len(d.History) == 0 {
				fmt.Fprintln(a.stdout, "history          none")
				return nil
			}
			fmt.Fprintln(a.stdout, "\nhistory:")
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tPOLICY\tSET BY\tSET AT\tPROMOTION\tROLLED BACK")
			for _, e := range d.History {
				back := "-"
				if e.RolledBackAt != nil {
					back = e.RolledBackAt.Format(time.RFC3339) + " by " + ptrOrDash(e.RolledBackBy)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.Policy, e.SetBy, e.SetAt.Format(time.RFC3339), ptrOrDash(e.PromotionID), back)
			}
			return tw.Flush()
		},
	}
	f.register(cmd)
	return cmd
}

// counts prints a count map as "a=1 b=2", sorted; "-" when empty.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
