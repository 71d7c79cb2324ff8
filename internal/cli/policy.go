package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/store"
)

// policyJSON is a policy as the API shows it.
type policyJSON struct {
	Name              string          `json:"name"`
	Upstream          string          `json:"upstream"`
	Model             string          `json:"model"`
	Tokenizer         *string         `json:"tokenizer"`
	SamplingOverrides json.RawMessage `json:"sampling_overrides"`
	Prices            json.RawMessage `json:"prices"`
	CaptureTokens     bool            `json:"capture_tokens"`
	SHA256            string          `json:"sha256"`
	CreatedAt         time.Time       `json:"created_at"`
}

func (a *app) policyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Create, list and show policies; promote one for an agent, or roll back (over the API)",
		Long: `Manage a tenant's gateway policies on a running gyre serve (--server, an
admin or reader key from --key-file or GYRE_KEY). A policy names an upstream
the operator configured and the model it serves; policies are immutable.

gyre policy promote starts a promotion: the agent runs under the baseline
and the candidate over the same tasks and the promotion gate decides
(docs/promotion.md); gyre promotions lists, shows and cancels them.
gyre policy rollback restores an agent's previous promoted policy.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(a.policyCreateCommand(), a.policyListCommand(), a.policyShowCommand(), a.policyPromoteCommand(), a.policyRollbackCommand())
	return cmd
}

func (a *app) policyCreateCommand() *cobra.Command {
	var (
		f                                adminFlags
		name, upstream, model, tokenizer string
		file                             string
	)
	cmd := &cobra.Command{
		Use:   "create (--name N --upstream U --model M | --file POLICY.json)",
		Short: "Create a policy (an identical one again is not an error)",
		Example: `  gyre policy create --server http://127.0.0.1:7070 --key-file admin.key --name base-v1 --upstream local-vllm --model qwen3-8b
  gyre policy create --server http://127.0.0.1:7070 --file policy.json --json`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var body any
			switch {
			case file != "" && (name != "" || upstream != "" || model != "" || tokenizer != ""):
				return usagef("--file and --name/--upstream/--model/--tokenizer are exclusive")
			case file != "":
				b, err := os.ReadFile(file)
				if err != nil {
					return usagef("--file: %v", err)
				}
				if !json.Valid(b) {
					return usagef("--file: %s is not JSON", file)
				}
				body = json.RawMessage(b)
			default:
				if err := requireFlags(cmd, "name", "upstream", "model"); err != nil {
					return err
				}
				m := map[string]string{"name": name, "upstream": upstream, "model": model}
				if tokenizer != "" {
					m["tokenizer"] = tokenizer
				}
				body = m
			}
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			var p policyJSON
			if err := c.Call(cmd.Context(), http.MethodPost, "/api/v1/policies", body, &p); err != nil {
				return err
			}
			if f.json {
				return writeJSONTo(a.stdout, p)
			}
			fmt.Fprintf(a.stdout, "%s\t%s\t%s\n", p.Name, p.Upstream, p.Model)
			fmt.Fprintf(a.stderr, "policy %s serves model %s through upstream %s\n", p.Name, p.Model, p.Upstream)
			return nil
		},
	}
	f.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&name, "name", "", "policy name")
	fs.StringVar(&upstream, "upstream", "", "upstream the operator configured")
	fs.StringVar(&model, "model", "", "model the upstream serves")
	fs.StringVar(&tokenizer, "tokenizer", "", "tokenizer id (optional)")
	fs.StringVar(&file, "file", "", "a policy document as JSON (SPEC §6.1), for sampling_overrides, prices, capture_tokens")
	return cmd
}

func (a *app) policyListCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the tenant's policies",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			ps, err := listAll[policyJSON](cmd.Context(), c, "/api/v1/policies")
			if err != nil {
				return err
			}
			if f.json {
				if ps == nil {
					ps = []policyJSON{}
				}
				return writeJSONTo(a.stdout, map[string]any{"items": ps})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tUPSTREAM\tMODEL\tCREATED")
			for _, p := range ps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Name, p.Upstream, p.Model, p.CreatedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	f.register(cmd)
	return cmd
}

func (a *app) policyShowCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show one policy and the promotions it took part in, with their evidence",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			ps, err := listAll[policyJSON](cmd.Context(), c, "/api/v1/policies")
			if err != nil {
				return err
			}
			for _, p := range ps {
				if p.Name != args[0] {
					continue
				}
				promos, err := policyPromotions(cmd.Context(), c, p.Name)
				if err != nil {
					return err
				}
				if f.json {
					return writeJSONTo(a.stdout, struct {
						policyJSON
						Promotions []promotionRaw `json:"promotions"`
					}{p, promos})
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "name\t%s\nupstream\t%s\nmodel\t%s\ntokenizer\t%s\n", p.Name, p.Upstream, p.Model, ptrOrDash(p.Tokenizer))
				fmt.Fprintf(tw, "sampling_overrides\t%s\nprices\t%s\ncapture_tokens\t%v\nsha256\t%s\ncreated\t%s\n",
					rawOrDash(p.SamplingOverrides), rawOrDash(p.Prices), p.CaptureTokens, p.SHA256, p.CreatedAt.Format(time.RFC3339))
				if err := tw.Flush(); err != nil {
					return err
				}
				return printPolicyPromotions(a.stdout, p.Name, promos)
			}
			return fmt.Errorf("no policy %q in this tenant", args[0])
		},
	}
	f.register(cmd)
	return cmd
}

func (a *app) policyRollbackCommand() *cobra.Command {
	var (
		f     adminFlags
		agent string
	)
	cmd := &cobra.Command{
		Use:   "rollback --agent A",
		Short: "Restore an agent's previous promoted policy (admin)",
		Long: `Pop one entry of the agent's promoted-policy history and restore the one
before it. The policy endpoint serves the restored policy at once; running
rollouts keep the policy their batch resolved when it was created. Fails
when the agent has no previous promoted policy.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "agent"); err != nil {
				return err
			}
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			var d agentDetailJSON
			err = c.Call(cmd.Context(), http.MethodPost, "/api/v1/agents/"+pathSegment(agent)+"/rollback", nil, &d)
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("gyre has never seen agent %q in this tenant", agent)
			}
			var se *eval.ServerError
			if errors.As(err, &se) && se.Code == "no_previous_policy" {
				return fmt.Errorf("agent %q has no previous promoted policy to roll back to", agent)
			}
			if err != nil {
				return err
			}
			if f.json {
				return writeJSONTo(a.stdout, d)
			}
			fmt.Fprintf(a.stdout, "%s\t%s\n", d.AgentID, ptrOrDash(d.PromotedPolicy))
			fmt.Fprintf(a.stderr, "agent %s: promoted policy is now %s\n", d.AgentID, ptrOrDash(d.PromotedPolicy))
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&agent, "agent", "", "agent id")
	return cmd
}

// rawOrDash prints JSON, or "-" for null or nothing.
func rawOrDash(r json.RawMessage) string {
	if len(r) == 0 || string(r) == "null" {
		return "-"
	}
	return string(r)
}
