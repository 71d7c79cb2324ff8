package harnesskit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gyrehq/gyre/harnesskit"
)

// fileRecorder is an agent that keeps the files each run received.
type fileRecorder struct {
	mu    sync.Mutex
	files map[string][]harnesskit.File
}

func (f *fileRecorder) Run(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.files == nil {
		f.files = map[string][]harnesskit.File{}
	}
	f.files[run.ID()] = run.Files()
	return harnesskit.Result{Answer: "ok"}, nil
}

func (f *fileRecorder) of(id string) []harnesskit.File {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.files[id]
}

// summary renders files as "name(context)=data;…".
func summary(files []harnesskit.File) string {
	var b strings.Builder
	for _, f := range files {
		b.WriteString(f.Name + "(" + f.Context + ")=" + string(f.Data) + ";")
	}
	return b.String()
}

func TestMultipart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		payload     string
		payloadLast bool
		parts       []filePart
		status      int
		code        string
		want        string // summary of the delivered files
	}{
		{
			name:    "parts named files with the fixture as filename (SPEC 7.2)",
			payload: `{"input":{"question":"q"},"files":[{"name":"invoice.pdf","context":"the invoice"},{"name":"notes.txt"}]}`,
			parts: []filePart{
				{form: "files", file: "invoice.pdf", contentType: "application/pdf", data: "%PDF-1"},
				{form: "files", file: "notes.txt", data: "hello"},
			},
			status: 201, want: "invoice.pdf(the invoice)=%PDF-1;notes.txt()=hello;",
		},
		{
			name:    "parts in another order than payload.files",
			payload: `{"input":{"question":"q"},"files":[{"name":"a.txt"},{"name":"b.txt"}]}`,
			parts: []filePart{
				{form: "files", file: "b.txt", data: "B"},
				{form: "files", file: "a.txt", data: "A"},
			},
			status: 201, want: "a.txt()=A;b.txt()=B;",
		},
		{
			name:    "parts named by the fixture key",
			payload: `{"input":{"question":"q"},"files":[{"name":"a.txt","context":"ctx"}]}`,
			parts:   []filePart{{form: "a.txt", data: "A"}},
			status:  201, want: "a.txt(ctx)=A;",
		},
		{
			name:    "form name is the key, filename differs",
			payload: `{"input":{"question":"q"},"files":[{"name":"a.txt"}]}`,
			parts:   []filePart{{form: "a.txt", file: "upload.bin", data: "A"}},
			status:  201, want: "a.txt()=A;",
		},
		{
			name:        "payload after the files",
			payload:     `{"input":{"question":"q"},"files":[{"name":"a.txt"}]}`,
			payloadLast: true,
			parts:       []filePart{{form: "files", file: "a.txt", data: "A"}},
			status:      201, want: "a.txt()=A;",
		},
		{
			name:    "a file part payload.files does not name is delivered after",
			payload: `{"input":{"question":"q"},"files":[{"name":"a.txt"}]}`,
			parts: []filePart{
				{form: "files", file: "extra.txt", data: "E"},
				{form: "files", file: "a.txt", data: "A"},
			},
			status: 201, want: "a.txt()=A;extra.txt()=E;",
		},
		{
			name:    "no files",
			payload: `{"input":{"question":"q"}}`,
			status:  201, want: "",
		},
		{
			name:    "empty file",
			payload: `{"input":{"question":"q"},"files":[{"name":"empty"}]}`,
			parts:   []filePart{{form: "files", file: "empty"}},
			status:  201, want: "empty()=;",
		},
		{
			name:    "missing part",
			payload: `{"input":{"question":"q"},"files":[{"name":"a.txt"},{"name":"b.txt"}]}`,
			parts:   []filePart{{form: "files", file: "a.txt", data: "A"}},
			status:  422, code: "invalid_body",
		},
		{
			name:    "payload with a url",
			payload: `{"input":{"question":"q"},"files":[{"name":"a.txt","url":"https://x.test/a"}]}`,
			parts:   []filePart{{form: "files", file: "a.txt", data: "A"}},
			status:  422, code: "invalid_body",
		},
		{
			name:    "payload not a RunRequest",
			payload: `{"files":[]}`,
			status:  422, code: "invalid_body",
		},
		{
			name:    "input against the schema",
			payload: `{"input":{"question":1}}`,
			status:  422, code: "invalid_input",
		},
		{
			name:    "file over the limit",
			payload: `{"input":{"question":"q"},"files":[{"name":"big"}]}`,
			parts:   []filePart{{form: "files", file: "big", data: strings.Repeat("x", 1025)}},
			status:  413, code: "body_too_large",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &fileRecorder{}
			k := newKit(t, rec, harnesskit.Options{MaxFileBytes: 1024})
			body, ct := multipartBody(t, tt.payload, tt.payloadLast, tt.parts...)
			resp, b := k.do("POST", "/runs", body, http.Header{"Content-Type": {ct}})
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, b, tt.status)
			}
			if tt.status != 201 {
				if code, _ := errorCode(t, b); code != tt.code {
					t.Errorf("code %q (%s), want %q", code, b, tt.code)
				}
				return
			}
			id := runID(t, b)
			if st := k.wait(id); st.Status != harnesskit.StatusCompleted {
				t.Fatalf("run = %+v", st)
			}
			if got := summary(rec.of(id)); got != tt.want {
				t.Errorf("files = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMultipart_Refused(t *testing.T) {
	t.Parallel()
	k := newKit(t, answer, harnesskit.Options{NoFiles: true})
	body, ct := multipartBody(t, `{"input":{"question":"q"}}`, false)
	resp, b := k.do("POST", "/runs", body, http.Header{"Content-Type": {ct}})
	if resp.StatusCode != 415 {
		t.Errorf("multipart without accepts.files = %d %s, want 415", resp.StatusCode, b)
	}
	resp, b = k.do("POST", "/runs", strings.NewReader("x"), http.Header{"Content-Type": {"multipart/form-data"}})
	if resp.StatusCode != 415 {
		t.Errorf("multipart without boundary = %d %s", resp.StatusCode, b)
	}
	k2 := newKit(t, answer, harnesskit.Options{MaxBodyBytes: 2048})
	body, ct = multipartBody(t, `{"input":{"question":"q"},"files":[{"name":"a"}]}`, false, filePart{form: "files", file: "a", data: strings.Repeat("x", 4096)})
	resp, b = k2.do("POST", "/runs", body, http.Header{"Content-Type": {ct}})
	if resp.StatusCode != 413 {
		t.Errorf("multipart over MaxBodyBytes = %d %s, want 413", resp.StatusCode, b)
	}
	body, ct = multipartBody(t, `{"input":{"question":"q"}}`, false)
	noPayload := strings.Replace(readAll(t, body), `name="payload"`, `name="other"`, 1)
	resp, b = k2.do("POST", "/runs", strings.NewReader(noPayload), http.Header{"Content-Type": {ct}})
	if code, _ := errorCode(t, b); resp.StatusCode != 422 || code != "invalid_body" {
		t.Errorf("multipart without payload = %d %s", resp.StatusCode, b)
	}
}

func TestFileURLs(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/fixtures/a.txt", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("alpha"))
	})
	mux.HandleFunc("/fixtures/b.bin", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte{0, 1, 2}) })
	mux.HandleFunc("/fixtures/big", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(strings.Repeat("x", 2000))) })
	mux.HandleFunc("/fixtures/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/fixtures/a.txt", http.StatusFound)
	})
	mux.HandleFunc("/fixtures/to-ftp", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "ftp://example.com/a.txt", http.StatusFound)
	})
	mux.HandleFunc("/fixtures/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/fixtures/loop", http.StatusFound)
	})
	files := httptest.NewServer(mux)
	t.Cleanup(files.Close)

	tests := []struct {
		name   string
		files  string
		status harnesskit.Status
		want   string // file summary, or an error substring
	}{
		{"two files", `[{"name":"a.txt","url":"` + files.URL + `/fixtures/a.txt","context":"first"},{"name":"b.bin","url":"` + files.URL + `/fixtures/b.bin"}]`,
			harnesskit.StatusCompleted, "a.txt(first)=alpha;b.bin()=\x00\x01\x02;"},
		{"same-scheme redirect", `[{"name":"a","url":"` + files.URL + `/fixtures/moved"}]`,
			harnesskit.StatusCompleted, "a()=alpha;"},
		{"not found", `[{"name":"a","url":"` + files.URL + `/fixtures/missing?sig=secret"}]`,
			harnesskit.StatusFailed, `fetch file "a": the url answered 404 Not Found`},
		{"over the size limit", `[{"name":"big","url":"` + files.URL + `/fixtures/big"}]`,
			harnesskit.StatusFailed, "over the limit of 1024 bytes"},
		{"redirect to another scheme", `[{"name":"a","url":"` + files.URL + `/fixtures/to-ftp"}]`,
			harnesskit.StatusFailed, `redirect to scheme "ftp" refused`},
		{"redirect loop", `[{"name":"a","url":"` + files.URL + `/fixtures/loop"}]`,
			harnesskit.StatusFailed, "redirects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &fileRecorder{}
			k := newKit(t, rec, harnesskit.Options{MaxFileBytes: 1024})
			id := k.create(`{"input":{"question":"q"},"files":` + tt.files + `}`)
			st := k.wait(id)
			if st.Status != tt.status {
				t.Fatalf("status = %+v, want %s", st, tt.status)
			}
			if tt.status == harnesskit.StatusCompleted {
				if got := summary(rec.of(id)); got != tt.want {
					t.Errorf("files = %q, want %q", got, tt.want)
				}
				for _, f := range rec.of(id) {
					if !strings.HasPrefix(f.URL, files.URL) {
						t.Errorf("file %s URL = %q", f.Name, f.URL)
					}
				}
				return
			}
			if st.Error == nil || !strings.Contains(*st.Error, tt.want) {
				t.Errorf("error = %v, want it to contain %q", st.Error, tt.want)
			}
			if st.Error != nil && strings.Contains(*st.Error, "secret") {
				t.Errorf("error leaks the url's query: %q", *st.Error)
			}
			if rec.of(id) != nil {
				t.Error("the agent ran although a file could not be fetched")
			}
		})
	}
}

func TestFileURLs_FetchHook(t *testing.T) {
	t.Parallel()
	rec := &fileRecorder{}
	var asked []string
	var mu sync.Mutex
	k := newKit(t, rec, harnesskit.Options{
		FetchFile: func(_ context.Context, url string) (io.ReadCloser, error) {
			mu.Lock()
			asked = append(asked, url)
			mu.Unlock()
			return io.NopCloser(strings.NewReader("from s3")), nil
		},
	})
	id := k.create(`{"input":{"question":"q"},"files":[{"name":"k","url":"s3://bucket/fixtures/abc"}]}`)
	k.wait(id)
	if got := summary(rec.of(id)); got != "k()=from s3;" {
		t.Errorf("files = %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || asked[0] != "s3://bucket/fixtures/abc" {
		t.Errorf("hook asked for %q", asked)
	}
}
