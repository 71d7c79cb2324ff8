package ui

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gyrehq/gyre/flywheel"
)

// listFilter is the agent, state and creation window of a list page's
// GET form as the user typed them: the page shows them back in the form
// and keeps them in its cursor links.
type listFilter struct {
	Agent, State, Since, Until string
}

// filterForm is what the shared filter form of the batches, datasets and
// promotions lists (template agentStateWindowFilter) shows: the list's
// path, the word for when an item began (Created, Started), the choices
// and the filter as asked.
type filterForm struct {
	Action, Began  string
	Agents, States []string
	Filter         listFilter
}

func newFilterForm(action, began string, agents, states []string, f listFilter) filterForm {
	return filterForm{Action: action, Began: began, Agents: agents, States: states, Filter: f}
}

// window is a parsed creation window: Since inclusive, Until exclusive;
// a zero end is open.
type window struct {
	Since, Until time.Time
}

// Filtered reports whether any filter is set, so an empty page can say
// that nothing matches rather than that nothing exists.
func (f listFilter) Filtered() bool {
	return f.Agent != "" || f.State != "" || f.Since != "" || f.Until != ""
}

// Link is the list's URL at path with the filter kept and cursor ("" for
// the first page).
func (f listFilter) Link(path, cursor string) string {
	return link(path, "agent", f.Agent, "state", f.State, "since", f.Since, "until", f.Until, "cursor", cursor)
}

// parseListFilter reads a list page's agent, state, since and until from
// its query. states are the page's states, named in the message when
// another is asked for; a page without states (nil) refuses any. A day (YYYY-MM-DD, UTC) given as until is
// included: the window ends at the next day's start. A bad value is a
// 400 page that says which filter is wrong and how to write it.
func parseListFilter(q url.Values, states []string) (listFilter, window, error) {
	f := listFilter{Agent: q.Get("agent"), State: q.Get("state"),
		Since: strings.TrimSpace(q.Get("since")), Until: strings.TrimSpace(q.Get("until"))}
	var w window
	if f.Agent != "" && flywheel.ValidateAgentID(f.Agent) != nil {
		return f, w, badRequest("%q is not an agent id: an agent id is 1 to 255 characters without a slash, a backslash, a control character or surrounding spaces.", f.Agent)
	}
	if f.State != "" && states == nil {
		return f, w, badRequest("This list has no state filter: leave state out.")
	}
	if f.State != "" && !slices.Contains(states, f.State) {
		return f, w, badRequest("Unknown state %q: choose %s.", f.State, orList(states))
	}
	var err error
	if w.Since, err = parseDay("since", f.Since); err != nil {
		return f, w, err
	}
	if w.Until, err = parseDay("until", f.Until); err != nil {
		return f, w, err
	}
	if len(f.Until) == len(time.DateOnly) {
		w.Until = w.Until.AddDate(0, 0, 1)
	}
	if !w.Since.IsZero() && !w.Until.IsZero() && !w.Since.Before(w.Until) {
		return f, w, badRequest("The window from %s to %s is empty: since must come before until.", f.Since, f.Until)
	}
	return f, w, nil
}

// orList joins choices as "a, b or c".
func orList(choices []string) string {
	switch len(choices) {
	case 0:
		return "none"
	case 1:
		return choices[0]
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

// withChosen is an agent chooser's agents with the chosen one added when
// the bounded list left it out, so the form shows what filters the page.
func withChosen(agents []string, chosen string) []string {
	if chosen == "" || slices.Contains(agents, chosen) {
		return agents
	}
	return append(agents, chosen)
}

// filterProblem is what a list page shows for a bad filter: the message
// of parseListFilter's error, shown above the filter form the user can
// correct (status 400). Any other error is returned as it is.
func filterProblem(err error) (string, int, error) {
	if err == nil {
		return "", http.StatusOK, nil
	}
	var pe *pageError
	if errors.As(err, &pe) && pe.status == http.StatusBadRequest {
		return pe.msg, http.StatusBadRequest, nil
	}
	return "", 0, err
}
