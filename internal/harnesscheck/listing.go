package harnesscheck

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/gyrehq/gyre/harnesskit"
)

// listLimit is the page size of the listings the checks read: every run
// the checks created is among the newest, so it is on this page.
const listLimit = 50

// listingRuns is how many runs the listing checks add to the others.
const listingRuns = 2

// farPast is an until bound before any run.
const farPast = "2000-01-01T00:00:00Z"

// checkListing creates runs it can recognise and checks GET /runs's
// semantics (the contract's descriptions of query, limit, offset, since,
// until, newest first and session_id).
func (k *checker) checkListing(ctx context.Context) {
	names := []string{CheckListingQuery, CheckListingPagination, CheckListingTimeRange, CheckListingSessionID}
	if !k.provides().RunListing {
		k.skip("provides.run_listing is false", names...)
		return
	}
	if k.input == nil {
		k.skip("no run input: "+k.noInput, names...)
		return
	}
	if k.main == nil {
		k.skip("no run could be created (see the run check)", names...)
		return
	}
	var made []*createdRun
	for i := 1; i <= listingRuns; i++ {
		purpose := "listing-" + strconv.Itoa(i)
		body, err := k.runRequest(purpose, nil)
		if err != nil {
			k.skip("encode the run request: "+err.Error(), names...)
			return
		}
		r, _, err := k.create(ctx, purpose, body, "application/json")
		if err != nil {
			k.skip("could not create runs to list: "+err.Error(), names...)
			return
		}
		made = append(made, r)
	}
	// Let them finish, so titles and the like are final; how they end is
	// the run check's business (when its run did not finish, these will
	// not either: list them as they are).
	if k.main.final != nil {
		for _, r := range made {
			_, _ = k.wait(ctx, r)
		}
	}
	for _, step := range []func(context.Context){k.listingQuery, k.listingPagination, k.listingTimeRange, k.listingSessionID} {
		if ctx.Err() != nil {
			return
		}
		step(ctx)
	}
}

// list fetches one page of GET /runs and validates it.
func (k *checker) list(ctx context.Context, q url.Values) (harnesskit.RunList, error) {
	a, err := k.c.do(ctx, request{op: opListRuns, path: "/runs", query: q, limit: MaxStatusBytes})
	if err != nil {
		return harnesskit.RunList{}, err
	}
	if _, err := k.c.expect(k.ct, opListRuns, a); err != nil {
		return harnesskit.RunList{}, fmt.Errorf("GET /runs?%s: %w", q.Encode(), err)
	}
	var l harnesskit.RunList
	if err := json.Unmarshal(a.body, &l); err != nil {
		return harnesskit.RunList{}, fmt.Errorf("GET /runs?%s answer is not a RunList: %w", q.Encode(), err)
	}
	return l, nil
}

// listed returns the item of runID in l.
func listed(l harnesskit.RunList, runID string) (harnesskit.RunListItem, bool) {
	for _, it := range l.Runs {
		if it.RunID == runID {
			return it, true
		}
	}
	return harnesskit.RunListItem{}, false
}

// hexID returns id without dashes, in lower case, when that is 8 or more
// hex characters: the contract's "text that looks like an id".
func hexID(id string) (string, bool) {
	h := strings.ToLower(strings.ReplaceAll(id, "-", ""))
	if len(h) < 8 {
		return "", false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return h, true
}

// idQuery builds an id-prefix query for target: the shortest prefix of 8
// or more hex characters that none of others starts with, keeping
// target's dashes, in upper case (the contract ignores dashes and case).
func idQuery(target string, others []string) (string, bool) {
	h, ok := hexID(target)
	if !ok {
		return "", false
	}
	n := 8
	for ; n < len(h); n++ {
		unique := true
		for _, o := range others {
			if strings.HasPrefix(strings.ToLower(strings.ReplaceAll(o, "-", "")), h[:n]) {
				unique = false
				break
			}
		}
		if unique {
			break
		}
	}
	var b strings.Builder
	count := 0
	for _, r := range target {
		if count == n {
			break
		}
		b.WriteRune(r)
		if r != '-' {
			count++
		}
	}
	return strings.ToUpper(b.String()), true
}

// idMatches reports whether runID starts with the id prefix q, dashes and
// case ignored.
func idMatches(runID, q string) bool {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "-", "")) }
	return strings.HasPrefix(norm(runID), norm(strings.TrimSpace(q)))
}

