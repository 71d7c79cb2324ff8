package harness

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
)

// A harness base URL is http(s) without credentials, query or fragment;
// loopback, private and link-local hosts are private whether written as
// IP literals or localhost.
func TestBaseURLRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url     string
		ok      bool
		private bool
	}{
		{"https://h.example.com/api/", true, false},
		{"http://203.0.113.7:8080", true, false},
		{"http://127.0.0.1:1", true, true},
		{"http://localhost", true, true},
		{"http://LOCALHOST.", true, true},
		{"http://api.localhost", true, true},
		{"http://192.168.1.1", true, true},
		{"http://100.64.0.1", true, true},
		{"http://[fe80::1]", true, true},
		{"http://[::ffff:10.0.0.1]", true, true},
		{"http://0.0.0.0", true, true},
		{"ftp://h", false, false},
		{"https://", false, false},
		{"https://u@h", false, false},
		{"https://h?", false, false},
		{"https://h/a b", false, false},
		{"https://h/" + strings.Repeat("a", maxURLLen), false, false},
	} {
		base, err := checkBaseURL(tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("checkBaseURL(%q) = %v, want ok %v", tc.url, err, tc.ok)
			continue
		}
		if tc.ok && privateHost(base) != tc.private {
			t.Errorf("privateHost(%q) = %v, want %v", base, !tc.private, tc.private)
		}
	}
}

// A listing cursor carries an offset and nothing else; an edited or
// foreign one is refused.
func TestRunsCursorCarriesOnlyAnOffset(t *testing.T) {
	t.Parallel()
	q, err := ParseRunsQuery(url.Values{"cursor": {encodeCursor(150)}, "limit": {"100"}})
	if err != nil || q.Offset != 150 || q.Limit != 100 {
		t.Fatalf("ParseRunsQuery = %+v, %v", q, err)
	}
	for _, c := range []string{"", "x", encodeCursor(0), encodeCursor(maxOffset + 1), "cnVucy1vZmZzZXQ6MDE", "cnVucy1vZmZzZXQ6LTE"} {
		if _, ok := decodeCursor(c); ok {
			t.Errorf("decodeCursor(%q) accepted", c)
		}
	}
}

// The trajectory check reads one JSON object and nothing after it.
func TestTrajectoryMustBeOneJSONObject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		doc string
		ok  bool
	}{
		{`{"steps":[{"a":[1,{"b":null}]}]}`, true},
		{` {} `, true},
		{`[]`, false},
		{`"x"`, false},
		{`{"a":`, false},
		{`{} {}`, false},
		{`{}x`, false},
		{``, false},
	} {
		if err := checkJSONObject(bytes.NewReader([]byte(tc.doc))); (err == nil) != tc.ok {
			t.Errorf("checkJSONObject(%q) = %v, want ok %v", tc.doc, err, tc.ok)
		}
	}
}

// ParseRunsQuery never panics, and what it accepts is within bounds.
func FuzzParseRunsQuery(f *testing.F) {
	for _, s := range []string{"limit=5&cursor=" + encodeCursor(10), "since=2026-01-01T00:00:00Z&until=2026-01-02T00:00:00Z", "query=%FF", "limit=-1", "x=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := ParseRunsQuery(v)
		if err != nil {
			return
		}
		if q.Limit < 1 || q.Limit > MaxRunsLimit || q.Offset < 0 || q.Offset > maxOffset || len(q.Query) > 1024 {
			t.Fatalf("accepted %+v", q)
		}
		if q.Since != nil && q.Until != nil && !q.Since.Before(*q.Until) {
			t.Fatalf("accepted since %v until %v", q.Since, q.Until)
		}
	})
}
