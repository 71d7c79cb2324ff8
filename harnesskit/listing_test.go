package harnesskit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/clock"
)

// sessionAgent files each run under the session, user and client its input
// names.
var sessionAgent = harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
	var in struct{ Session, User, Client string }
	if err := run.DecodeInput(&in); err != nil {
		return harnesskit.Result{}, err
	}
	run.SetSessionID(in.Session)
	run.SetUserID(in.User)
	run.SetClientID(in.Client)
	return harnesskit.Result{Answer: "ok"}, nil
})

func TestListing(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 2, 3, 10, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	k := newKit(t, sessionAgent, harnesskit.Options{Now: clk.Now})
	runs := []struct {
		title, session, user, client string
		advance                      bool // move the clock a minute before creating it
	}{
		{"Refund order 1042", "", "u1", "c1", false},    // 0 at t0
		{"refund ORDER 7", "", "u2", "c1", true},        // 1 at t0+1m
		{"Where is my parcel?", "s1", "u1", "c2", true}, // 2 at t0+2m
		{"parcel follow-up", "s1", "u1", "c2", true},    // 3 at t0+3m
		{"deadbeef question", "", "u3", "", true},       // 4 at t0+4m
		{"Cafe latte", "s2", "u2", "", true},            // 5 at t0+5m
		{"ordered twice", "s2", "u2", "", true},         // 6 at t0+6m
		{"same-time twin", "", "", "", false},           // 7 at t0+6m, created after 6
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		if r.advance {
			clk.Advance(time.Minute)
		}
		in, _ := json.Marshal(map[string]string{"question": r.title, "session": r.session, "user": r.user, "client": r.client})
		ids[i] = k.create(`{"input":` + string(in) + `}`)
		k.wait(ids[i])
	}
	at := func(m int) string { return t0.Add(time.Duration(m) * time.Minute).Format(time.RFC3339) }
	dashless := func(id string) string { return strings.ReplaceAll(id, "-", "") }
	var created3 harnesskit.RunListItem // created_at as listed, full precision
	{
		var l harnesskit.RunList
		k.getJSON("/runs?query="+ids[3], 200, &l)
		created3 = l.Runs[0]
	}
	// Run ids are UUIDv7: runs created close together share a prefix. The
	// runs sharing one, newest first, one per session.
	sharing := func(prefix string) []int {
		var out []int
		seen := map[string]bool{}
		for i := len(runs) - 1; i >= 0; i-- {
			if !strings.HasPrefix(dashless(ids[i]), prefix) || (runs[i].session != "" && seen[runs[i].session]) {
				continue
			}
			seen[runs[i].session] = true
			out = append(out, i)
		}
		return out
	}
	tests := []struct {
		name  string
		query url.Values
		want  []int // indexes into runs, in order
		total int   // -1: len(want)
	}{
		{"everything, newest first, one per session", nil, []int{7, 6, 4, 3, 1, 0}, -1},
		{"title substring, any case", url.Values{"query": {"ORDER"}}, []int{6, 1, 0}, -1},
		{"title substring lower case", url.Values{"query": {"refund"}}, []int{1, 0}, -1},
		{"title with spaces", url.Values{"query": {"parcel follow"}}, []int{3}, -1},
		{"title matching nothing", url.Values{"query": {"nothing like it"}}, nil, -1},
		{"full id", url.Values{"query": {ids[4]}}, []int{4}, -1},
		{"full id without dashes, upper case", url.Values{"query": {strings.ToUpper(dashless(ids[4]))}}, []int{4}, -1},
		{"id with dashes in other places", url.Values{"query": {"-" + strings.Join(strings.Split(dashless(ids[4]), ""), "-")}}, []int{4}, -1},
		{"8-character id prefix matches every run sharing it", url.Values{"query": {dashless(ids[0])[:8]}}, sharing(dashless(ids[0])[:8]), -1},
		{"id prefix of a run hidden by its session lists that run", url.Values{"query": {ids[2]}}, []int{2}, -1},
		{"hex id prefix matching no run", url.Values{"query": {"00000000"}}, nil, -1},
		{"8 hex characters are an id, not a title", url.Values{"query": {"deadbeef"}}, nil, -1},
		{"8 hex characters with dashes are an id", url.Values{"query": {"dead-beef"}}, nil, -1},
		{"7 hex characters are a title", url.Values{"query": {"deadbee"}}, []int{4}, -1},
		{"7 hex characters with a dash are a title", url.Values{"query": {"deadb-ee"}}, nil, -1},
		{"user", url.Values{"user_id": {"u1"}}, []int{3, 0}, -1},
		{"client", url.Values{"client_id": {"c2"}}, []int{3}, -1},
		{"user and client", url.Values{"user_id": {"u1"}, "client_id": {"c1"}}, []int{0}, -1},
		{"unknown user", url.Values{"user_id": {"nobody"}}, nil, -1},
		{"filter before grouping", url.Values{"user_id": {"u2"}, "query": {"cafe"}}, []int{5}, -1},
		{"limit", url.Values{"limit": {"2"}}, []int{7, 6}, 6},
		{"limit and offset", url.Values{"limit": {"2"}, "offset": {"2"}}, []int{4, 3}, 6},
		{"last page", url.Values{"offset": {"5"}}, []int{0}, 6},
		{"offset at the end", url.Values{"offset": {"6"}}, nil, 6},
		{"offset past the end", url.Values{"offset": {"100"}}, nil, 6},
		{"limit 0 counts only", url.Values{"limit": {"0"}}, nil, 6},
		{"limit over the cap", url.Values{"limit": {"100000"}}, []int{7, 6, 4, 3, 1, 0}, -1},
		{"since is inclusive", url.Values{"since": {at(3)}}, []int{7, 6, 4, 3}, -1},
		{"until is exclusive", url.Values{"until": {at(3)}}, []int{2, 1, 0}, -1},
		{"since and until", url.Values{"since": {at(1)}, "until": {at(4)}}, []int{3, 1}, -1},
		{"since with an offset", url.Values{"since": {t0.Add(3 * time.Minute).In(time.FixedZone("", 2*3600)).Format(time.RFC3339)}}, []int{7, 6, 4, 3}, -1},
		{"since as listed, full precision", url.Values{"since": {*created3.CreatedAt}}, []int{7, 6, 4, 3}, -1},
		{"until after everything", url.Values{"until": {at(60)}}, []int{7, 6, 4, 3, 1, 0}, -1},
		{"since after everything", url.Values{"since": {at(60)}}, nil, -1},
		{"since a date", url.Values{"since": {"2026-02-03"}}, []int{7, 6, 4, 3, 1, 0}, -1},
		{"everything combined", url.Values{"query": {"order"}, "since": {at(1)}, "limit": {"1"}, "offset": {"1"}}, []int{1}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got harnesskit.RunList
			k.getJSON("/runs?"+tt.query.Encode(), 200, &got)
			var gotIdx []int
			for _, item := range got.Runs {
				i := indexOf(ids, item.RunID)
				gotIdx = append(gotIdx, i)
				if i < 0 {
					continue
				}
				r := runs[i]
				if item.Title == nil || *item.Title != r.title || str(item.SessionID) != r.session || str(item.UserID) != r.user || str(item.ClientID) != r.client {
					t.Errorf("item %d = %+v", i, item)
				}
				if item.CreatedAt == nil {
					t.Errorf("item %d has no created_at", i)
				}
			}
			if diff := cmp.Diff(tt.want, gotIdx); diff != "" {
				t.Errorf("runs (-want +got):\n%s", diff)
			}
			total := tt.total
			if total < 0 {
				total = len(tt.want)
			}
			if got.Total != total {
				t.Errorf("total = %d, want %d", got.Total, total)
			}
		})
	}
	// An offset written with an unescaped "+" arrives as a space.
	var l harnesskit.RunList
	k.getJSON("/runs?since="+t0.Add(3*time.Minute).In(time.FixedZone("", 3600)).Format(time.RFC3339), 200, &l)
	if l.Total != 4 {
		t.Errorf("since with an unescaped + offset: total %d, want 4", l.Total)
	}
}