// titleProbe picks a piece of title to query for: a middle piece, else
// the whole title, that does not look like an id, with its case swapped.
func titleProbe(title string) (string, bool) {
	t := []rune(strings.TrimSpace(title))
	if len(t) == 0 {
		return "", false
	}
	var cands []string
	if len(t) > 6 {
		start := len(t) / 4
		end := min(len(t), start+max(4, len(t)/2))
		cands = append(cands, string(t[start:end]))
	}
	cands = append(cands, string(t))
	for _, c := range cands {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if _, idLike := hexID(c); idLike {
			continue
		}
		return swapCase(c), true
	}
	return "", false
}

// swapCase swaps upper and lower case, unless that changes the text under
// lower-casing (some runes do not round-trip).
func swapCase(s string) string {
	out := strings.Map(func(r rune) rune {
		switch {
		case unicode.IsUpper(r):
			return unicode.ToLower(r)
		case unicode.IsLower(r):
			return unicode.ToUpper(r)
		}
		return r
	}, s)
	if strings.ToLower(out) != strings.ToLower(s) {
		return s
	}
	return out
}

// noMatchQuery is free text no title holds and no id starts with.
func noMatchQuery() string {
	// rand.Text is base32 (A-Z, 2-7): mapped into g..z it is never hex.
	t := strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return 'g' + (r-'A')%20
		}
		return 'z'
	}, rand.Text()[:12])
	return "gyre-check-nomatch-" + t
}

// ids lists the ids of the runs the checks created.
func (k *checker) ids() []string {
	out := make([]string, len(k.created))
	for i, r := range k.created {
		out[i] = r.id
	}
	return out
}

