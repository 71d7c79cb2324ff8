package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
)

// The config file's grading sections.
const (
	gradersKey  = "graders"
	policiesKey = "policies"
)

// errServePolicies is gyre serve's answer to a policies: section.
var errServePolicies = errors.New("policies: is a setting of gyre eval run; in gyre serve, policies live in the store: " +
	"create them with POST /api/v1/policies (a judge grader uses the tenant's policy it names, else the policy --default-policy names)")

// PolicyConfig is one entry of the config file's policies: section: a
// policy of the CLI evaluator's judge graders, over the config file's
// upstreams (SPEC §8). gyre serve refuses the section.
type PolicyConfig struct {
	// Name is how judge graders refer to the policy (policy: NAME).
	Name string
	// Doc is the entry as JSON, in the shape of POST /api/v1/policies.
	Doc json.RawMessage
	// Line is where the entry starts in the config file, for messages.
	Line int
}

// policyKeys are the keys of one policies: entry, as POST /api/v1/policies.
var policyKeys = []string{"name", "upstream", "model", "tokenizer", "sampling_overrides", "prices", "capture_tokens"}

// parsePolicies parses the policies: section: a list of mappings with
// the keys of policyKeys.
func parsePolicies(n *yaml.Node) ([]PolicyConfig, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: policies must be a list of policies (- name: …, upstream: …, model: …)", n.Line)
	}
	out := make([]PolicyConfig, 0, len(n.Content))
	for i, item := range n.Content {
		if item.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: policies[%d] must be a mapping (%s)", item.Line, i, strings.Join(policyKeys, ", "))
		}
		for j := 0; j+1 < len(item.Content); j += 2 {
			if k := item.Content[j]; !slices.Contains(policyKeys, k.Value) {
				return nil, fmt.Errorf("line %d: policies[%d]: unknown key %q (known keys: %s)", k.Line, i, k.Value, strings.Join(policyKeys, ", "))
			}
		}
		var v map[string]any
		if err := item.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: policies[%d]: %w", item.Line, i, err)
		}
		doc, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("line %d: policies[%d]: %w", item.Line, i, err)
		}
		p := PolicyConfig{Doc: doc, Line: item.Line}
		if name, ok := v["name"].(string); ok {
			p.Name = name
		}
		out = append(out, p)
	}
	return out, nil
}

// policyInput reads a policy document as POST /api/v1/policies does.
func policyInput(doc json.RawMessage) (gateway.PolicyInput, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		return gateway.PolicyInput{}, err
	}
	var in gateway.PolicyInput
	str := func(key string) (*string, error) {
		raw, ok := m[key]
		if !ok || string(raw) == "null" {
			return nil, nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%s must be a string", key)
		}
		return &s, nil
	}
	var err error
	if in.Name, err = str("name"); err != nil {
		return in, err
	}
	if in.Upstream, err = str("upstream"); err != nil {
		return in, err
	}
	if in.Model, err = str("model"); err != nil {
		return in, err
	}
	if in.Tokenizer, err = str("tokenizer"); err != nil {
		return in, err
	}
	in.SamplingOverrides, in.Prices = m["sampling_overrides"], m["prices"]
	if raw, ok := m["capture_tokens"]; ok && string(raw) != "null" {
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return in, errors.New("capture_tokens must be true or false")
		}
		in.CaptureTokens = &b
	}
	return in, nil
}

// judgeUpstreams are the upstreams as the CLI evaluator's judge uses
// them: the operator running gyre eval is the only user, so tenants:
// allow-lists do not apply.
func (c Config) judgeUpstreams() []gateway.Upstream {
	ups := c.GatewayUpstreams()
	for i := range ups {
		ups[i].Tenants = nil
	}
	return ups
}

// JudgePolicies compiles the policies: section, by name.
func (c Config) JudgePolicies() (map[string]gateway.Policy, error) {
	ups := c.judgeUpstreams()
	out := make(map[string]gateway.Policy, len(c.Policies))
	var errs []error
	for i, pc := range c.Policies {
		where := fmt.Sprintf("policies[%d]", i)
		if pc.Name != "" {
			where += " (" + pc.Name + ")"
		}
		if pc.Line > 0 {
			where += fmt.Sprintf(" at line %d", pc.Line)
		}
		in, err := policyInput(pc.Doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		p, err := gateway.NewPolicy(in, ups, "")
		if err != nil {
			msg := err.Error()
			var ge *gyre.Error
			if errors.As(err, &ge) {
				msg = ge.Message
				if ge.Code == gyre.CodeUpstreamNotAllowed {
					msg = fmt.Sprintf("upstream %q is not in the config file's upstreams: section", *in.Upstream)
				}
			}
			errs = append(errs, fmt.Errorf("%s: %s", where, msg))
			continue
		}
		if _, dup := out[p.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: name %q is used twice", where, p.Name))
			continue
		}
		out[p.Name] = p
	}
	return out, errors.Join(errs...)
}

// parseGraders parses the graders: section; today it holds only
// command.allow, a list of absolute executable paths, each a path or a
// mapping {path, tenants}.
func parseGraders(n *yaml.Node) (grade.CommandAllowList, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: graders must be a mapping (command: {allow: […]})", n.Line)
	}
	var allow grade.CommandAllowList
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value != "command" {
			return nil, fmt.Errorf("line %d: graders: unknown key %q (known keys: command)", k.Line, k.Value)
		}
		if v.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("line %d: graders.command must be a mapping (allow: […])", v.Line)
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			ck, cv := v.Content[j], v.Content[j+1]
			if ck.Value != "allow" {
				return nil, fmt.Errorf("line %d: graders.command: unknown key %q (known keys: allow)", ck.Line, ck.Value)
			}
			list, err := parseCommandAllow(cv)
			if err != nil {
				return nil, err
			}
			allow = append(allow, list...)
		}
	}
	return allow, nil
}

func parseCommandAllow(n *yaml.Node) (grade.CommandAllowList, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: graders.command.allow must be a list of absolute executable paths (or {path, tenants})", n.Line)
	}
	var out grade.CommandAllowList
	for i, item := range n.Content {
		where := fmt.Sprintf("line %d: graders.command.allow[%d]", item.Line, i)
		switch item.Kind {
		case yaml.ScalarNode:
			if item.Tag != "!!str" {
				return nil, fmt.Errorf("%s must be an absolute executable path, not %q", where, item.Value)
			}
			out = append(out, grade.CommandAllow{Path: item.Value})
		case yaml.MappingNode:
			e := grade.CommandAllow{}
			for j := 0; j+1 < len(item.Content); j += 2 {
				k, v := item.Content[j], item.Content[j+1]
				switch k.Value {
				case "path":
					if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
						return nil, fmt.Errorf("%s: path must be an absolute executable path", where)
					}
					e.Path = v.Value
				case "tenants":
					if v.Kind != yaml.SequenceNode {
						return nil, fmt.Errorf("%s: tenants must be a list of tenant names (or [\"*\"])", where)
					}
					e.Tenants = []string{}
					for _, t := range v.Content {
						if t.Kind != yaml.ScalarNode || t.Tag == "!!null" {
							return nil, fmt.Errorf("%s: tenants entries must be tenant names", where)
						}
						e.Tenants = append(e.Tenants, t.Value)
					}
				default:
					return nil, fmt.Errorf("%s: unknown key %q (known keys: path, tenants)", where, k.Value)
				}
			}
			out = append(out, e)
		default:
			return nil, fmt.Errorf("%s must be an absolute executable path or a mapping {path, tenants}", where)
		}
	}
	return out, nil
}
