package grade

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// source is which list of calls a tool grader reads.
type source int

const (
	// executed: the calls the agent reported (rollouts) or the trajectory's
	// calls (runs).
	executed source = iota
	// emitted: the calls the gateway saw the model emit (rollouts only).
	emitted
)

func parseSource(c *config) (source, error) {
	s, ok, err := c.str("source", false)
	if err != nil || !ok {
		return executed, err
	}
	switch s {
	case "executed":
		return executed, nil
	case "emitted":
		return emitted, nil
	}
	return executed, c.errf("source", "source must be executed or emitted")
}

// incomplete says why the executed-call list cannot be read as complete, as
// a Reason… code, or "" when it is complete (SPEC §8 set reasoning).
func incomplete(it *Item) string {
	if it.Kind == KindRun {
		if it.ProvidesToolCalls == nil || !*it.ProvidesToolCalls {
			return ReasonToolCallsNotProvided
		}
		if it.TrajectoryValid == nil || !*it.TrajectoryValid {
			return ReasonTrajectoryInvalid
		}
	}
	if it.ToolCalls == nil {
		return ReasonToolCallsNotReported
	}
	if it.ToolCallsOmittedCount > 0 {
		return ReasonToolCallsOmitted
	}
	return ""
}

// notReported says why there is no executed-call list at all, or "".
func notReported(it *Item) string {
	if it.ToolCalls != nil {
		return ""
	}
	if it.Kind == KindRun {
		if it.ProvidesToolCalls == nil || !*it.ProvidesToolCalls {
			return ReasonToolCallsNotProvided
		}
		if it.TrajectoryValid == nil || !*it.TrajectoryValid {
			return ReasonTrajectoryInvalid
		}
	}
	return ReasonToolCallsNotReported
}

// callFilter selects calls by name and, optionally, an arguments subset.
type callFilter struct {
	name    string
	args    any
	hasArgs bool
	src     source
}

func parseCallFilter(c *config, withSource bool) (callFilter, error) {
	var f callFilter
	name, _, err := c.str("name", true)
	if err != nil {
		return f, err
	}
	if name == "" {
		return f, c.errf("name", "name must not be empty")
	}
	f.name = name
	raw, ok, err := c.object("args", false)
	if err != nil {
		return f, err
	}
	if ok {
		if f.args, err = decodeValue(raw); err != nil {
			return f, c.errf("args", "args: %v", err)
		}
		f.hasArgs = true
	}
	if withSource {
		if f.src, err = parseSource(c); err != nil {
			return f, err
		}
	}
	return f, nil
}

func (f callFilter) describe() string {
	if f.hasArgs {
		return fmt.Sprintf("%s with %s", f.name, text(f.args))
	}
	return f.name
}

// count counts matching calls in the filter's list and says why the list is
// incomplete ("" when complete).
func (f callFilter) count(v *view) (n int, incompleteCode string) {
	if f.src == emitted {
		for i, c := range v.it.EmittedToolCalls {
			if c.Name == f.name && (!f.hasArgs || jsonSubset(f.args, v.emittedArgs(i))) {
				n++
			}
		}
		if v.it.EmittedToolCalls == nil {
			return n, ReasonEmittedNotReported
		}
		return n, ""
	}
	for i, c := range v.it.ToolCalls {
		if c.Name == f.name && (!f.hasArgs || jsonSubset(f.args, v.callArgs(i))) {
			n++
		}
	}
	return n, incomplete(v.it)
}

// toolCalled passes when at least min matching calls were made (and, with
// max, at most max). Without max it may pass on a partial list; it abstains
// rather than fails when the list is incomplete.
type toolCalled struct {
	f   callFilter
	min int64
	max int64 // -1: no max
}

func parseToolCalled(c *config) (grader, error) {
	f, err := parseCallFilter(c, true)
	if err != nil {
		return nil, err
	}
	g := &toolCalled{f: f, min: 1, max: -1}
	if n, ok, err := c.count("min", false); err != nil {
		return nil, err
	} else if ok {
		if n < 1 {
			return nil, c.errf("min", "min must be at least 1 (use tool_not_called for 0)")
		}
		g.min = n
	}
	if n, ok, err := c.count("max", false); err != nil {
		return nil, err
	} else if ok {
		if n < g.min {
			return nil, c.errf("max", "max must be at least min (%d); use tool_not_called for 0", g.min)
		}
		g.max = n
	}
	return g, nil
}

