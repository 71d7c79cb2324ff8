package eval

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// GET /runs sends the filters as given with the key, and an answer that
// is not a RunList is an invalid response, never a list.
func TestListRunsAnswerMustBeARunList(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		wantRuns   int
		reason     string
	}{
		{"run list", `{"runs":[{"run_id":"r2","title":"b","x":1},{"run_id":"r1"}],"total":7}`, 2, ""},
		{"empty", `{"runs":[],"total":0}`, 0, ""},
		{"no total", `{"runs":[]}`, 0, "schema"},
		{"negative total", `{"runs":[],"total":-1}`, 0, "schema"},
		{"fractional total", `{"runs":[],"total":1.5}`, 0, "schema"},
		{"runs null", `{"runs":null,"total":0}`, 0, "schema"},
		{"item without run_id", `{"runs":[{"title":"x"}],"total":1}`, 0, "schema"},
		{"numeric run_id", `{"runs":[{"run_id":7}],"total":1}`, 0, "schema"},
		{"dot-dot run_id", `{"runs":[{"run_id":".."}],"total":1}`, 0, "schema"},
		{"title not a string", `{"runs":[{"run_id":"r","title":3}],"total":1}`, 0, "schema"},
		{"not an object", `[1]`, 0, "not_json"},
		{"bad JSON", `{"runs":[`, 0, "not_json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var gotQuery, gotKey string
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gotQuery, gotKey = r.URL.RawQuery, r.Header.Get("x-api-key")
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(tc.body))
			}))
			defer ts.Close()
			c, err := NewClient(ts.URL, "k", nil, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			l, err := c.ListRuns(context.Background(), url.Values{"query": {"a b"}, "limit": {"2"}})
			if gotKey != "k" || !strings.Contains(gotQuery, "query=a+b") || !strings.Contains(gotQuery, "limit=2") {
				t.Fatalf("harness saw query %q key %q", gotQuery, gotKey)
			}
			if tc.reason == "" {
				if err != nil || len(l.Runs) != tc.wantRuns {
					t.Fatalf("ListRuns = %d runs, %v; want %d", len(l.Runs), err, tc.wantRuns)
				}
				return
			}
			var ce *CallError
			if !errors.As(err, &ce) || ce.Kind != KindInvalid || ce.Reason != tc.reason {
				t.Fatalf("ListRuns error = %v, want invalid_response %s", err, tc.reason)
			}
		})
	}
}

// decodeRunList never panics, and what it accepts has usable run ids.
func FuzzDecodeRunList(f *testing.F) {
	for _, s := range []string{`{"runs":[{"run_id":"a"}],"total":1}`, `{"runs":[],"total":0}`, `{"runs":[{"run_id":".."}],"total":1}`, `{}`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodeRunList(b)
		if err != nil {
			return
		}
		if l.Total < 0 {
			t.Fatalf("accepted total %d", l.Total)
		}
		for _, it := range l.Runs {
			if it.RunID == "" || it.RunID == "." || it.RunID == ".." || len(it.RunID) > maxRunIDLen {
				t.Fatalf("accepted run_id %q", it.RunID)
			}
		}
	})
}
