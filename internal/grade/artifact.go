package grade

import (
	"context"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// artifactGrader checks one named artifact: that it exists (or not), its
// digest, or its inline content. Content checks abstain on digest-only
// artifacts; digest and content checks abstain on skipped ones.
type artifactGrader struct {
	name     string
	check    string // exists | sha256 | contains | json_schema
	exists   bool
	sha256   string
	contains string
	schema   *jsonschema.Schema
}

func parseArtifact(c *config) (grader, error) {
	name, _, err := c.str("name", true)
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, c.errf("name", "name must not be empty")
	}
	g := &artifactGrader{name: name, check: "exists", exists: true}
	var checks []string
	for _, k := range []string{"exists", "sha256", "contains", "json_schema"} {
		if _, ok := c.members[k]; ok {
			checks = append(checks, k)
		}
	}
	if len(checks) > 1 {
		return nil, c.errf(checks[1], "artifact takes one check of exists, sha256, contains or json_schema (found %s)", strings.Join(checks, ", "))
	}
	if len(checks) == 0 {
		return g, nil
	}
	g.check = checks[0]
	switch g.check {
	case "exists":
		if g.exists, _, err = c.boolean("exists"); err != nil {
			return nil, err
		}
	case "sha256":
		if g.sha256, _, err = c.str("sha256", true); err != nil {
			return nil, err
		}
		if !digestRE.MatchString(g.sha256) {
			return nil, c.errf("sha256", "sha256 must be 64 lowercase hex digits")
		}
	case "contains":
		if g.contains, _, err = c.str("contains", true); err != nil {
			return nil, err
		}
	case "json_schema":
		raw, _, err := c.raw("json_schema", true)
		if err != nil {
			return nil, err
		}
		if g.schema, err = compileSchema(raw); err != nil {
			return nil, c.errf("json_schema", "%v", err)
		}
	}
	return g, nil
}

func (g *artifactGrader) grade(_ context.Context, v *view, _ *Env) Verdict {
	if v.it.Artifacts == nil {
		return abstain(ReasonArtifactsNotReported)
	}
	a, ok := v.it.Artifacts[g.name]
	if g.check == "exists" {
		if g.exists {
			if !ok {
				return fail(ReasonArtifactMissing)
			}
			return pass(fmt.Sprintf("artifact %s exists", g.name))
		}
		return judged(!ok, fmt.Sprintf("artifact %s %s", g.name, cond(ok, "exists", "does not exist")))
	}
	if !ok {
		return fail(ReasonArtifactMissing)
	}
	if a.Skipped != "" {
		return abstain(ReasonArtifactSkipped)
	}
	switch g.check {
	case "sha256":
		eq := a.SHA256 == g.sha256
		return judged(eq, fmt.Sprintf("artifact %s sha256 %s", g.name, cond(eq, "matches", "differs")))
	case "contains":
		if a.Content == nil {
			return abstain(ReasonDigestOnly)
		}
		found := strings.Contains(*a.Content, g.contains)
		return judged(found, fmt.Sprintf("artifact %s %s %q", g.name, cond(found, "contains", "does not contain"), g.contains))
	case "json_schema":
		if a.Content == nil {
			return abstain(ReasonDigestOnly)
		}
		doc, err := decodeValue([]byte(*a.Content))
		if err != nil {
			return fail(ReasonNotJSON)
		}
		return validateVerdict(g.schema, doc)
	}
	return abstain(ReasonNotImplemented)
}
