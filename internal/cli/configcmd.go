package cli

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/ratelimit"

	"github.com/spf13/cobra"
)

func (a *app) configCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "config [serve flags]",
		Short: "Print the configuration gyre serve would run with",
		Long: `Resolve the configuration exactly as gyre serve does (flags, then GYRE_<FLAG>
environment variables, then the --config file, then defaults), check it, and
print each setting with where its value came from, then the config file's
upstreams (whether each one's key variable is set, never the key), rate
limits and the executables command graders may run. It exits 2 when the configuration is invalid. Passwords in --db are
shown redacted.`,
		Example: `  GYRE_ADDR=:8080 gyre config --public-url https://gyre.example.com`,
		Args:    argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, from, err := a.config(cmd, true)
			if err != nil {
				return err
			}
			if asJSON {
				out := make(map[string]any, len(from)+2)
				for _, s := range settings {
					out[s.key()] = from[s.flag]
				}
				out["upstreams"], out["limits"] = upstreamViews(cfg.Upstreams), limitViews(cfg.Limits)
				out["command_allow"] = commandAllowViews(cfg.CommandAllow)
				return writeJSONTo(a.stdout, out)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SETTING\tVALUE\tSOURCE")
			for _, s := range settings {
				v := from[s.flag]
				val := v.Value
				if val == "" {
					val = `""`
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.flag, val, v.Source)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return writeSections(a.stdout, cfg)
		},
	}
	bindFlags(cmd.Flags(), true)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the settings as JSON")
	return cmd
}

// upstreamView is one upstream as gyre config shows it: the name of its
// key's environment variable and whether a key is sent, never the key.
type upstreamView struct {
	Name         string   `json:"name"`
	BaseURL      string   `json:"base_url"`
	APIKeyEnv    string   `json:"api_key_env"`
	KeySet       bool     `json:"key_set"`
	Tenants      []string `json:"tenants"`
	AllowPrivate bool     `json:"allow_private"`
	// Protocols are the protocols the upstream speaks, [chat] when the
	// file lists none.
	Protocols []string `json:"protocols"`
}

func upstreamViews(ups []UpstreamConfig) []upstreamView {
	out := make([]upstreamView, len(ups))
	for i, u := range ups {
		tenants := u.Tenants
		if len(tenants) == 0 {
			tenants = []string{"*"}
		}
		protocols := u.Protocols
		if protocols == nil {
			protocols = gateway.DefaultProtocols
		}
		out[i] = upstreamView{Name: u.Name, BaseURL: redactURL(u.BaseURL), APIKeyEnv: u.APIKeyEnv, KeySet: u.APIKey != "",
			Tenants: tenants, AllowPrivate: u.AllowPrivate}
		for _, p := range protocols {
			out[i].Protocols = append(out[i].Protocols, string(p))
		}
	}
	return out
}

// limitView is one tenant's limit on one surface; a rate is null when
// that bucket is not limited.
type limitView struct {
	Tenant    string  `json:"tenant"`
	Surface   string  `json:"surface"`
	PerKey    *string `json:"per_key"`
	PerTenant *string `json:"per_tenant"`
}

// limitViews lists the configured limits by tenant name ("*" first), then
// surface in SPEC order.
func limitViews(cfg ratelimit.Config) []limitView {
	tenants := slices.SortedFunc(maps.Keys(cfg), func(a, b string) int {
		if (a == ratelimit.AllTenants) != (b == ratelimit.AllTenants) {
			if a == ratelimit.AllTenants {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	out := []limitView{}
	for _, t := range tenants {
		for _, s := range ratelimit.Surfaces {
			l, ok := cfg[t][s]
			if !ok {
				continue
			}
			out = append(out, limitView{Tenant: t, Surface: string(s), PerKey: rateText(l.PerKey), PerTenant: rateText(l.PerTenant)})
		}
	}
	return out
}

func rateText(r *ratelimit.Rate) *string {
	if r == nil {
		return nil
	}
	s := r.String()
	return &s
}

// writeSections prints the upstreams and limits after the settings.
func writeSections(w io.Writer, cfg Config) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw)
	if len(cfg.Upstreams) == 0 {
		fmt.Fprintln(tw, "upstreams: none (the config file's upstreams: section)")
	} else {
		fmt.Fprintln(tw, "UPSTREAM\tBASE_URL\tAPI_KEY_ENV\tKEY\tTENANTS\tALLOW_PRIVATE\tPROTOCOLS")
		for _, u := range upstreamViews(cfg.Upstreams) {
			key := "none"
			if u.KeySet {
				key = "set"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%s\n", u.Name, u.BaseURL, orDash(u.APIKeyEnv), key, strings.Join(u.Tenants, ","),
				u.AllowPrivate, strings.Join(u.Protocols, ","))
		}
	}
	fmt.Fprintln(tw)
	limits := limitViews(cfg.Limits)
	if len(limits) == 0 {
		fmt.Fprintln(tw, "limits: none (the config file's limits: section)")
	} else {
		fmt.Fprintln(tw, "LIMIT_TENANT\tSURFACE\tPER_KEY\tPER_TENANT")
		for _, l := range limits {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Tenant, l.Surface, orDash(deref(l.PerKey)), orDash(deref(l.PerTenant)))
		}
	}
	fmt.Fprintln(tw)
	if len(cfg.CommandAllow) == 0 {
		fmt.Fprintln(tw, "command graders: none allowed (the config file's graders.command.allow)")
	} else {
		fmt.Fprintln(tw, "COMMAND_ALLOW\tTENANTS")
		for _, c := range commandAllowViews(cfg.CommandAllow) {
			fmt.Fprintf(tw, "%s\t%s\n", c.Path, strings.Join(c.Tenants, ","))
		}
	}
	return tw.Flush()
}

// commandAllowView is one graders.command.allow entry as gyre config
// shows it.
type commandAllowView struct {
	Path    string   `json:"path"`
	Tenants []string `json:"tenants"`
}

func commandAllowViews(l grade.CommandAllowList) []commandAllowView {
	out := make([]commandAllowView, len(l))
	for i, c := range l {
		tenants := c.Tenants
		if len(tenants) == 0 {
			tenants = []string{"*"}
		}
		out[i] = commandAllowView{Path: c.Path, Tenants: tenants}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
