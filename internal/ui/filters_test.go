package ui_test

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// linkNamed is the href of the page's link whose text is text, "" when
// there is none.
func linkNamed(body, text string) string {
	m := regexp.MustCompile(`<a [^>]*href="([^"]*)"[^>]*>` + regexp.QuoteMeta(text) + `</a>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// datasetLinks counts the dataset rows of a list page by agent.
func datasetRows(body string) int {
	return strings.Count(body, `<td><a class="mono" href="/ui/datasets/`)
}

// The datasets list filters by agent, build state and creation date; its
// next-page link keeps the filter, so the second page holds the same
// agent's datasets only; a bad filter is a 400 page that says why.
func TestDatasetsListFiltersByAgentStateAndDate(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	// Two agents, seen through production turns.
	for _, agent := range []string{"support-bot", "sales-bot"} {
		s.call("POST", "/turns", s.agent, map[string]any{"agent_id": agent, "turns": []any{map[string]any{"turn_id": "t-" + agent,
			"input_text": "hi", "final_text": "hello", "tool_calls": nil, "tool_calls_omitted_count": 0}}}, http.StatusOK, nil)
	}
	var ids []string
	mk := func(agent string) string {
		var ds struct {
			ID string `json:"id"`
		}
		s.call("POST", "/api/v1/datasets", s.admin, map[string]any{"agent_id": agent, "format": "sft"}, http.StatusCreated, &ds)
		ids = append(ids, ds.ID)
		return ds.ID
	}
	sales := mk("sales-bot")
	for range 26 { // one more than a page
		mk("support-bot")
	}
	for _, id := range ids {
		s.waitDataset(id)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	yesterday := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)

	reader := s.client()
	reader.signIn(s.reader)
	for _, tc := range []struct {
		name, query string
		rows        int
		hasSales    bool
		empty       bool
	}{
		{"every dataset, first page", "", 25, false, false},
		{"one agent", "?agent=sales-bot", 1, true, false},
		{"state ready", "?agent=sales-bot&state=ready", 1, true, false},
		{"no failed dataset", "?state=failed", 0, false, true},
		{"created today, the until day included", "?agent=sales-bot&since=" + today + "&until=" + today, 1, true, false},
		{"created from tomorrow", "?since=" + tomorrow, 0, false, true},
		{"created until yesterday", "?until=" + yesterday, 0, false, true},
	} {
		p := reader.get("/ui/datasets" + tc.query)
		if p.status != http.StatusOK {
			t.Errorf("%s: status %d", tc.name, p.status)
			continue
		}
		if n := datasetRows(p.body); n != tc.rows {
			t.Errorf("%s: %d rows, want %d", tc.name, n, tc.rows)
		}
		if got := strings.Contains(p.body, `href="/ui/datasets/`+sales+`"`); got != tc.hasSales {
			t.Errorf("%s: sales-bot's dataset shown %v, want %v", tc.name, got, tc.hasSales)
		}
		if got := strings.Contains(p.body, "No dataset matches these filters."); got != tc.empty {
			t.Errorf("%s: says nothing matches %v, want %v", tc.name, got, tc.empty)
		}
	}

	t.Run("the form shows the filter back, labelled", func(t *testing.T) {
		p := reader.get("/ui/datasets?agent=sales-bot&state=ready&since=" + today)
		for _, want := range []string{`<option value="sales-bot" selected>`, `<option value="ready" selected>`,
			`<label for="f-since">`, `id="f-since" name="since" value="` + today + `"`, `<label for="f-until">`} {
			if !strings.Contains(p.body, want) {
				t.Errorf("filter form lacks %q", want)
			}
		}
	})
	t.Run("the next page keeps the filter", func(t *testing.T) {
		first := reader.get("/ui/datasets?agent=support-bot")
		next := linkNamed(first.body, "Next page")
		if datasetRows(first.body) != 25 || !strings.Contains(next, "agent=support-bot") || !strings.Contains(next, "cursor=") {
			t.Fatalf("first page: %d rows, next %q", datasetRows(first.body), next)
		}
		second := reader.get(next)
		if second.status != http.StatusOK || datasetRows(second.body) != 1 || strings.Contains(second.body, sales) {
			t.Fatalf("second page: %d, %d rows\n%s", second.status, datasetRows(second.body), second.body)
		}
		if back := linkNamed(second.body, "First page"); back != "/ui/datasets?agent=support-bot" {
			t.Errorf("first page link %q", back)
		}
		// A cursor of another filter is refused with a message, not a 500.
		if p := reader.get(strings.Replace(next, "agent=support-bot", "agent=sales-bot", 1)); p.status != http.StatusBadRequest ||
			!strings.Contains(p.body, "Start from the first page") {
			t.Errorf("a cursor under another filter: %d", p.status)
		}
	})
	t.Run("a bad filter is a 400 page that says why", func(t *testing.T) {
		for q, want := range map[string]string{
			"?state=done":                        `Unknown state &#34;done&#34;: choose building, ready or failed.`,
			"?since=last+week":                   `The since date &#34;last week&#34; is not a date`,
			"?since=2026-02-01&until=2026-01-01": "since must come before until",
			"?agent=" + strings.Repeat("a", 256): "is not an agent id",
			"?until=2026-13-01":                  `The until date`,
		} {
			p := reader.get("/ui/datasets" + q)
			if p.status != http.StatusBadRequest || !strings.Contains(p.body, want) {
				t.Errorf("%s: %d, want 400 saying %q\n%s", q, p.status, want, p.body)
			}
			// The page keeps the form to correct, and lists nothing.
			if !strings.Contains(p.body, `<form class="filters"`) || !strings.Contains(p.body, `role="alert"`) ||
				datasetRows(p.body) != 0 || strings.Contains(p.body, "No dataset matches") {
				t.Errorf("%s: the refused filter's page lacks its form or lists rows\n%s", q, p.body)
			}
		}
	})
}

// rowsLinking counts a list page's rows by their first cell's link.
func rowsLinking(body, prefix string) int {
	return strings.Count(body, `<td><a class="mono" href="`+prefix)
}

// The batches list filters by agent, state and creation date, keeps the
// filter in its page links, and says so when nothing matches.
func TestBatchesListFiltersByAgentStateAndDate(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.call("POST", "/api/v1/suites", s.admin, map[string]any{"name": "desk", "cases": []any{
		map[string]any{"id": "refund", "input": map[string]any{"question": "Refund?"}, "graders": []any{map[string]any{"contains": "refund"}}},
	}}, http.StatusCreated, nil)
	var tasks struct {
		Items []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	}
	s.call("POST", "/api/v1/tasks", s.admin, map[string]any{"suite": "desk"}, http.StatusCreated, &tasks)
	mk := func(agent string) string {
		var b struct {
			BatchID string `json:"batch_id"`
		}
		s.call("POST", "/api/v1/batches", s.admin, map[string]any{"agent_id": agent, "task_ids": []string{tasks.Items[0].TaskID}}, http.StatusCreated, &b)
		return b.BatchID
	}
	sales := mk("sales-bot")
	if _, err := s.st.CancelBatch(t.Context(), s.tenant.ID, sales); err != nil {
		t.Fatal(err)
	}
	for range 26 {
		mk("support-bot")
	}
	today := time.Now().UTC().Format(time.DateOnly)
	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	yesterday := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)

	reader := s.client()
	reader.signIn(s.reader)
	for _, tc := range []struct {
		name, query string
		rows        int
		hasSales    bool
		empty       bool
	}{
		{"every batch, first page", "", 25, false, false},
		{"one agent", "?agent=sales-bot", 1, true, false},
		{"cancelled", "?state=cancelled", 1, true, false},
		{"none finished", "?state=finished", 0, false, true},
		{"created today, the until day included", "?agent=sales-bot&since=" + today + "&until=" + today, 1, true, false},
		{"created from tomorrow", "?since=" + tomorrow, 0, false, true},
		{"created until yesterday", "?until=" + yesterday, 0, false, true},
	} {
		p := reader.get("/ui/batches" + tc.query)
		if p.status != http.StatusOK {
			t.Errorf("%s: status %d", tc.name, p.status)
			continue
		}
		if n := rowsLinking(p.body, "/ui/batches/"); n != tc.rows {
			t.Errorf("%s: %d rows, want %d", tc.name, n, tc.rows)
		}
		if got := strings.Contains(p.body, `href="/ui/batches/`+sales+`"`); got != tc.hasSales {
			t.Errorf("%s: sales-bot's batch shown %v, want %v", tc.name, got, tc.hasSales)
		}
		if got := strings.Contains(p.body, "No batch matches these filters."); got != tc.empty {
			t.Errorf("%s: says nothing matches %v, want %v", tc.name, got, tc.empty)
		}
	}
	first := reader.get("/ui/batches?agent=support-bot&state=running&since=" + today)
	next := linkNamed(first.body, "Next page")
	for _, want := range []string{"agent=support-bot", "state=running", "since=" + today, "cursor="} {
		if !strings.Contains(next, want) {
			t.Fatalf("next page link %q lacks %s", next, want)
		}
	}
	if second := reader.get(next); second.status != http.StatusOK || rowsLinking(second.body, "/ui/batches/") != 1 || strings.Contains(second.body, sales) {
		t.Fatalf("second page: %d\n%s", second.status, second.body)
	}
	for q, want := range map[string]string{
		"?state=done":                        "Unknown state &#34;done&#34;: choose running, finished or cancelled.",
		"?until=next+week":                   "The until date &#34;next week&#34; is not a date",
		"?agent=%2Fetc":                      "is not an agent id",
		"?since=2026-02-02&until=2026-02-01": "since must come before until",
	} {
		if p := reader.get("/ui/batches" + q); p.status != http.StatusBadRequest || !strings.Contains(p.body, want) ||
			!strings.Contains(p.body, `<form class="filters"`) || rowsLinking(p.body, "/ui/batches/") != 0 {
			t.Errorf("%s: %d, want 400 saying %q above the filter form", q, p.status, want)
		}
	}
	// The refused value stays in the form to correct.
	if p := reader.get("/ui/batches?since=next+week"); !strings.Contains(p.body, `name="since" value="next week"`) {
		t.Error("the refused date is not in the form")
	}
}

