package eval

import (
	"bytes"
	"context"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"testing"
)

func fixtureOf(name, body string, size int64) Fixture {
	return Fixture{Name: name, Size: size, Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(body)), nil
	}}
}

// wantMultipart is the form multipart.Writer writes with boundary.
func wantMultipart(t *testing.T, boundary string, payload []byte, files map[string]string, order []string) []byte {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if err := mw.SetBoundary(boundary); err != nil {
		t.Fatal(err)
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="payload"`)
	h.Set("Content-Type", "application/json")
	w, _ := mw.CreatePart(h)
	w.Write(payload)
	for _, name := range order {
		fh := textproto.MIMEHeader{}
		fh.Set("Content-Disposition", `form-data; name="files"; filename="`+name+`"`)
		fh.Set("Content-Type", "application/octet-stream")
		w, _ := mw.CreatePart(fh)
		io.WriteString(w, files[name])
	}
	mw.Close()
	return buf.Bytes()
}

// TestMultipartBodyLength checks the rule that a multipart run request
// declares its exact length up front and streams exactly those bytes; a
// fixture whose size no longer matches is an error, not a short or long
// body.
func TestMultipartBodyLength(t *testing.T) {
	t.Parallel()
	payload := []byte(`{"input":{"question":"q"},"files":[{"name":"a.txt"},{"name":"empty"},{"name":"b.bin"}]}`)
	files := map[string]string{"a.txt": "alpha", "empty": "", "b.bin": strings.Repeat("\x00\xff", 40<<10)}
	order := []string{"a.txt", "empty", "b.bin"}
	tests := []struct {
		name    string
		sizes   []int64
		wantErr string
	}{
		{"sizes as stored", []int64{5, 0, 80 << 10}, ""},
		{"a fixture grew", []int64{4, 0, 80 << 10}, "fixture a.txt changed since the suite was loaded"},
		{"a fixture shrank", []int64{5, 0, 80<<10 + 1}, "fixture b.bin changed since the suite was loaded"},
	}
	for _, tt := range tests {
		var fx []Fixture
		for i, name := range order {
			fx = append(fx, fixtureOf(name, files[name], tt.sizes[i]))
		}
		b, err := newMultipartBody(t.Context(), payload, fx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(b)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: read error %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		_, params, _ := mime.ParseMediaType(b.contentType)
		want := wantMultipart(t, params["boundary"], payload, files, order)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: body differs from the multipart form (%d bytes, want %d)", tt.name, len(got), len(want))
		}
		if b.size != int64(len(want)) {
			t.Errorf("%s: declared size %d, want %d", tt.name, b.size, len(want))
		}
	}
}

// refuseChunked stands in for servers that cannot read a chunked request
// body (Python's http.server, several WSGI setups): they see no body and
// drop the connection. Other requests go to next; the body of POST /runs
// is kept in bodies.
type refuseChunked struct {
	next   http.Handler
	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
}

func (s *refuseChunked) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/runs" {
		if r.ContentLength < 0 || slices.Contains(r.TransferEncoding, "chunked") {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil || int64(len(b)) != r.ContentLength {
			http.Error(w, "short body", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.bodies = append(s.bodies, b)
		s.heads = append(s.heads, r.Header.Clone())
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	s.next.ServeHTTP(w, r)
}

func TestMultipartSendsContentLength(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot","accepts":{"files":true}}`)
	srv := httptest.NewServer(&refuseChunked{next: h})
	defer srv.Close()
	rc := srv.Config.Handler.(*refuseChunked)
	s := writeSuite(t, filesSuite, fixtureFiles)
	e := newEnv(t, h, s)
	c, err := NewClient(srv.URL, "", nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(Config{Criteria: DefaultCriteria()}, Deps{Client: c, Recorder: e.rec, Fixtures: e.fixtures})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if run := e.onlyRun(t, res); run.Classification != "passed" {
		t.Fatalf("run = %+v, want passed", run)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.bodies) != 1 {
		t.Fatalf("%d multipart bodies received, want 1", len(rc.bodies))
	}
	// The bytes are exactly the multipart form of the payload and the
	// fixtures, in payload order.
	_, params, _ := mime.ParseMediaType(rc.heads[0].Get("Content-Type"))
	mr := multipart.NewReader(bytes.NewReader(rc.bodies[0]), params["boundary"])
	p, err := mr.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := io.ReadAll(p)
	want := wantMultipart(t, params["boundary"], payload, fixtureFiles, []string{"invoice.pdf", "notes.txt"})
	if !bytes.Equal(rc.bodies[0], want) {
		t.Errorf("body:\n%q\nwant:\n%q", rc.bodies[0], want)
	}
}

// TestMultipartDroppedConnectionSaysWhatHappened checks that a harness
// that drops the connection instead of answering a multipart request
// fails the run with a message that says so, not a bare "EOF".
func TestMultipartDroppedConnectionSaysWhatHappened(t *testing.T) {
	t.Parallel()
	h := newFakeHarness(t, `{"agent":"bot","accepts":{"files":true}}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/runs" {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	s := writeSuite(t, filesSuite, fixtureFiles)
	e := newEnv(t, h, s)
	c, err := NewClient(srv.URL, "", nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(Config{Criteria: DefaultCriteria()}, Deps{Client: c, Recorder: e.rec, Fixtures: e.fixtures})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	run := e.onlyRun(t, res)
	if run.Classification != "error" || !strings.Contains(run.Error, "the harness closed the connection without answering the multipart request (Content-Length ") {
		t.Errorf("run = %s: %q, want an error saying the harness dropped the multipart request", run.Classification, run.Error)
	}
}