func (g *toolCalled) grade(_ context.Context, v *view, _ *Env) Verdict {
	n, inc := g.f.count(v)
	if g.max < 0 {
		if int64(n) >= g.min {
			return pass(fmt.Sprintf("%s called %d time(s)", g.f.describe(), n))
		}
		if inc != "" {
			return abstain(inc)
		}
		if n == 0 {
			return fail(ReasonNoSuchCall)
		}
		return fail(fmt.Sprintf("%s called %d time(s), want at least %d", g.f.describe(), n, g.min))
	}
	if inc != "" {
		return abstain(inc)
	}
	if n == 0 {
		return fail(ReasonNoSuchCall)
	}
	ok := int64(n) >= g.min && int64(n) <= g.max
	return judged(ok, fmt.Sprintf("%s called %d time(s), want %d..%d", g.f.describe(), n, g.min, g.max))
}

// toolNotCalled passes when a complete list holds no matching call.
type toolNotCalled struct{ f callFilter }

func parseToolNotCalled(c *config) (grader, error) {
	f, err := parseCallFilter(c, true)
	if err != nil {
		return nil, err
	}
	return &toolNotCalled{f: f}, nil
}

func (g *toolNotCalled) grade(_ context.Context, v *view, _ *Env) Verdict {
	n, inc := g.f.count(v)
	if inc != "" {
		return abstain(inc)
	}
	return judged(n == 0, fmt.Sprintf("%s called %d time(s)", g.f.describe(), n))
}

// toolSequence passes when the names occur in order (not necessarily
// adjacent) in a complete list.
type toolSequence struct {
	names []string
	src   source
}

func parseToolSequence(c *config) (grader, error) {
	names, _, err := c.strList("names", true)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, c.errf("names", "names must not be empty")
	}
	for _, n := range names {
		if n == "" {
			return nil, c.errf("names", "names must not contain an empty name")
		}
	}
	g := &toolSequence{names: names}
	if g.src, err = parseSource(c); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *toolSequence) grade(_ context.Context, v *view, _ *Env) Verdict {
	var got []string
	var inc string
	if g.src == emitted {
		if v.it.EmittedToolCalls == nil {
			inc = ReasonEmittedNotReported
		}
		for _, c := range v.it.EmittedToolCalls {
			got = append(got, c.Name)
		}
	} else {
		inc = incomplete(v.it)
		for _, c := range v.it.ToolCalls {
			got = append(got, c.Name)
		}
	}
	if inc != "" {
		return abstain(inc)
	}
	i := 0
	for _, n := range got {
		if i < len(g.names) && n == g.names[i] {
			i++
		}
	}
	want := strings.Join(g.names, " → ")
	if i == len(g.names) {
		return pass("called in order: " + want)
	}
	return fail(fmt.Sprintf("sequence %s not found (stopped before %s)", want, g.names[i]))
}

// tri is a call's outcome as a tri-state, with the abstention code when it
// is not a verdict. A status_code contradicting the outcome abstains.
func tri(c *ToolCall) (ok *bool, abstainCode string) {
	switch c.Outcome {
	case OutcomeOK:
		if c.StatusCode != nil && *c.StatusCode >= 400 {
			return nil, ReasonOutcomeContradicted
		}
		return boolp(true), ""
	case OutcomeFailed:
		if c.StatusCode != nil && *c.StatusCode >= 200 && *c.StatusCode <= 299 {
			return nil, ReasonOutcomeContradicted
		}
		return boolp(false), ""
	}
	return nil, ReasonOutcomeUnknown
}

// lastCall finds the last executed call named name, or -1.
func lastCall(it *Item, name string) int {
	for i := len(it.ToolCalls) - 1; i >= 0; i-- {
		if it.ToolCalls[i].Name == name {
			return i
		}
	}
	return -1
}

// toolOutcome judges the outcome of the last call with a name.
type toolOutcome struct {
	name string
	want Outcome
}

