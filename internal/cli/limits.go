package cli

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gyrehq/gyre/internal/ratelimit"
)

// limitKeys are the keys of one surface's entry in limits:.
var limitKeys = []string{"per_key", "per_tenant"}

// parseLimits parses the config file's limits: section (SPEC §2):
//
//	limits:
//	  "*":                       # every tenant without an entry of its own
//	    turns:  {per_key: 100/s, per_tenant: 1000/s}
//	    claims: {per_key: 50/s}
//	  acme:
//	    gateway: {per_key: "20/s burst 40", per_tenant: 200/s}
//	    admin:   {per_tenant: 600/m}
//
// Every error names its line.
func parseLimits(n *yaml.Node) (ratelimit.Config, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: limits must map tenant names (or \"*\") to their limits", n.Line)
	}
	surfaces := make([]string, len(ratelimit.Surfaces))
	for i, s := range ratelimit.Surfaces {
		surfaces[i] = string(s)
	}
	cfg := ratelimit.Config{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		tk, tv := n.Content[i], n.Content[i+1]
		tenant := tk.Value
		if tenant != ratelimit.AllTenants {
			if err := validTenantName(tenant); err != nil {
				return nil, fmt.Errorf("line %d: limits: %q is not \"*\" or a tenant name: %v", tk.Line, tenant, err)
			}
		}
		if _, dup := cfg[tenant]; dup {
			return nil, fmt.Errorf("line %d: limits: tenant %q is set twice", tk.Line, tenant)
		}
		if tv.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: limits.%s must map surfaces (%s) to rates", tv.Line, tenant, strings.Join(surfaces, ", "))
		}
		bySurface := map[ratelimit.Surface]ratelimit.Limit{}
		for j := 0; j+1 < len(tv.Content); j += 2 {
			sk, sv := tv.Content[j], tv.Content[j+1]
			where := "limits." + tenant + "." + sk.Value
			if !slices.Contains(surfaces, sk.Value) {
				return nil, fmt.Errorf("line %d: limits.%s: unknown surface %q (known: %s)", sk.Line, tenant, sk.Value, strings.Join(surfaces, ", "))
			}
			s := ratelimit.Surface(sk.Value)
			if _, dup := bySurface[s]; dup {
				return nil, fmt.Errorf("line %d: %s is set twice", sk.Line, where)
			}
			if sv.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("line %d: %s must be a mapping with per_key and/or per_tenant", sv.Line, where)
			}
			var l ratelimit.Limit
			seen := map[string]bool{}
			for m := 0; m+1 < len(sv.Content); m += 2 {
				k, v := sv.Content[m], sv.Content[m+1]
				if !slices.Contains(limitKeys, k.Value) {
					return nil, fmt.Errorf("line %d: %s: unknown key %q (known keys: %s)", k.Line, where, k.Value, strings.Join(limitKeys, ", "))
				}
				if seen[k.Value] {
					return nil, fmt.Errorf("line %d: %s.%s is set twice", k.Line, where, k.Value)
				}
				seen[k.Value] = true
				if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
					return nil, fmt.Errorf("line %d: %s.%s must be a rate such as 100/s or \"600/m burst 50\"", v.Line, where, k.Value)
				}
				r, err := ratelimit.ParseRate(v.Value)
				if err != nil {
					return nil, fmt.Errorf("line %d: %s.%s: %v", v.Line, where, k.Value, err)
				}
				if k.Value == "per_key" {
					l.PerKey = &r
				} else {
					l.PerTenant = &r
				}
			}
			if l.PerKey == nil && l.PerTenant == nil {
				return nil, fmt.Errorf("line %d: %s needs per_key, per_tenant or both", sv.Line, where)
			}
			bySurface[s] = l
		}
		cfg[tenant] = bySurface
	}
	return cfg, nil
}