// Every list of an empty tenant says in words that it is empty and how
// its rows come to be, rather than showing an empty table.
func TestEveryListOfAnEmptyTenantSaysSo(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	admin := s.client()
	admin.signIn(s.admin)
	for path, want := range map[string]string{
		"/ui/":            "No agent has been seen in this tenant yet.",
		"/ui/batches":     "No batch has been created in this tenant yet.",
		"/ui/experiments": "No experiment has been recorded in this tenant yet.",
		"/ui/turns":       "No production turn has been captured in this tenant yet.",
		"/ui/datasets":    "No dataset has been made in this tenant yet.",
		"/ui/policies":    "This tenant has no policy yet.",
		"/ui/promotions":  "No promotion has been started in this tenant yet.",
		"/ui/harnesses":   "No harness is registered in this tenant yet.",
		"/ui/compare":     "Choose a baseline (A) and a candidate (B)",
	} {
		p := admin.get(path)
		if p.status != http.StatusOK || !strings.Contains(p.body, `<p class="empty">`+want) || strings.Contains(p.body, "<tbody></tbody>") {
			t.Errorf("%s: %d, want the words %q and no empty table", path, p.status, want)
		}
	}
}

// turnRows counts the turns a turns page shows.
func turnRows(body string) int { return strings.Count(body, `<article class="turn"`) }