// listingQuery checks the query parameter: an id prefix finds the run, a
// title piece in another case finds it, and text matching nothing lists
// nothing.
func (k *checker) listingQuery(ctx context.Context) {
	newest := k.created[len(k.created)-1]
	others := slices.DeleteFunc(k.ids(), func(id string) bool { return id == newest.id })
	var notes []string
	var item *harnesskit.RunListItem
	if q, ok := idQuery(newest.id, others); ok {
		v := url.Values{"query": {q}, "limit": {strconv.Itoa(listLimit)}}
		l, err := k.list(ctx, v)
		if err != nil {
			k.set(CheckListingQuery, Fail, "%v", err)
			return
		}
		it, found := listed(l, newest.id)
		if !found {
			k.set(CheckListingQuery, Fail, "query=%s (an id prefix: 8 or more hex characters, dashes and case ignored) did not list run %s", q, newest.id)
			return
		}
		item = &it
		for _, o := range l.Runs {
			if !idMatches(o.RunID, q) {
				k.set(CheckListingQuery, Fail, "query=%s (an id prefix) listed run %s, whose id does not start with it (%d runs listed): is query ignored?", q, oneLine(o.RunID, 80), len(l.Runs))
				return
			}
		}
		notes = append(notes, fmt.Sprintf("id prefix %s found run %s", q, newest.id))
	} else {
		notes = append(notes, fmt.Sprintf("run ids such as %q are not hex, so the id-prefix rule was not exercised", oneLine(newest.id, 40)))
	}
	if item == nil {
		l, err := k.list(ctx, url.Values{"limit": {strconv.Itoa(listLimit)}})
		if err != nil {
			k.set(CheckListingQuery, Fail, "%v", err)
			return
		}
		if it, ok := listed(l, newest.id); ok {
			item = &it
		} else {
			k.set(CheckListingQuery, Fail, "GET /runs?limit=%d does not list run %s, which gyre created last", listLimit, newest.id)
			return
		}
	}
	if item.Title == nil || strings.TrimSpace(*item.Title) == "" {
		notes = append(notes, "the runs have no title, so the title rule was not exercised")
	} else if probe, ok := titleProbe(*item.Title); !ok {
		notes = append(notes, "the run's title looks like an id, so the title rule was not exercised")
	} else {
		l, err := k.list(ctx, url.Values{"query": {probe}, "limit": {strconv.Itoa(listLimit)}})
		if err != nil {
			k.set(CheckListingQuery, Fail, "%v", err)
			return
		}
		if _, found := listed(l, newest.id); !found {
			k.set(CheckListingQuery, Fail, "query=%q (a piece of run %s's title %q in another case) did not list it: other text matches titles, case-insensitive", probe, newest.id, oneLine(*item.Title, 80))
			return
		}
		for _, o := range l.Runs {
			if o.Title == nil || !strings.Contains(strings.ToLower(*o.Title), strings.ToLower(probe)) {
				title := "no title"
				if o.Title != nil {
					title = fmt.Sprintf("title %q", oneLine(*o.Title, 80))
				}
				k.set(CheckListingQuery, Fail, "query=%q listed run %s with %s, which does not contain it: is query ignored?", probe, oneLine(o.RunID, 80), title)
				return
			}
		}
		notes = append(notes, fmt.Sprintf("title text %q found run %s", probe, newest.id))
	}
	nomatch := noMatchQuery()
	l, err := k.list(ctx, url.Values{"query": {nomatch}, "limit": {strconv.Itoa(listLimit)}})
	if err != nil {
		k.set(CheckListingQuery, Fail, "%v", err)
		return
	}
	if len(l.Runs) > 0 || l.Total != 0 {
		k.set(CheckListingQuery, Fail, "query=%s matches no id and no title, yet GET /runs listed %d runs (total %d): is query ignored?", nomatch, len(l.Runs), l.Total)
		return
	}
	notes = append(notes, "text matching nothing listed nothing")
	k.set(CheckListingQuery, Pass, "%s", strings.Join(notes, "; "))
}

// createdAt parses an item's created_at; ok is false when it has none.
func createdAt(it harnesskit.RunListItem) (time.Time, bool) {
	if it.CreatedAt == nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, *it.CreatedAt)
	return t, err == nil
}

