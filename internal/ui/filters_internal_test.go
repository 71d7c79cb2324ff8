package ui

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// A list's filter: the agent must be an agent id, the state one of the
// page's, since and until days or RFC 3339 times; an until day is
// included; an empty window is refused; each refusal is a 400 that names
// what is wrong.
func TestListFilterParsesAgentStateAndWindow(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	states := []string{"building", "ready", "failed"}
	for _, tc := range []struct {
		name    string
		query   string
		want    listFilter
		win     window
		wantErr string
	}{
		{"nothing", "", listFilter{}, window{}, ""},
		{"agent and state", "agent=support-bot&state=ready", listFilter{Agent: "support-bot", State: "ready"}, window{}, ""},
		{"until day is included", "since=2026-11-01&until=2026-11-30", listFilter{Since: "2026-11-01", Until: "2026-11-30"},
			window{at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z")}, ""},
		{"one day", "since=2026-11-30&until=2026-11-30", listFilter{Since: "2026-11-30", Until: "2026-11-30"},
			window{at("2026-11-30T00:00:00Z"), at("2026-12-01T00:00:00Z")}, ""},
		{"times as given", "since=2026-11-01T10:00:00%2B02:00&until=2026-11-01T12:00:00Z",
			listFilter{Since: "2026-11-01T10:00:00+02:00", Until: "2026-11-01T12:00:00Z"}, window{at("2026-11-01T08:00:00Z"), at("2026-11-01T12:00:00Z")}, ""},
		{"surrounding spaces in a date", "since=+2026-11-01+", listFilter{Since: "2026-11-01"}, window{Since: at("2026-11-01T00:00:00Z")}, ""},
		{"unknown state", "state=done", listFilter{}, window{}, `Unknown state "done": choose building, ready or failed.`},
		{"not an agent id", "agent=a%2Fb", listFilter{}, window{}, `"a/b" is not an agent id`},
		{"agent with a surrounding space", "agent=+bot", listFilter{}, window{}, `" bot" is not an agent id`},
		{"bad since", "since=yesterday", listFilter{}, window{}, `The since date "yesterday" is not a date`},
		{"bad until", "until=30%2F11%2F2026", listFilter{}, window{}, `The until date "30/11/2026" is not a date`},
		{"empty window", "since=2026-12-01&until=2026-11-01", listFilter{}, window{}, "is empty: since must come before until"},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		f, w, err := parseListFilter(q, states)
		if tc.wantErr != "" {
			var pe *pageError
			if !errors.As(err, &pe) || pe.status != http.StatusBadRequest || !strings.Contains(pe.msg, tc.wantErr) {
				t.Errorf("%s: %v, want a 400 saying %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || f != tc.want || !w.Since.Equal(tc.win.Since) || !w.Until.Equal(tc.win.Until) {
			t.Errorf("%s: %+v %+v (%v), want %+v %+v", tc.name, f, w, err, tc.want, tc.win)
		}
	}
}

// The cursor links keep every filter, and leave out the empty ones.
func TestListFilterLinkKeepsTheFilters(t *testing.T) {
	t.Parallel()
	f := listFilter{Agent: "bot 1", State: "ready", Until: "2026-11-30"}
	if got, want := f.Link("/ui/datasets", "c1"), "/ui/datasets?agent=bot+1&cursor=c1&state=ready&until=2026-11-30"; got != want {
		t.Errorf("next page link %s, want %s", got, want)
	}
	if got := (listFilter{}).Link("/ui/datasets", ""); got != "/ui/datasets" {
		t.Errorf("first page link %s", got)
	}
	if (listFilter{}).Filtered() || !(listFilter{Until: "2026-01-01"}).Filtered() {
		t.Error("Filtered is wrong")
	}
}