// The turns list filters by agent, conversation and receipt window (days,
// UTC, the until day included) through the same form as every list; its
// page links keep the filter; a conversation link stays within the turn's
// agent.
func TestTurnsListFiltersByAgentConversationAndReceiptWindow(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	send := func(agent string, ids ...string) {
		var turns []any
		for _, id := range ids {
			turns = append(turns, map[string]any{"turn_id": id, "conversation_id": "conv-1", "input_text": "hi", "final_text": "hello",
				"tool_calls": nil, "tool_calls_omitted_count": 0})
		}
		s.call("POST", "/turns", s.agent, map[string]any{"agent_id": agent, "turns": turns}, http.StatusOK, nil)
	}
	send("sales-bot", "sales-1")
	var support []string
	for i := range 51 { // one more than a page
		support = append(support, fmt.Sprintf("support-%02d", i))
	}
	send("support-bot", support...)
	today := time.Now().UTC().Format(time.DateOnly)
	tomorrow := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	yesterday := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)

	reader := s.client()
	reader.signIn(s.reader)
	for _, tc := range []struct {
		name, query string
		rows        int
		hasSales    bool
		empty       bool
	}{
		{"every turn, first page", "", 50, true, false},
		{"one agent", "?agent=sales-bot", 1, true, false},
		{"received today, the until day included", "?agent=sales-bot&since=" + today + "&until=" + today, 1, true, false},
		{"received until today", "?agent=sales-bot&until=" + today, 1, true, false},
		{"received until yesterday", "?until=" + yesterday, 0, false, true},
		{"received from tomorrow", "?since=" + tomorrow, 0, false, true},
		{"one agent's conversation", "?agent=sales-bot&conversation=conv-1", 1, true, false},
	} {
		p := reader.get("/ui/turns" + tc.query)
		if p.status != http.StatusOK {
			t.Errorf("%s: status %d", tc.name, p.status)
			continue
		}
		if n := turnRows(p.body); n != tc.rows {
			t.Errorf("%s: %d turns, want %d", tc.name, n, tc.rows)
		}
		if got := strings.Contains(p.body, `>sales-1<`); got != tc.hasSales {
			t.Errorf("%s: sales-bot's turn shown %v, want %v", tc.name, got, tc.hasSales)
		}
		if got := strings.Contains(p.body, "No turn matches these filters."); got != tc.empty {
			t.Errorf("%s: says nothing matches %v, want %v", tc.name, got, tc.empty)
		}
	}

	t.Run("the form shows the filter back, labelled", func(t *testing.T) {
		p := reader.get("/ui/turns?agent=sales-bot&since=" + today + "&until=" + today)
		for _, want := range []string{`<option value="sales-bot" selected>`, `<label for="f-since">`, `<label for="f-until">`,
			`id="f-since" name="since" value="` + today + `"`, `id="f-until" name="until" value="` + today + `"`} {
			if !strings.Contains(p.body, want) {
				t.Errorf("filter form lacks %q", want)
			}
		}
	})
	t.Run("the next page keeps the filter", func(t *testing.T) {
		first := reader.get("/ui/turns?agent=support-bot&until=" + today)
		next := linkNamed(first.body, "Next page")
		for _, want := range []string{"agent=support-bot", "until=" + today, "cursor="} {
			if !strings.Contains(next, want) {
				t.Fatalf("next page link %q lacks %s", next, want)
			}
		}
		second := reader.get(next)
		if second.status != http.StatusOK || turnRows(second.body) != 1 || strings.Contains(second.body, ">sales-1<") {
			t.Fatalf("second page: %d, %d turns", second.status, turnRows(second.body))
		}
		if back := linkNamed(second.body, "First page"); back != "/ui/turns?agent=support-bot&until="+today {
			t.Errorf("first page link %q", back)
		}
		// A cursor cut under another window is refused with a message.
		if p := reader.get(strings.Replace(next, "until="+today, "until="+tomorrow, 1)); p.status != http.StatusBadRequest {
			t.Errorf("a cursor under another window: %d, want 400", p.status)
		}
	})
	t.Run("a conversation link keeps to the turn's agent", func(t *testing.T) {
		p := reader.get("/ui/turns?agent=sales-bot")
		if !strings.Contains(p.body, `href="/ui/turns?agent=sales-bot&amp;conversation=conv-1"`) {
			t.Errorf("sales-bot's conversation link is not scoped to sales-bot")
		}
		all := reader.get("/ui/turns")
		if strings.Contains(all.body, `href="/ui/turns?conversation=conv-1"`) {
			t.Errorf("a conversation link on the unfiltered list mixes both agents' conversations")
		}
	})
}