// listingPagination checks limit, offset and total against the full
// listing, and that runs come newest first.
func (k *checker) listingPagination(ctx context.Context) {
	page := func(limit, offset int) (harnesskit.RunList, error) {
		return k.list(ctx, url.Values{"limit": {strconv.Itoa(limit)}, "offset": {strconv.Itoa(offset)}})
	}
	all, err := page(listLimit, 0)
	if err != nil {
		k.set(CheckListingPagination, Fail, "%v", err)
		return
	}
	if len(all.Runs) > listLimit {
		k.set(CheckListingPagination, Fail, "limit=%d listed %d runs", listLimit, len(all.Runs))
		return
	}
	if len(all.Runs) < 2 || all.Total < 2 {
		k.set(CheckListingPagination, Fail, "GET /runs lists %d runs (total %d) after gyre created %d", len(all.Runs), all.Total, len(k.created))
		return
	}
	if all.Total < len(all.Runs) {
		k.set(CheckListingPagination, Fail, "total is %d but the page holds %d runs: total counts every matching run", all.Total, len(all.Runs))
		return
	}
	for i, want := range []string{all.Runs[0].RunID, all.Runs[1].RunID} {
		p, err := page(1, i)
		if err != nil {
			k.set(CheckListingPagination, Fail, "%v", err)
			return
		}
		switch {
		case len(p.Runs) != 1:
			k.set(CheckListingPagination, Fail, "limit=1&offset=%d listed %d runs, want 1", i, len(p.Runs))
			return
		case p.Runs[0].RunID != want:
			k.set(CheckListingPagination, Fail, "limit=1&offset=%d listed run %s, but run %s is number %d of the full listing", i, oneLine(p.Runs[0].RunID, 80), oneLine(want, 80), i+1)
			return
		case p.Total != all.Total:
			k.set(CheckListingPagination, Fail, "limit=1&offset=%d says total %d, the full listing %d: total counts every matching run, not the page", i, p.Total, all.Total)
			return
		}
	}
	beyond, err := page(1, all.Total)
	if err != nil {
		k.set(CheckListingPagination, Fail, "%v", err)
		return
	}
	if len(beyond.Runs) != 0 {
		k.set(CheckListingPagination, Fail, "offset=%d (the total) still listed %d runs", all.Total, len(beyond.Runs))
		return
	}
	// Newest first: created_at never increases down the page, and the runs
	// gyre created come in reverse order of creation.
	for i := 1; i < len(all.Runs); i++ {
		a, okA := createdAt(all.Runs[i-1])
		b, okB := createdAt(all.Runs[i])
		if okA && okB && b.After(a) {
			k.set(CheckListingPagination, Fail, "not newest first: run %s (created %s) is listed before run %s (created %s)",
				oneLine(all.Runs[i-1].RunID, 80), *all.Runs[i-1].CreatedAt, oneLine(all.Runs[i].RunID, 80), *all.Runs[i].CreatedAt)
			return
		}
	}
	pos := map[string]int{}
	for i, it := range all.Runs {
		pos[it.RunID] = i
	}
	for i, older := range k.created {
		for _, newer := range k.created[i+1:] {
			pi, okI := pos[older.id]
			pj, okJ := pos[newer.id]
			if !okI || !okJ || pj < pi {
				continue
			}
			ti, hasI := createdAt(all.Runs[pi])
			tj, hasJ := createdAt(all.Runs[pj])
			if hasI != hasJ || (hasI && !tj.After(ti)) {
				continue // equal or unknown creation times: no order to check
			}
			k.set(CheckListingPagination, Fail, "not newest first: run %s is listed after run %s, which gyre created before it", newer.id, older.id)
			return
		}
	}
	k.set(CheckListingPagination, Pass, "limit=1 pages at offsets 0 and 1 match the full listing (total %d), offset=total lists nothing, and runs come newest first", all.Total)
}

