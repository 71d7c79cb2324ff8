package harnesscheck

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gyrehq/gyre/harnesskit"
)

// fixtureName is the name of the fixture the fixtures check delivers.
const fixtureName = "gyre-check.txt"

// fixtureContext is the context the fixture carries.
const fixtureContext = "A small text file sent by gyre harness check to test fixture delivery."

// fixtureServer serves the check's fixture at one unguessable path from an
// ephemeral listener, and counts the complete fetches.
type fixtureServer struct {
	srv     *http.Server
	url     string
	path    string
	content []byte
	fetched atomic.Int64
}

// startFixtureServer listens on addr and serves the fixture; publicURL,
// when set, is the base URL the harness reaches the listener at.
func startFixtureServer(addr, publicURL string, log *slog.Logger) (*fixtureServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fixture listener: %w", err)
	}
	token := rand.Text()
	fs := &fixtureServer{
		path:    "/gyre-check/" + token + "/" + fixtureName,
		content: []byte("gyre harness check fixture " + token + "\n"),
	}
	base := strings.TrimRight(publicURL, "/")
	if base == "" {
		base = "http://" + ln.Addr().String()
	}
	fs.url = base + fs.path
	fs.srv = &http.Server{
		Handler:           http.HandlerFunc(fs.serve),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	go func() { _ = fs.srv.Serve(ln) }()
	return fs, nil
}

func (fs *fixtureServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != fs.path || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if r.Method == http.MethodHead {
		return
	}
	if n, err := w.Write(fs.content); err == nil && n == len(fs.content) {
		fs.fetched.Add(1)
	}
}

func (fs *fixtureServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = fs.srv.Shutdown(ctx)
}

// checkFixtures delivers a fixture the way accepts declares: by URL when
// accepts.file_urls (the harness must fetch it), as a multipart part when
// accepts.files; both when both are declared.
func (k *checker) checkFixtures(ctx context.Context) {
	acc := k.accepts()
	if !acc.Files && !acc.FileURLs {
		k.set(CheckFixtures, Skip, "the harness accepts neither files nor file_urls: cases with files cannot run on it")
		return
	}
	if k.input == nil {
		k.set(CheckFixtures, Skip, "no run input: %s", k.noInput)
		return
	}
	if k.main == nil {
		k.set(CheckFixtures, Skip, "no run could be created (see the run check)")
		return
	}
	if k.main.final == nil {
		k.set(CheckFixtures, Skip, "the run check's run did not finish, so a run with a fixture would not either")
		return
	}
	type outcome struct {
		res    Result
		detail string
	}
	var outs []outcome
	if acc.FileURLs {
		res, detail := k.fixtureByURL(ctx)
		outs = append(outs, outcome{res, "file_urls: " + detail})
	}
	if acc.Files && ctx.Err() == nil {
		res, detail := k.fixtureMultipart(ctx)
		outs = append(outs, outcome{res, "multipart: " + detail})
	}
	worst := Pass
	var details []string
	for _, o := range outs {
		if o.res == Fail || (o.res == Warn && worst == Pass) {
			worst = o.res
		}
		details = append(details, o.detail)
	}
	k.set(CheckFixtures, worst, "%s", strings.Join(details, "; "))
}

// fixtureByURL runs check_input with the fixture as a URL and checks that
// the harness fetched it.
func (k *checker) fixtureByURL(ctx context.Context) (Result, string) {
	if k.fx == nil {
		fx, err := startFixtureServer(k.cfg.FixtureAddr, k.cfg.PublicURL, k.log)
		if err != nil {
			return Fail, err.Error()
		}
		k.fx = fx
	}
	body, err := k.runRequest("fixtures-url", []harnesskit.FileRef{{Name: fixtureName, URL: new(k.fx.url), Context: new(fixtureContext)}})
	if err != nil {
		return Fail, fmt.Sprintf("encode the run request: %v", err)
	}
	r, warning, err := k.create(ctx, "fixtures-url", body, "application/json")
	if err != nil {
		return Fail, err.Error()
	}
	st, err := k.wait(ctx, r)
	fetched := k.fx.fetched.Load() > 0
	switch {
	case err != nil && !fetched:
		return Fail, fmt.Sprintf("%v; the fixture at %s was never fetched", err, k.fx.url)
	case err != nil:
		return Fail, fmt.Sprintf("the harness fetched the fixture, but %v", err)
	case !fetched:
		return Fail, fmt.Sprintf("run %s ended %s without fetching %s: is that address reachable from the harness? (--fixture-addr, --public-url)", r.id, st.Status, k.fx.url)
	case st.Status != harnesskit.StatusCompleted:
		return Warn, fmt.Sprintf("the harness fetched the fixture, but run %s ended %s", r.id, describeEnd(st))
	case warning != "":
		return Warn, fmt.Sprintf("%s; run %s fetched the fixture and completed", warning, r.id)
	}
	return Pass, fmt.Sprintf("run %s fetched the fixture from %s and completed", r.id, k.fx.url)
}

// fixtureMultipart runs check_input with the fixture as a multipart part:
// a payload part (application/json) and one part named "files" whose
// filename is the fixture name (SPEC §7.2).
func (k *checker) fixtureMultipart(ctx context.Context) (Result, string) {
	payload, err := k.runRequest("fixtures-multipart", []harnesskit.FileRef{{Name: fixtureName, Context: new(fixtureContext)}})
	if err != nil {
		return Fail, fmt.Sprintf("encode the run request: %v", err)
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	ph := textproto.MIMEHeader{}
	ph.Set("Content-Disposition", `form-data; name="payload"`)
	ph.Set("Content-Type", "application/json")
	fh := textproto.MIMEHeader{}
	fh.Set("Content-Disposition", `form-data; name="files"; filename="`+fixtureName+`"`)
	fh.Set("Content-Type", "text/plain; charset=utf-8")
	if err := writeParts(mw, []textproto.MIMEHeader{ph, fh}, [][]byte{payload, []byte("gyre harness check fixture\n")}); err != nil {
		return Fail, fmt.Sprintf("encode the multipart body: %v", err)
	}
	r, warning, err := k.create(ctx, "fixtures-multipart", buf.Bytes(), mw.FormDataContentType())
	if err != nil {
		return Fail, err.Error()
	}
	st, err := k.wait(ctx, r)
	switch {
	case err != nil:
		return Fail, err.Error()
	case st.Status != harnesskit.StatusCompleted:
		return Warn, fmt.Sprintf("the harness took the upload, but run %s ended %s", r.id, describeEnd(st))
	case warning != "":
		return Warn, fmt.Sprintf("%s; run %s took the upload and completed", warning, r.id)
	}
	return Pass, fmt.Sprintf("run %s took a payload part and a file part and completed", r.id)
}

// writeParts writes one part per header with its body and closes mw.
func writeParts(mw *multipart.Writer, headers []textproto.MIMEHeader, bodies [][]byte) error {
	if len(headers) != len(bodies) {
		return errors.New("one body per part")
	}
	for i, h := range headers {
		w, err := mw.CreatePart(h)
		if err != nil {
			return err
		}
		if _, err := w.Write(bodies[i]); err != nil {
			return err
		}
	}
	return mw.Close()
}
