package gateway

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadBody: a body is read whole under the limit, whether its length
// is declared or not and whether it is gzipped; past the limit it is 413
// body_too_large, and one shorter than its declared length or not gzip as
// declared is 400.
func TestReadBody(t *testing.T) {
	t.Parallel()
	const max = 64
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"a":1}`))
	_ = zw.Close()
	cases := []struct {
		name     string
		body     io.Reader
		length   int64 // -1: not declared
		encoding string
		capped   bool // the server's MaxBytesReader, as gyre serve sets it
		want     string
		status   int
		code     string
	}{
		{"declared length", strings.NewReader(`{"a":1}`), 7, "", false, `{"a":1}`, 0, ""},
		{"undeclared length", strings.NewReader(`{"a":1}`), -1, "", false, `{"a":1}`, 0, ""},
		{"gzip", bytes.NewReader(gz.Bytes()), int64(gz.Len()), "gzip", false, `{"a":1}`, 0, ""},
		{"declared over the limit", strings.NewReader(strings.Repeat("x", 65)), 65, "", false, "", 413, CodeBodyTooLarge},
		{"undeclared over the limit", strings.NewReader(strings.Repeat("x", 65)), -1, "", false, "", 413, CodeBodyTooLarge},
		{"over the server's cap", strings.NewReader(strings.Repeat("x", 65)), -1, "", true, "", 413, CodeBodyTooLarge},
		{"shorter than declared", strings.NewReader(`{"a"`), 7, "", false, "", 400, CodeInvalidRequest},
		{"not gzip", strings.NewReader(`{"a":1}`), 7, "gzip", false, "", 400, CodeInvalidRequest},
		{"unknown encoding", strings.NewReader(`{"a":1}`), 7, "br", false, "", 415, CodeInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", tc.body)
			r.ContentLength = tc.length
			if tc.encoding != "" {
				r.Header.Set("Content-Encoding", tc.encoding)
			}
			if tc.capped {
				r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, max-4)
			}
			b, e := readBody(r, max)
			switch {
			case tc.status == 0 && (e != nil || string(b) != tc.want):
				t.Errorf("got %q, %+v; want %q", b, e, tc.want)
			case tc.status != 0 && (e == nil || e.Status != tc.status || e.Code != tc.code):
				t.Errorf("got %q, %+v; want %d %s", b, e, tc.status, tc.code)
			}
		})
	}
}
