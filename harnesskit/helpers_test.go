package harnesskit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/harnesskit/harnesskittest"
)

// contract is shared by every test: building it parses the OpenAPI
// document once.
var contract = sync.OnceValues(harnesskittest.New)

// kit is a Server under test behind a real listener; every response it
// sends is validated against the contract.
type kit struct {
	t   *testing.T
	srv *harnesskit.Server
	url string
	key string // sent as x-api-key when set
}

// newKit serves agent with opts (Agent and Model defaulted) and closes it
// when the test ends.
func newKit(t *testing.T, agent harnesskit.Agent, opts harnesskit.Options) *kit {
	t.Helper()
	if opts.Agent == "" {
		opts.Agent = "test-agent"
	}
	if opts.Model == "" {
		opts.Model = "default-model"
	}
	if opts.WorkspaceDir == "" {
		opts.WorkspaceDir = t.TempDir()
	}
	srv, err := harnesskit.New(agent, opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return &kit{t: t, srv: srv, url: hs.URL, key: opts.APIKey}
}

// answer is an agent that answers the question upper-cased.
var answer = harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
	return harnesskit.Result{Answer: strings.ToUpper(run.Question())}, nil
})

// do sends a request and returns the response with its body read; the
// response is validated against the contract.
func (k *kit) do(method, path string, body io.Reader, header http.Header) (*http.Response, []byte) {
	k.t.Helper()
	req, err := http.NewRequest(method, k.url+path, body)
	if err != nil {
		k.t.Fatal(err)
	}
	for name, vs := range header {
		req.Header[name] = vs
	}
	if k.key != "" && req.Header.Get("x-api-key") == "" {
		req.Header.Set("x-api-key", k.key)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		k.t.Fatal(err)
	}
	defer resp.Body.Close()
	v, err := contract()
	if err != nil {
		k.t.Fatal(err)
	}
	if err := v.Response(req, resp); err != nil {
		k.t.Errorf("contract: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		k.t.Fatal(err)
	}
	return resp, b
}

// getJSON GETs path, wants status and decodes the body into v.
func (k *kit) getJSON(path string, status int, v any) []byte {
	k.t.Helper()
	resp, b := k.do("GET", path, nil, nil)
	if resp.StatusCode != status {
		k.t.Fatalf("GET %s = %d %s, want %d", path, resp.StatusCode, b, status)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			k.t.Fatalf("GET %s: %v: %s", path, err, b)
		}
	}
	return b
}

// post POSTs a JSON body.
func (k *kit) post(path, body string) (*http.Response, []byte) {
	k.t.Helper()
	return k.do("POST", path, strings.NewReader(body), http.Header{"Content-Type": {"application/json"}})
}

// create POSTs a RunRequest and returns the run id, failing unless 201.
func (k *kit) create(body string) string {
	k.t.Helper()
	resp, b := k.post("/runs", body)
	if resp.StatusCode != http.StatusCreated {
		k.t.Fatalf("POST /runs = %d %s", resp.StatusCode, b)
	}
	var c harnesskit.RunCreated
	if err := json.Unmarshal(b, &c); err != nil || c.RunID == "" {
		k.t.Fatalf("POST /runs body %s: %v", b, err)
	}
	return c.RunID
}

// wait waits for the run to be terminal, then returns its status as GET
// /runs/{id} serves it.
func (k *kit) wait(id string) harnesskit.RunStatus {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := k.srv.Wait(ctx, id); err != nil {
		k.t.Fatalf("wait for %s: %v", id, err)
	}
	var st harnesskit.RunStatus
	k.getJSON("/runs/"+id, 200, &st)
	return st
}

// errorCode returns the code of an error body.
func errorCode(t *testing.T, b []byte) (code, pointer string) {
	t.Helper()
	var e struct {
		Error harnesskit.Error `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("not an error body: %s", b)
	}
	return e.Error.Code, e.Error.Pointer
}

// filePart is one multipart part.
type filePart struct {
	form, file, contentType string
	data                    string
}

// multipartBody builds a multipart/form-data body with a payload part
// (placed first unless payloadLast) and the given parts.
func multipartBody(t *testing.T, payload string, payloadLast bool, parts ...filePart) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	writePayload := func() {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="payload"`)
		h.Set("Content-Type", "application/json")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(w, payload)
	}
	if !payloadLast {
		writePayload()
	}
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		cd := `form-data; name="` + p.form + `"`
		if p.file != "" {
			cd += `; filename="` + p.file + `"`
		}
		h.Set("Content-Disposition", cd)
		if p.contentType != "" {
			h.Set("Content-Type", p.contentType)
		}
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(w, p.data)
	}
	if payloadLast {
		writePayload()
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf, mw.FormDataContentType()
}

// gate is a blocking agent: each run announces itself on started and waits
// for release (or its context).
type gate struct {
	started chan string
	release chan struct{}

	mu           sync.Mutex
	running, max int
	calls        int
}

func newGate() *gate {
	return &gate{started: make(chan string, 100), release: make(chan struct{})}
}

func (g *gate) Run(ctx context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
	g.mu.Lock()
	g.running++
	g.calls++
	g.max = max(g.max, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	g.started <- run.ID()
	select {
	case <-g.release:
		return harnesskit.Result{Answer: "released"}, nil
	case <-ctx.Done():
		return harnesskit.Result{}, ctx.Err()
	}
}

func (g *gate) stats() (maxRunning, calls int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.max, g.calls
}

// runID decodes a RunCreated body.
func runID(t *testing.T, b []byte) string {
	t.Helper()
	var c harnesskit.RunCreated
	if err := json.Unmarshal(b, &c); err != nil || c.RunID == "" {
		t.Fatalf("not a RunCreated: %s", b)
	}
	return c.RunID
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
