package harnesskit_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/harnesskit"
)

// fuzzServer is a Server that keeps little: fuzzing creates many runs.
func fuzzServer(f *testing.F) *harnesskit.Server {
	srv, err := harnesskit.New(answer, harnesskit.Options{
		Agent: "fuzz", Model: "m", RetainRuns: 8, MaxQueuedRuns: 8, MaxConcurrentRuns: 1,
		MaxBodyBytes: 1 << 16, MaxFileBytes: 1 << 12, MaxFiles: 4, WorkspaceDir: f.TempDir(),
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = srv.Close() })
	return srv
}

// FuzzPostRuns feeds POST /runs arbitrary bodies: JSON and multipart. It
// answers 201 with a run id, or a 4xx/503 JSON error, never a 500.
func FuzzPostRuns(f *testing.F) {
	srv := fuzzServer(f)
	f.Add("application/json", []byte(`{"input":{"question":"q"},"model":"m","metadata":{"repetition":1}}`))
	f.Add("application/json", []byte(`{"input":{"question":"q"},"files":[{"name":"a","url":"https://x.test/a"}]}`))
	f.Add("application/json", []byte(`{"input":{"question":1}}`))
	f.Add("application/json; charset=utf-8", []byte(`[]`))
	f.Add("text/plain", []byte(`hello`))
	f.Add("", []byte(`{"input":{"question":"\u0000"}}`))
	mp := "--B\r\nContent-Disposition: form-data; name=\"payload\"\r\nContent-Type: application/json\r\n\r\n" +
		`{"input":{"question":"q"},"files":[{"name":"a.txt"}]}` +
		"\r\n--B\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.txt\"\r\n\r\nA\r\n--B--\r\n"
	f.Add("multipart/form-data; boundary=B", []byte(mp))
	f.Add("multipart/form-data; boundary=B", []byte(strings.Replace(mp, `filename="a.txt"`, `filename="../a.txt"`, 1)))
	f.Add("multipart/form-data; boundary=B", []byte("--B\r\n\r\n--B--"))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		req := httptest.NewRequest("POST", "/runs", bytes.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		switch w.Code {
		case 201:
			var c harnesskit.RunCreated
			if err := json.Unmarshal(w.Body.Bytes(), &c); err != nil || c.RunID == "" {
				t.Fatalf("201 without a run id: %s", w.Body)
			}
		case 413, 415, 422, 503:
			var e struct {
				Error harnesskit.Error `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("%d without an error body: %s", w.Code, w.Body)
			}
		default:
			t.Fatalf("POST /runs answered %d: %s", w.Code, w.Body)
		}
	})
}

// FuzzListQuery feeds GET /runs arbitrary query strings. It answers a page
// no longer than the limit, or 400 invalid_query.
func FuzzListQuery(f *testing.F) {
	srv := fuzzServer(f)
	for range 3 {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest("POST", "/runs", strings.NewReader(`{"input":{"question":"seed"}}`)))
	}
	for _, q := range []string{"", "query=seed", "query=0190abcd-ef", "limit=1&offset=1", "since=2026-01-01T00:00:00Z&until=2030-01-01T00:00:00%2B02:00",
		"limit=-1", "since=x", "user_id=u&client_id=c", "query=%ff%fe", "limit=99999999999999999999"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		req := httptest.NewRequest("GET", "/runs", nil)
		req.URL.RawQuery = rawQuery
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		switch w.Code {
		case 200:
			var l harnesskit.RunList
			if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil {
				t.Fatalf("200 without a RunList: %s", w.Body)
			}
			limit := harnesskit.DefaultListLimit
			if v := req.URL.Query().Get("limit"); v != "" {
				limit = harnesskit.MaxListLimit
			}
			if len(l.Runs) > limit || l.Total < len(l.Runs) {
				t.Fatalf("page of %d, total %d: %s", len(l.Runs), l.Total, w.Body)
			}
		case 400:
			if !strings.Contains(w.Body.String(), `"invalid_query"`) {
				t.Fatalf("400 without invalid_query: %s", w.Body)
			}
		default:
			t.Fatalf("GET /runs?%s answered %d: %s", rawQuery, w.Code, w.Body)
		}
	})
}
