package harnesskit

import (
	"cmp"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ListQuery is a parsed GET /runs query (the contract's parameters).
type ListQuery struct {
	// Query is the free-text filter: text that looks like an id (8 or more
	// hex characters once dashes are dropped, any case) matches runs whose
	// id starts with it, dashes and case ignored; any other text matches
	// runs whose title contains it, case-insensitively. Empty: no filter.
	Query string
	// UserID and ClientID keep runs with exactly that value; empty: no
	// filter.
	UserID, ClientID string
	// Limit is the page size (default 50, clamped to MaxListLimit); Offset
	// is the page start.
	Limit, Offset int
	// Since keeps runs created at or after it; Until keeps runs created
	// before it. Zero: no bound.
	Since, Until time.Time
}

// parseListQuery reads GET /runs's query parameters.
func parseListQuery(v url.Values) (ListQuery, error) {
	q := ListQuery{
		Query:    v.Get("query"),
		UserID:   v.Get("user_id"),
		ClientID: v.Get("client_id"),
		Limit:    DefaultListLimit,
	}
	var err error
	if s := v.Get("limit"); s != "" {
		if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 0 {
			return q, errorf(CodeInvalidQuery, "limit must be a non-negative integer, not %q", s)
		}
		q.Limit = min(q.Limit, MaxListLimit)
	}
	if s := v.Get("offset"); s != "" {
		if q.Offset, err = strconv.Atoi(s); err != nil || q.Offset < 0 {
			return q, errorf(CodeInvalidQuery, "offset must be a non-negative integer, not %q", s)
		}
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		s := v.Get(p.name)
		if s == "" {
			continue
		}
		if *p.dst, err = parseTimeParam(s); err != nil {
			return q, errorf(CodeInvalidQuery, "%s must be an ISO 8601 date-time such as 2026-01-02T15:04:05Z, not %q", p.name, s)
		}
	}
	return q, nil
}

// parseTimeParam parses an RFC 3339 date-time. A "+" offset that arrived
// as a space (an unescaped "+" in a query string) is put back; a time
// without a zone, or a date alone, is read as UTC.
func parseTimeParam(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, ' '); i > 10 {
		s = s[:i] + "+" + s[i+1:]
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Parse(time.RFC3339Nano, s) // for the error
}

// idPrefix returns the dash-less lowercase form of q and whether q looks
// like an id: 8 or more hex characters once dashes are dropped.
func idPrefix(q string) (string, bool) {
	p := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(q), "-", ""))
	if len(p) < 8 {
		return "", false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return p, true
}

// listEntry is what listing reads of one run.
type listEntry struct {
	id        string
	title     *string
	userID    *string
	clientID  *string
	sessionID *string
	createdAt time.Time
	seq       uint64
	status    Status
}

// newer orders entries newest first: later created_at, then later
// creation order.
func newer(a, b listEntry) int {
	if c := b.createdAt.Compare(a.createdAt); c != 0 {
		return c
	}
	return cmp.Compare(b.seq, a.seq)
}

// listRuns applies q to entries: filter, keep the newest run of each
// session, order newest first, count, then cut the page.
func listRuns(entries []listEntry, q ListQuery) RunList {
	prefix, byID := idPrefix(q.Query)
	lowerQuery := strings.ToLower(q.Query)
	var kept []listEntry
	for _, e := range entries {
		switch {
		case q.Query != "" && byID:
			if !strings.HasPrefix(strings.ToLower(strings.ReplaceAll(e.id, "-", "")), prefix) {
				continue
			}
		case q.Query != "":
			if e.title == nil || !strings.Contains(strings.ToLower(*e.title), lowerQuery) {
				continue
			}
		}
		if q.UserID != "" && (e.userID == nil || *e.userID != q.UserID) {
			continue
		}
		if q.ClientID != "" && (e.clientID == nil || *e.clientID != q.ClientID) {
			continue
		}
		if !q.Since.IsZero() && e.createdAt.Before(q.Since) {
			continue
		}
		if !q.Until.IsZero() && !e.createdAt.Before(q.Until) {
			continue
		}
		kept = append(kept, e)
	}
	slices.SortFunc(kept, newer)
	// Items sharing a session_id are listed once, as the newest of them:
	// after sorting, the first of each session is its newest.
	seen := map[string]bool{}
	grouped := kept[:0]
	for _, e := range kept {
		if e.sessionID != nil {
			if seen[*e.sessionID] {
				continue
			}
			seen[*e.sessionID] = true
		}
		grouped = append(grouped, e)
	}
	list := RunList{Total: len(grouped), Runs: []RunListItem{}}
	if q.Offset >= len(grouped) {
		return list
	}
	page := grouped[q.Offset:]
	page = page[:min(len(page), q.Limit)]
	for _, e := range page {
		list.Runs = append(list.Runs, RunListItem{
			RunID:     e.id,
			Title:     e.title,
			UserID:    e.userID,
			ClientID:  e.clientID,
			CreatedAt: new(formatTime(e.createdAt)),
			SessionID: e.sessionID,
			Extra:     map[string]json.RawMessage{"status": jsonString(string(e.status))},
		})
	}
	return list
}
