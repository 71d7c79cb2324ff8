package harnesskittest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/harnesskit/harnesskittest"
)

func TestValidator_Response(t *testing.T) {
	t.Parallel()
	v, err := harnesskittest.New()
	if err != nil {
		t.Fatal(err)
	}
	const jsonCT = "application/json"
	tests := []struct {
		name        string
		method, url string
		status      int
		ct          string
		body        string
		wantErr     string // "" = valid
	}{
		{"capabilities", "GET", "/capabilities", 200, jsonCT, `{"agent":"a","accepts":{"stop":true}}`, ""},
		{"capabilities without agent", "GET", "/capabilities", 200, jsonCT, `{"accepts":{}}`, "agent"},
		{"capabilities flag not boolean", "GET", "/capabilities", 200, jsonCT, `{"agent":"a","provides":{"trajectory":"yes"}}`, "trajectory"},
		{"run created", "POST", "/runs", 201, jsonCT, `{"run_id":"r1"}`, ""},
		{"run created with 200", "POST", "/runs", 200, jsonCT, `{"run_id":"r1"}`, "only errors"},
		{"run created without id", "POST", "/runs", 201, jsonCT, `{}`, "run_id"},
		{"status", "GET", "/runs/r1", 200, jsonCT, `{"status":"completed","model":"m","answer":"4"}`, ""},
		{"status without model", "GET", "/runs/r1", 200, jsonCT, `{"status":"running"}`, "model"},
		{"status outside the enum", "GET", "/runs/r1", 200, jsonCT, `{"status":"done","model":"m"}`, "status"},
		{"listing", "GET", "/runs?limit=1", 200, jsonCT, `{"runs":[{"run_id":"r","created_at":"2026-01-02T03:04:05Z"}],"total":3}`, ""},
		{"listing with a bad date-time", "GET", "/runs", 200, jsonCT, `{"runs":[{"run_id":"r","created_at":"yesterday"}],"total":1}`, "date-time"},
		{"listing without total", "GET", "/runs", 200, jsonCT, `{"runs":[]}`, "total"},
		{"files", "GET", "/runs/r1/files", 200, jsonCT, `{"files":[{"path":"a/b.txt","size":3}]}`, ""},
		{"files without size", "GET", "/runs/r1/files", 200, jsonCT, `{"files":[{"path":"a"}]}`, "size"},
		{"nested file", "GET", "/runs/r1/files/a/b.txt", 200, "application/octet-stream", "abc", ""},
		{"trajectory", "GET", "/runs/r1/trajectory", 200, jsonCT, `{"schema_version":"ATIF-v1.7"}`, ""},
		{"trajectory not an object", "GET", "/runs/r1/trajectory", 200, jsonCT, `[]`, "object"},
		{"stop", "POST", "/runs/r1/stop", 200, jsonCT, `{"status":"cancelled","model":"m"}`, ""},
		{"error in the kit's shape", "GET", "/runs/nope", 404, jsonCT, `{"error":{"code":"not_found","message":"no run"}}`, ""},
		{"error in another shape", "GET", "/runs/nope", 404, "text/plain", `404 page not found`, "Content-Type"},
		{"error without a code", "GET", "/runs/nope", 404, jsonCT, `{"message":"x"}`, "not {"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(tt.method, tt.url, nil)
			resp := &http.Response{
				StatusCode: tt.status,
				Header:     http.Header{"Content-Type": {tt.ct}},
				Body:       io.NopCloser(strings.NewReader(tt.body)),
				Request:    req,
			}
			err := v.Response(req, resp)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("valid response refused: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("invalid response accepted")
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not mention %q", err, tt.wantErr)
			}
			if b, _ := io.ReadAll(resp.Body); string(b) != tt.body {
				t.Errorf("body not restored: %q", b)
			}
		})
	}
}