// A refused filter on the experiments and turns lists is what it is on
// every list: a 400 page with the form holding the refused value, a
// message that says what is wrong, and a link to the unfiltered list —
// never a bare error page.
func TestABadFilterShowsTheFormWithTheMessage(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	reader := s.client()
	reader.signIn(s.reader)
	for _, tc := range []struct {
		path, query, field, value, want, all string
	}{
		{"/ui/experiments", "?since=yesterday", "since", "yesterday", `The since date &#34;yesterday&#34; is not a date`, "show every experiment"},
		{"/ui/experiments", "?until=2026-13-01", "until", "2026-13-01", `The until date &#34;2026-13-01&#34; is not a date`, "show every experiment"},
		{"/ui/experiments", "?state=paused", "", "", `Unknown state &#34;paused&#34;: choose running or finished.`, "show every experiment"},
		{"/ui/experiments", "?suite=a%2Fb", "suite", "a/b", `not &#34;a/b&#34;`, "show every experiment"},
		{"/ui/experiments", "?since=2026-02-02&until=2026-02-01", "since", "2026-02-02", "since must come before until", "show every experiment"},
		{"/ui/turns", "?since=soon", "since", "soon", `The since date &#34;soon&#34; is not a date`, "show every turn"},
		{"/ui/turns", "?until=next+week", "until", "next week", `The until date &#34;next week&#34; is not a date`, "show every turn"},
		{"/ui/turns", "?agent=%2Fetc", "", "", "is not an agent id", "show every turn"},
		{"/ui/turns", "?state=open", "", "", "This list has no state filter", "show every turn"},
		{"/ui/turns", "?since=2026-02-02&until=2026-02-01", "until", "2026-02-01", "since must come before until", "show every turn"},
	} {
		p := reader.get(tc.path + tc.query)
		if p.status != http.StatusBadRequest || !strings.Contains(p.body, tc.want) {
			t.Errorf("%s%s: %d, want 400 saying %q\n%s", tc.path, tc.query, p.status, tc.want, p.body)
			continue
		}
		if !strings.Contains(p.body, `<form class="filters"`) || !strings.Contains(p.body, `<p class="error" role="alert">`) {
			t.Errorf("%s%s: the page lacks the filter form or the message above it", tc.path, tc.query)
		}
		if tc.field != "" && !strings.Contains(p.body, `name="`+tc.field+`" value="`+tc.value+`"`) {
			t.Errorf("%s%s: the refused value is not in the form to correct", tc.path, tc.query)
		}
		if linkNamed(p.body, tc.all) != tc.path {
			t.Errorf("%s%s: no link %q to the unfiltered list", tc.path, tc.query, tc.all)
		}
		if strings.Contains(p.body, "matches these filters") {
			t.Errorf("%s%s: a refused filter says nothing matches", tc.path, tc.query)
		}
	}
}