// listingTimeRange checks since (inclusive) and until (exclusive) around
// the created_at of the newest run gyre created, and far bounds.
func (k *checker) listingTimeRange(ctx context.Context) {
	all, err := k.list(ctx, url.Values{"limit": {strconv.Itoa(listLimit)}})
	if err != nil {
		k.set(CheckListingTimeRange, Fail, "%v", err)
		return
	}
	type stamped struct {
		id  string
		t   time.Time
		raw string
	}
	var ours []stamped
	for _, r := range k.created {
		if it, ok := listed(all, r.id); ok {
			if t, ok := createdAt(it); ok {
				ours = append(ours, stamped{r.id, t, *it.CreatedAt})
			}
		}
	}
	var notes []string
	future := k.cfg.Clock.Now().AddDate(1, 0, 0).UTC()
	if len(ours) == 0 {
		notes = append(notes, "no run gyre created is listed with a created_at, so only far bounds were checked")
	} else {
		pivot := ours[0]
		for _, s := range ours[1:] {
			if !s.t.Before(pivot.t) {
				pivot = s
			}
		}
		future = pivot.t.AddDate(1, 0, 0).UTC()
		since, err := k.list(ctx, url.Values{"since": {pivot.raw}, "limit": {strconv.Itoa(listLimit)}})
		if err != nil {
			k.set(CheckListingTimeRange, Fail, "%v", err)
			return
		}
		if _, ok := listed(since, pivot.id); !ok {
			k.set(CheckListingTimeRange, Fail, "since=%s (run %s's created_at) did not list run %s: since keeps runs created at or after it", pivot.raw, pivot.id, pivot.id)
			return
		}
		for _, it := range since.Runs {
			if t, ok := createdAt(it); ok && t.Before(pivot.t) {
				k.set(CheckListingTimeRange, Fail, "since=%s listed run %s, created %s, before it", pivot.raw, oneLine(it.RunID, 80), *it.CreatedAt)
				return
			}
		}
		until, err := k.list(ctx, url.Values{"until": {pivot.raw}, "limit": {strconv.Itoa(listLimit)}})
		if err != nil {
			k.set(CheckListingTimeRange, Fail, "%v", err)
			return
		}
		if _, ok := listed(until, pivot.id); ok {
			k.set(CheckListingTimeRange, Fail, "until=%s (run %s's created_at) listed run %s: until keeps runs created before it", pivot.raw, pivot.id, pivot.id)
			return
		}
		for _, it := range until.Runs {
			if t, ok := createdAt(it); ok && !t.Before(pivot.t) {
				k.set(CheckListingTimeRange, Fail, "until=%s listed run %s, created %s, not before it", pivot.raw, oneLine(it.RunID, 80), *it.CreatedAt)
				return
			}
		}
		for _, s := range ours {
			if !s.t.Before(pivot.t) {
				continue
			}
			if _, ok := listed(since, s.id); ok {
				k.set(CheckListingTimeRange, Fail, "since=%s listed run %s, created %s, before it", pivot.raw, s.id, s.raw)
				return
			}
			if _, ok := listed(until, s.id); !ok {
				k.set(CheckListingTimeRange, Fail, "until=%s did not list run %s, created %s, before it", pivot.raw, s.id, s.raw)
				return
			}
		}
		notes = append(notes, fmt.Sprintf("since=%s listed run %s and until=%s did not", pivot.raw, pivot.id, pivot.raw))
	}
	fut := future.Format(time.RFC3339)
	l, err := k.list(ctx, url.Values{"since": {fut}, "limit": {strconv.Itoa(listLimit)}})
	if err != nil {
		k.set(CheckListingTimeRange, Fail, "%v", err)
		return
	}
	if len(l.Runs) > 0 || l.Total != 0 {
		k.set(CheckListingTimeRange, Fail, "since=%s, a year after the newest run, listed %d runs (total %d): is since ignored?", fut, len(l.Runs), l.Total)
		return
	}
	l, err = k.list(ctx, url.Values{"until": {farPast}, "limit": {strconv.Itoa(listLimit)}})
	if err != nil {
		k.set(CheckListingTimeRange, Fail, "%v", err)
		return
	}
	for _, r := range k.created {
		if _, ok := listed(l, r.id); ok {
			k.set(CheckListingTimeRange, Fail, "until=%s listed run %s, which gyre created just now: is until ignored?", farPast, r.id)
			return
		}
	}
	notes = append(notes, "far bounds listed nothing new")
	k.set(CheckListingTimeRange, Pass, "%s", strings.Join(notes, "; "))
}

// listingSessionID checks that items sharing a session_id are listed
// once.
func (k *checker) listingSessionID(ctx context.Context) {
	all, err := k.list(ctx, url.Values{"limit": {strconv.Itoa(listLimit)}})
	if err != nil {
		k.set(CheckListingSessionID, Fail, "%v", err)
		return
	}
	bySession := map[string][]string{}
	var order []string
	for _, it := range all.Runs {
		if it.SessionID == nil || *it.SessionID == "" {
			continue
		}
		s := *it.SessionID
		if _, ok := bySession[s]; !ok {
			order = append(order, s)
		}
		bySession[s] = append(bySession[s], it.RunID)
	}
	if len(order) == 0 {
		k.set(CheckListingSessionID, Skip, "no listed run carries a session_id, so there is no grouping to check")
		return
	}
	for _, s := range order {
		if ids := bySession[s]; len(ids) > 1 {
			k.set(CheckListingSessionID, Fail, "session_id %q is listed %d times (runs %s): items sharing a session_id are listed once, as the newest of them",
				oneLine(s, 80), len(ids), oneLine(strings.Join(ids, ", "), 200))
			return
		}
	}
	k.set(CheckListingSessionID, Pass, "%d listed sessions, each listed once", len(order))
}
