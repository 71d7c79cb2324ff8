package grade

import (
	"context"
	"fmt"
)

// countBudget is max_llm_calls and max_steps: set-reasoning budgets over a
// count the item may or may not carry.
type countBudget struct {
	what    string
	max     int64
	missing string
	read    func(*Item) *int
}

func parseCountBudget(what, missing string, read func(*Item) *int) func(c *config) (grader, error) {
	return func(c *config) (grader, error) {
		n, _, err := c.count("max", true)
		if err != nil {
			return nil, err
		}
		return &countBudget{what: what, max: n, missing: missing, read: read}, nil
	}
}

func (g *countBudget) grade(_ context.Context, v *view, _ *Env) Verdict {
	if inc := incomplete(v.it); inc != "" {
		return abstain(inc)
	}
	n := g.read(v.it)
	if n == nil {
		return abstain(g.missing)
	}
	return judged(int64(*n) <= g.max, fmt.Sprintf("%d %s, max %d", *n, g.what, g.max))
}

// maxTokens bounds prompt + completion tokens; it abstains without usage.
type maxTokens struct{ max int64 }

func parseMaxTokens(c *config) (grader, error) {
	n, _, err := c.count("max", true)
	if err != nil {
		return nil, err
	}
	return &maxTokens{max: n}, nil
}

func (g *maxTokens) grade(_ context.Context, v *view, _ *Env) Verdict {
	u := v.it.Usage
	if u == nil || u.PromptTokens == nil || u.CompletionTokens == nil {
		return abstain(ReasonUsageNotReported)
	}
	total := *u.PromptTokens + *u.CompletionTokens
	return judged(total <= g.max, fmt.Sprintf("%d tokens, max %d", total, g.max))
}

// maxCost bounds cost in USD; it abstains without cost evidence.
type maxCost struct{ max float64 }

func parseMaxCost(c *config) (grader, error) {
	if _, ok := c.members["max"]; !ok {
		_, _, err := c.raw("max", true)
		return nil, err
	}
	f, _, err := c.number("max")
	if err != nil {
		return nil, err
	}
	if f < 0 {
		return nil, c.errf("max", "max must not be negative")
	}
	return &maxCost{max: f}, nil
}

func (g *maxCost) grade(_ context.Context, v *view, _ *Env) Verdict {
	u := v.it.Usage
	if u == nil || u.CostUSD == nil {
		return abstain(ReasonCostNotReported)
	}
	return judged(*u.CostUSD <= g.max, fmt.Sprintf("cost $%g, max $%g", *u.CostUSD, g.max))
}