func parseToolOutcome(c *config) (grader, error) {
	name, _, err := c.str("name", true)
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, c.errf("name", "name must not be empty")
	}
	g := &toolOutcome{name: name, want: OutcomeOK}
	w, ok, err := c.str("want", false)
	if err != nil {
		return nil, err
	}
	if ok {
		if w != string(OutcomeOK) && w != string(OutcomeFailed) {
			return nil, c.errf("want", "want must be ok or failed")
		}
		g.want = Outcome(w)
	}
	return g, nil
}

func (g *toolOutcome) grade(_ context.Context, v *view, _ *Env) Verdict {
	if code := notReported(v.it); code != "" {
		return abstain(code)
	}
	i := lastCall(v.it, g.name)
	if i < 0 {
		if inc := incomplete(v.it); inc != "" {
			return abstain(inc)
		}
		return fail(ReasonNoSuchCall)
	}
	ok, code := tri(&v.it.ToolCalls[i])
	if ok == nil {
		return abstain(code)
	}
	got := OutcomeFailed
	if *ok {
		got = OutcomeOK
	}
	return judged(got == g.want, fmt.Sprintf("last %s call %s, want %s", g.name, got, g.want))
}

// allToolsOK fails when any call failed, abstains when none failed but one
// is unknown (or contradicted), and passes otherwise.
type allToolsOK struct{}

func parseAllToolsOK(c *config) (grader, error) {
	if c.short {
		raw, _ := c.take("_")
		var b bool
		if err := strictUnmarshal(raw, &b); err != nil || !b {
			return nil, c.errf("", "all_tools_ok takes true, null or an object")
		}
	}
	return allToolsOK{}, nil
}

func (allToolsOK) grade(_ context.Context, v *view, _ *Env) Verdict {
	if inc := incomplete(v.it); inc != "" {
		return abstain(inc)
	}
	var abstainCode string
	for i := range v.it.ToolCalls {
		c := &v.it.ToolCalls[i]
		ok, code := tri(c)
		switch {
		case ok == nil:
			if abstainCode != ReasonOutcomeUnknown {
				abstainCode = code
			}
		case !*ok:
			return fail(fmt.Sprintf("%s (call %d) failed", c.Name, i))
		}
	}
	if abstainCode != "" {
		return abstain(abstainCode)
	}
	return pass(fmt.Sprintf("all %d call(s) ok", len(v.it.ToolCalls)))
}

// entityKeys are the entity_ids keys flywheel/1 allows.
var entityKeys = []string{"id", "key", "uuid", "sid", "gid"}

// entityWritten checks that the last call to a tool wrote an entity and
// reported its identity under a key.
type entityWritten struct {
	tool string
	key  string
}

func parseEntityWritten(c *config) (grader, error) {
	tool, _, err := c.str("tool", true)
	if err != nil {
		return nil, err
	}
	if tool == "" {
		return nil, c.errf("tool", "tool must not be empty")
	}
	key, _, err := c.str("key", true)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(entityKeys, key) {
		return nil, c.errf("key", "key must be one of %s", strings.Join(entityKeys, ", "))
	}
	return &entityWritten{tool: tool, key: key}, nil
}

func (g *entityWritten) grade(_ context.Context, v *view, _ *Env) Verdict {
	if code := notReported(v.it); code != "" {
		return abstain(code)
	}
	i := lastCall(v.it, g.tool)
	if i < 0 {
		if inc := incomplete(v.it); inc != "" {
			return abstain(inc)
		}
		return fail(ReasonNoSuchCall)
	}
	c := &v.it.ToolCalls[i]
	if len(c.EntityIDs) == 0 {
		return abstain(ReasonNoEntityIDs)
	}
	ok, code := tri(c)
	if ok == nil {
		return abstain(code)
	}
	if !*ok {
		return fail(fmt.Sprintf("last %s call failed", g.tool))
	}
	if id := c.EntityIDs[g.key]; id != "" {
		return pass(fmt.Sprintf("%s wrote %s %s", g.tool, g.key, id))
	}
	return abstain(ReasonEntityKeyMissing)
}
