package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// withStore resolves the global configuration of cmd, opens the store and
// runs f with it.
func (a *app) withStore(cmd *cobra.Command, f func(ctx context.Context, st store.Store) error) error {
	c, _, err := a.config(cmd, false)
	if err != nil {
		return err
	}
	st, err := openStore(cmd.Context(), c, a.logger(c))
	if err != nil {
		return err
	}
	defer st.Close()
	return f(cmd.Context(), st)
}

// writeJSONTo writes v as indented JSON and a newline.
func writeJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (a *app) migrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply the store's schema migrations and exit",
		Long: `Apply every pending schema migration to the store named by --data/--db and
exit. gyre serve and the operator commands migrate on their own; run this to
migrate ahead of a rollout. On PostgreSQL the migrations run under an
advisory lock, so replicas starting at the same time wait for them. A
database migrated by a newer gyre is refused.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := a.config(cmd, false)
			if err != nil {
				return err
			}
			log := a.logger(c)
			if err := storeopen.Migrate(cmd.Context(), storeOptions(c, log, true)); err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
			fmt.Fprintln(a.stderr, "the store's schema is up to date")
			return nil
		},
	}
}

// tenantName is the grammar of names gyre defines (SPEC §2).
var tenantName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,255}$`)

func validTenantName(s string) error {
	if !tenantName.MatchString(s) || s == "." || s == ".." {
		return usagef("invalid tenant name %q: use 1 to 255 letters, digits, '.', '_' or '-', and not . or ..", s)
	}
	return nil
}

func (a *app) tenantsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "Create and list tenants",
		Long: `Create and list tenants. A tenant owns agents, keys, suites, tasks, rollouts
and everything else; nothing crosses a tenant boundary.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	var asJSON bool
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a tenant and print its first admin key",
		Long: `Create a tenant and one admin key for it. The key goes to stdout, once: it is
stored only as a hash and cannot be shown again. With --json, stdout has the
tenant and the key as JSON.

NAME is 1 to 255 letters, digits, '.', '_' or '-'.`,
		Example: `  gyre tenants create acme > acme-admin.key`,
		Args:    argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := validTenantName(name); err != nil {
				return err
			}
			return a.withStore(cmd, func(ctx context.Context, st store.Store) error {
				t, err := st.CreateTenant(ctx, name)
				if errors.Is(err, store.ErrConflict) {
					return fmt.Errorf("tenant %q already exists", name)
				}
				if err != nil {
					return fmt.Errorf("create tenant: %w", err)
				}
				k, secret, err := auth.CreateKey(ctx, st, t.ID, auth.KeyRequest{Role: gyre.RoleAdmin, Name: "admin"})
				if err != nil {
					return fmt.Errorf("tenant %q was created but its admin key was not (run gyre keys create --tenant %s --role admin): %w", name, name, err)
				}
				if asJSON {
					return writeJSONTo(a.stdout, map[string]any{"tenant": t, "key": createdKey(k, secret, t.Name)})
				}
				fmt.Fprintln(a.stdout, secret)
				fmt.Fprintf(a.stderr, "created tenant %s (%s) and admin key %s; the key is shown only this once\n", t.Name, t.ID, k.ID)
				return nil
			})
		},
	}
	create.Flags().BoolVar(&asJSON, "json", false, "print the tenant and its key as JSON")

	var listJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List tenants",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd, func(ctx context.Context, st store.Store) error {
				ts, err := st.ListTenants(ctx)
				if err != nil {
					return fmt.Errorf("list tenants: %w", err)
				}
				if listJSON {
					if ts == nil {
						ts = []gyre.Tenant{}
					}
					return writeJSONTo(a.stdout, map[string]any{"items": ts})
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tID\tCREATED")
				for _, t := range ts {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.ID, t.CreatedAt.UTC().Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}
	list.Flags().BoolVar(&listJSON, "json", false, "print the tenants as JSON")
	cmd.AddCommand(create, list)
	return cmd
}

// createdKeyJSON is a new key as the CLI prints it with --json.
type createdKeyJSON struct {
	ID        string    `json:"id"`
	Key       string    `json:"key"`
	Tenant    string    `json:"tenant"`
	Role      gyre.Role `json:"role"`
	AgentIDs  []string  `json:"agent_ids"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

func createdKey(k gyre.APIKey, secret, tenant string) createdKeyJSON {
	return createdKeyJSON{ID: k.ID, Key: secret, Tenant: tenant, Role: k.Role, AgentIDs: k.AgentIDs, Name: k.Name, CreatedAt: k.CreatedAt}
}

// tenantByName finds a tenant or fails with a clear error.
func tenantByName(ctx context.Context, st store.Store, name string) (gyre.Tenant, error) {
	t, err := st.TenantByName(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return t, fmt.Errorf("no tenant %q (see gyre tenants list)", name)
	}
	if err != nil {
		return t, fmt.Errorf("find tenant: %w", err)
	}
	return t, nil
}

// flagOfPointer names the keys create flag a KeyRequest pointer is about.
func flagOfPointer(p string) string {
	switch {
	case p == "/role":
		return "--role"
	case strings.HasPrefix(p, "/agent_ids"):
		return "--agent"
	case p == "/name":
		return "--name"
	}
	return ""
}