func TestListing_BadQueries(t *testing.T) {
	t.Parallel()
	k := newKit(t, answer, harnesskit.Options{})
	for _, q := range []string{"limit=-1", "limit=ten", "limit=1.5", "offset=-3", "offset=x", "since=yesterday", "until=2026-13-01T00:00:00Z", "since=1700000000"} {
		resp, b := k.do("GET", "/runs?"+q, nil, nil)
		if code, _ := errorCode(t, b); resp.StatusCode != 400 || code != "invalid_query" {
			t.Errorf("GET /runs?%s = %d %s, want 400 invalid_query", q, resp.StatusCode, b)
		}
	}
}

func TestListing_DefaultLimit(t *testing.T) {
	t.Parallel()
	k := newKit(t, answer, harnesskit.Options{MaxConcurrentRuns: 2})
	n := harnesskit.DefaultListLimit + 3
	for i := range n {
		k.create(fmt.Sprintf(`{"input":{"question":"q%d"}}`, i))
	}
	var l harnesskit.RunList
	k.getJSON("/runs", 200, &l)
	if len(l.Runs) != harnesskit.DefaultListLimit || l.Total != n {
		t.Errorf("%d runs of %d, want %d of %d", len(l.Runs), l.Total, harnesskit.DefaultListLimit, n)
	}
	// Queued and running runs are listed too, with their status.
	if _, ok := l.Runs[0].Extra["status"]; !ok {
		t.Errorf("item without status: %+v", l.Runs[0])
	}
}

func indexOf(ids []string, id string) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func TestListing_Titles(t *testing.T) {
	t.Parallel()
	agent := harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		if run.Question() == "rename me" {
			run.SetTitle("Renamed")
		}
		return harnesskit.Result{Answer: "ok"}, nil
	})
	k := newKit(t, agent, harnesskit.Options{InputSchema: json.RawMessage(`{"type":"object"}`)})
	long := strings.Repeat("é", 250)
	tests := []struct{ input, want string }{
		{`{"question":"  two\nlines\there  "}`, "two lines here"},
		{`{"question":"` + long + `"}`, strings.Repeat("é", 199) + "…"},
		{`{"question":"rename me"}`, "Renamed"},
		{`{"prompt":"no question"}`, ""},
	}
	for _, tt := range tests {
		id := k.create(`{"input":` + tt.input + `}`)
		k.wait(id)
		var l harnesskit.RunList
		k.getJSON("/runs?query="+id, 200, &l)
		if got := str(l.Runs[0].Title); got != tt.want {
			t.Errorf("title of %s = %q, want %q", tt.input, got, tt.want)
		}
	}
}
