package blobstore

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestOpenRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name, url string
	}{
		{"unknown scheme", "gs://bucket"},
		{"no scheme", dir},
		{"relative file", "file://./blobs"},
		{"file host", "file://example.com/x"},
		{"file root", "file:///"},
		{"file param", "file://" + dir + "?create_dir=1"},
		{"file bad prefix", "file://" + dir + "?prefix=../up"},
		{"file prefix twice", "file://" + dir + "?prefix=a&prefix=b"},
		{"s3 no bucket", "s3://?endpoint=http://127.0.0.1:1"},
		{"s3 bad bucket", "s3://Bucket_Name?endpoint=http://127.0.0.1:1"},
		{"s3 port in bucket", "s3://bucket:9000?endpoint=http://127.0.0.1:1"},
		{"s3 path", "s3://bucket/some/path?endpoint=http://127.0.0.1:1"},
		{"s3 userinfo", "s3://key:secret@bucket?endpoint=http://127.0.0.1:1"},
		{"s3 unknown param", "s3://bucket?endpoint=http://127.0.0.1:1&ssetype=AES256"},
		{"s3 role", "s3://bucket?endpoint=http://127.0.0.1:1&role=arn:aws:iam::1:role/x"},
		{"s3 endpoint no scheme", "s3://bucket?endpoint=127.0.0.1:9000"},
		{"s3 endpoint ftp", "s3://bucket?endpoint=ftp://127.0.0.1:9000"},
		{"s3 path style not bool", "s3://bucket?endpoint=http://127.0.0.1:1&use_path_style=maybe"},
		{"s3 anonymous not bool", "s3://bucket?endpoint=http://127.0.0.1:1&anonymous=sure"},
		{"s3 checksum mode", "s3://bucket?endpoint=http://127.0.0.1:1&request_checksum_calculation=always"},
		{"s3 bad prefix", "s3://bucket?endpoint=http://127.0.0.1:1&prefix=/abs"},
	}
	for _, tt := range tests {
		if s, err := Open(t.Context(), tt.url, dir); err == nil {
			s.Close()
			t.Errorf("%s: Open(%q) succeeded, want an error", tt.name, tt.url)
		}
	}
	if _, err := Open(t.Context(), "", ""); err == nil {
		t.Errorf("Open with no url and no data dir succeeded")
	}
}

func TestOpenDefaultDir(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "gyre-data")
	s, err := Open(t.Context(), "", data)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	fi, err := os.Stat(filepath.Join(data, "blobs"))
	if err != nil {
		t.Fatalf("default blob dir: %v", err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("default blob dir mode = %v, want a 0700 directory", fi.Mode())
	}
	if _, err := s.Put(t.Context(), "a/b", strings.NewReader("x"), nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(data, "blobs", "a")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("key dir = %v, %v; want mode 0700", fi.Mode(), err)
	}
	if u, _ := s.URL("a/b"); u != "file://"+filepath.ToSlash(data)+"/blobs/a/b" {
		t.Errorf("URL = %q", u)
	}

	// A prefix keeps keys apart in the same directory.
	p, err := Open(t.Context(), "file://"+filepath.ToSlash(data)+"/blobs?prefix=other", "")
	if err != nil {
		t.Fatalf("Open with prefix: %v", err)
	}
	defer p.Close()
	if ok, _ := p.Exists(t.Context(), "a/b"); ok {
		t.Errorf("a prefixed store sees an unprefixed key")
	}
	if _, err := p.Put(t.Context(), "a/b", strings.NewReader("y"), nil); err != nil {
		t.Fatal(err)
	}
	if got := string(get(t, s, "other/a/b")); got != "y" {
		t.Errorf("prefixed object read through the parent = %q", got)
	}
}

// recorder is an HTTP server that counts and remembers the requests it gets.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

func newRecorder(t *testing.T, h http.HandlerFunc) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.reqs = append(r.reqs, req.Clone(req.Context()))
		r.mu.Unlock()
		h(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) requests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.reqs...)
}

// isolateAWS points every AWS credential source away from this machine's
// and sends the instance metadata service to imds.
func isolateAWS(t *testing.T, imds string) {
	for _, k := range []string{
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_EC2_METADATA_DISABLED", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
	} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	t.Setenv("AWS_CONFIG_FILE", missing)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", missing)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds)
}

// TestS3EndpointNeverAsksIMDS is not parallel: it changes the environment.
func TestS3EndpointNeverAsksIMDS(t *testing.T) {
	imds := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) })
	s3srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) })
	isolateAWS(t, imds.URL)

	// With an endpoint and no credentials anywhere, Open fails without
	// asking the metadata service.
	_, err := Open(t.Context(), "s3://gyre-test?use_path_style=true&endpoint="+s3srv.URL, "")
	if err == nil {
		t.Fatal("Open without credentials succeeded")
	}
	if n := len(imds.requests()); n != 0 {
		t.Errorf("with an endpoint, the metadata service got %d requests", n)
	}

	// Control: without an endpoint the SDK does ask it, so the check
	// above can fail. No request leaves the machine: without credentials
	// nothing is sent to S3.
	_, err = Open(t.Context(), "s3://gyre-test?region=us-east-1", "")
	if err == nil {
		t.Fatal("Open without credentials succeeded")
	}
	if n := len(imds.requests()); n == 0 {
		t.Errorf("control: without an endpoint the metadata service got no request; the test proves nothing")
	}
}

// TestS3EndpointAddressing is not parallel: it changes the environment.
func TestS3EndpointAddressing(t *testing.T) {
	imds := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) })
	list := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` +
			`<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` +
			`<Name>gyre-test</Name><KeyCount>0</KeyCount><MaxKeys>1</MaxKeys><IsTruncated>false</IsTruncated>` +
			`</ListBucketResult>`))
	}
	isolateAWS(t, imds.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDGYRETEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")

	srv := newRecorder(t, list)
	s, err := Open(t.Context(), "s3://gyre-test?use_path_style=true&endpoint="+srv.URL, "")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	s.Close()
	reqs := srv.requests()
	if len(reqs) == 0 {
		t.Fatal("the endpoint got no request")
	}
	r := reqs[0]
	if !strings.HasPrefix(r.URL.Path, "/gyre-test") {
		t.Errorf("path-style request path = %q, want /gyre-test…", r.URL.Path)
	}
	if auth := r.Header.Get("Authorization"); !strings.Contains(auth, "Credential=AKIDGYRETEST/") ||
		!strings.Contains(auth, "/us-east-1/s3/") {
		t.Errorf("Authorization = %q, want the env credentials signed for us-east-1", auth)
	}
	if n := len(imds.requests()); n != 0 {
		t.Errorf("the metadata service got %d requests", n)
	}

	// anonymous=true sends unsigned requests.
	anon := newRecorder(t, list)
	s, err = Open(t.Context(), "s3://gyre-test?use_path_style=true&anonymous=true&region=eu-west-1&endpoint="+anon.URL, "")
	if err != nil {
		t.Fatalf("Open anonymous: %v", err)
	}
	s.Close()
	for _, r := range anon.requests() {
		if a := r.Header.Get("Authorization"); a != "" {
			t.Errorf("anonymous request carries Authorization %q", a)
		}
	}
}