func (a *app) keysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke API keys",
		Long: `Create, list and revoke a tenant's API keys. Roles (SPEC §3):

  agent      the flywheel/1 endpoints, optionally for the --agent ids only
  inference  the policy endpoint, for the --agent ids only when given
  evaluator  create experiments and record runs, read suites
  reader     every GET of the tenant
  admin      everything in the tenant

Keys are shown once, stored as SHA-256 hashes, and stop working the moment
they are revoked.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}

	var (
		tenant, role, name string
		agents             []string
		asJSON             bool
	)
	create := &cobra.Command{
		Use:   "create --tenant T --role R [--agent ID]... [--name N]",
		Short: "Create a key and print it once",
		Long: `Create an API key in a tenant and print it to stdout, once: it is stored only
as a hash and cannot be shown again. --agent (repeatable) limits an agent or
inference key to those agent ids. With --json, stdout has the key and its
metadata as JSON.`,
		Example: `  gyre keys create --tenant default --role reader --name dashboards
  gyre keys create --tenant default --role agent --agent support-bot --agent triage-bot`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "tenant", "role"); err != nil {
				return err
			}
			req := auth.KeyRequest{Role: gyre.Role(role), Name: name}
			if cmd.Flags().Changed("agent") {
				req.AgentIDs = agents
			}
			if err := req.Validate(); err != nil {
				var ge *gyre.Error
				if errors.As(err, &ge) {
					return usagef("%s: %s", flagOfPointer(ge.Pointer), ge.Message)
				}
				return usageError{err}
			}
			return a.withStore(cmd, func(ctx context.Context, st store.Store) error {
				t, err := tenantByName(ctx, st, tenant)
				if err != nil {
					return err
				}
				k, secret, err := auth.CreateKey(ctx, st, t.ID, req)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSONTo(a.stdout, createdKey(k, secret, t.Name))
				}
				fmt.Fprintln(a.stdout, secret)
				fmt.Fprintf(a.stderr, "created %s key %s in tenant %s; the key is shown only this once\n", k.Role, k.ID, t.Name)
				return nil
			})
		},
	}
	cf := create.Flags()
	cf.StringVar(&tenant, "tenant", "", "tenant name (required)")
	cf.StringVar(&role, "role", "", "role: agent, inference, evaluator, reader or admin (required)")
	cf.StringArrayVar(&agents, "agent", nil, "limit an agent or inference key to this agent id (repeatable)")
	cf.StringVar(&name, "name", "", "a name to recognise the key by")
	cf.BoolVar(&asJSON, "json", false, "print the key and its metadata as JSON")

	var listTenant string
	var listJSON bool
	list := &cobra.Command{
		Use:   "list --tenant T",
		Short: "List a tenant's keys, without secrets",
		Long: `List a tenant's keys, revoked ones too, oldest first. Secrets are never shown:
they are not stored. With --json, stdout has {"items":[…]}.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "tenant"); err != nil {
				return err
			}
			return a.withStore(cmd, func(ctx context.Context, st store.Store) error {
				t, err := tenantByName(ctx, st, listTenant)
				if err != nil {
					return err
				}
				keys := []gyre.APIKey{}
				cursor := ""
				for {
					page, next, err := st.ListKeys(ctx, t.ID, store.Page{Limit: 500, Cursor: cursor})
					if err != nil {
						return fmt.Errorf("list keys: %w", err)
					}
					keys = append(keys, page...)
					if next == "" {
						break
					}
					cursor = next
				}
				if listJSON {
					return writeJSONTo(a.stdout, map[string]any{"items": keys})
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tROLE\tNAME\tAGENTS\tCREATED\tREVOKED")
				for _, k := range keys {
					agents := "*"
					if k.AgentIDs != nil {
						agents = strings.Join(k.AgentIDs, ",")
					}
					revoked := "-"
					if k.RevokedAt != nil {
						revoked = k.RevokedAt.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Role, orDash(k.Name), agents, k.CreatedAt.UTC().Format(time.RFC3339), revoked)
				}
				return tw.Flush()
			})
		},
	}
	list.Flags().StringVar(&listTenant, "tenant", "", "tenant name (required)")
	list.Flags().BoolVar(&listJSON, "json", false, "print the keys as JSON")

	var revokeTenant string
	revoke := &cobra.Command{
		Use:   "revoke --tenant T ID",
		Short: "Revoke a key; it stops working at once",
		Long: `Revoke a key of a tenant by its id (see gyre keys list). The key stops working
at once, also on a running gyre serve. Revoking a revoked key succeeds.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "tenant"); err != nil {
				return err
			}
			id, err := uuid.Parse(args[0])
			if err != nil || len(args[0]) != 36 {
				return usagef("invalid key id %q: want a UUID as gyre keys list shows", args[0])
			}
			return a.withStore(cmd, func(ctx context.Context, st store.Store) error {
				t, err := tenantByName(ctx, st, revokeTenant)
				if err != nil {
					return err
				}
				err = st.RevokeKey(ctx, t.ID, id.String())
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("no key %s in tenant %s", id, t.Name)
				}
				if err != nil {
					return fmt.Errorf("revoke key: %w", err)
				}
				fmt.Fprintf(a.stderr, "revoked key %s of tenant %s\n", id, t.Name)
				return nil
			})
		},
	}
	revoke.Flags().StringVar(&revokeTenant, "tenant", "", "tenant name (required)")

	cmd.AddCommand(create, list, revoke)
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
