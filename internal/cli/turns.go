package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/spf13/cobra"
)

// turnJSON is the part of a stored turn the turns table shows.
type turnJSON struct {
	AgentID        string    `json:"agent_id"`
	TurnID         string    `json:"turn_id"`
	ConversationID *string   `json:"conversation_id"`
	InputText      *string   `json:"input_text"`
	FinalText      *string   `json:"final_text"`
	ReceivedAt     time.Time `json:"received_at"`
}

func (a *app) turnsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "turns",
		Short: "List captured production turns (over the API)",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	cmd.AddCommand(a.turnsListCommand())
	return cmd
}

func (a *app) turnsListCommand() *cobra.Command {
	var (
		f                          adminFlags
		p                          pageFlags
		agent, conversation, since string
	)
	cmd := &cobra.Command{
		Use:   "list [--agent A] [--conversation C] [--since T]",
		Short: "List stored production turns in order of receipt",
		Long: `List the production turns gyre stored, oldest first. --since is an RFC 3339
time or a duration before now (24h). --json prints each turn exactly as it
was sent, between agent_id and received_at; the table clips the texts.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.check(cmd); err != nil {
				return err
			}
			q := url.Values{}
			if agent != "" {
				q.Set("agent_id", agent)
			}
			if cmd.Flags().Lookup("conversation").Changed {
				q.Set("conversation_id", conversation)
			}
			if cmd.Flags().Lookup("since").Changed {
				t, err := parseSince("since", since, time.Now())
				if err != nil {
					return err
				}
				q.Set("since", t)
			}
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			page, raw, err := fetchList(cmd.Context(), c, "/api/v1/turns", q, p)
			if err != nil {
				return err
			}
			return a.writeList(f.json, page, raw, "AGENT\tTURN\tCONVERSATION\tRECEIVED\tINPUT\tFINAL",
				func(tw io.Writer, it json.RawMessage) error {
					var t turnJSON
					if err := decodeItem(it, &t); err != nil {
						return err
					}
					in, out := "null", "null"
					if t.InputText != nil {
						in = clip(*t.InputText, 40)
					}
					if t.FinalText != nil {
						out = clip(*t.FinalText, 40)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.AgentID, t.TurnID, ptrOrDash(t.ConversationID),
						t.ReceivedAt.UTC().Format(time.RFC3339), in, out)
					return nil
				})
		},
	}
	f.register(cmd)
	p.register(cmd)
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's turns")
	cmd.Flags().StringVar(&conversation, "conversation", "", "only the turns of this conversation_id")
	cmd.Flags().StringVar(&since, "since", "", "only turns received at or after this time (RFC 3339, or a duration before now)")
	return cmd
}
