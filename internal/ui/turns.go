package ui

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gyrehq/gyre/internal/store"
)

// turnsPage is how many turns the turns page shows at a time.
const turnsPage = 50

// turnView is a stored production turn as the page shows it. Fields the
// agent may leave out stay nil: null is not [] and unknown is not ok.
type turnView struct {
	store.Turn
	TurnIndex             *int            `json:"turn_index"`
	InputText             *string         `json:"input_text"`
	FinalText             *string         `json:"final_text"`
	ToolCalls             *[]toolCallView `json:"tool_calls"`
	ToolCallsOmittedCount int             `json:"tool_calls_omitted_count"`
	AgentFingerprint      json.RawMessage `json:"agent_fingerprint"`
}

type turnsData struct {
	Agents []string
	// Filter is the agent and receipt window; Conversation narrows it
	// to one conversation.
	Filter       listFilter
	Conversation string
	// FilterError says why the filter was refused (the page is then a
	// 400 with the form to correct it).
	FilterError  string
	Cursor, Next string
	Turns        []turnView
}

// Filtered reports whether any filter is set.
func (d turnsData) Filtered() bool { return d.Filter.Filtered() || d.Conversation != "" }

// Link is the turns list with the filter kept and cursor ("" for the
// first page).
func (d turnsData) Link(cursor string) string {
	f := d.Filter
	return link("/ui/turns", "agent", f.Agent, "conversation", d.Conversation, "since", f.Since, "until", f.Until, "cursor", cursor)
}

// turns is GET /ui/turns?agent&conversation&since&until&cursor:
// production turns (SPEC §4.1) in the order gyre received them, within
// the receipt window (days, UTC, until included); filtered by a
// conversation, that conversation's turns in order.
func (u *UI) turns(w http.ResponseWriter, r *http.Request, s session) error {
	q := r.URL.Query()
	d := turnsData{Conversation: q.Get("conversation"), Cursor: q.Get("cursor")}
	f, win, err := parseListFilter(q, nil)
	d.Filter = f
	var status int
	if d.FilterError, status, err = filterProblem(err); err != nil {
		return err
	}
	agents, err := u.store.AgentsSeen(r.Context(), s.TenantID, maxAgents)
	if err != nil {
		return err
	}
	for _, a := range agents {
		d.Agents = append(d.Agents, a.AgentID)
	}
	d.Agents = withChosen(d.Agents, f.Agent)
	if d.FilterError == "" {
		list, next, err := u.store.ListTurns(r.Context(), s.TenantID,
			store.TurnFilter{AgentID: f.Agent, ConversationID: d.Conversation, Since: win.Since, Until: win.Until},
			store.Page{Limit: turnsPage, Cursor: d.Cursor})
		if err != nil {
			return err
		}
		d.Next = next
		for _, t := range list {
			v := turnView{Turn: t}
			if err := json.Unmarshal(t.Body, &v); err != nil {
				return fmt.Errorf("stored turn %s: %w", t.TurnID, err)
			}
			v.Turn = t
			d.Turns = append(d.Turns, v)
		}
	}
	title := "Turns"
	if d.Conversation != "" {
		title = "Conversation " + d.Conversation
	}
	u.render(w, r, status, "turns", view{Title: title, Nav: "turns", Session: s, Data: d})
	return nil
}
