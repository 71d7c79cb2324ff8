package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func postJSON(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// gyre serve encrypts a registered harness's key with GYRE_SECRET_KEY:
// the database file never holds it, the harness receives it, the log
// shows the key id and never the key; started without GYRE_SECRET_KEY,
// the same store refuses new keys (422) and cannot call the harness (503).
func TestServeEncryptsHarnessKeysWithSecretKey(t *testing.T) {
	t.Parallel()
	const (
		secretKey  = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
		harnessKey = "hk-serve-test-7f3a9c"
	)
	var (
		mu   sync.Mutex
		seen []string
	)
	h := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("x-api-key"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"runs":[{"run_id":"r1","title":"hello"}],"total":1}`))
	}))
	defer h.Close()
	bin := buildGyre(t)
	data := filepath.Join(t.TempDir(), "data")
	s := startServeEnv(t, bin, []string{"GYRE_SECRET_KEY=" + secretKey}, "--data", data, "--harness-allow-private")
	raw, err := os.ReadFile(filepath.Join(data, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(raw))
	code, body := postJSON(t, s.base+"/api/v1/harnesses", admin, `{"name":"h","base_url":"`+h.URL+`","api_key":"`+harnessKey+`"}`)
	if code != http.StatusCreated || strings.Contains(body, harnessKey) {
		t.Fatalf("register: %d %s", code, body)
	}
	id := body[strings.Index(body, `"id":"`)+6:]
	id = id[:strings.IndexByte(id, '"')]
	if code, body := get(t, s.base+"/api/v1/harnesses/"+id+"/runs", admin); code != http.StatusOK || !strings.Contains(body, `"title":"hello"`) {
		t.Fatalf("runs: %d %s", code, body)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != harnessKey {
		t.Fatalf("the harness received x-api-key %q", seen)
	}
	mu.Unlock()
	s.stop(t)
	logs := s.logs.String()
	if strings.Contains(logs, secretKey) || strings.Contains(logs, harnessKey) || !strings.Contains(logs, `"key_id":"v1:`) {
		t.Fatalf("log shows a secret or lacks the key id:\n%s", logs)
	}
	files, _ := filepath.Glob(filepath.Join(data, "gyre.db*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(harnessKey)) {
			t.Fatalf("%s holds the harness key in clear", f)
		}
	}

	s = startServe(t, bin, "--data", data, "--harness-allow-private")
	if code, body := get(t, s.base+"/api/v1/harnesses/"+id+"/runs", admin); code != http.StatusServiceUnavailable || !strings.Contains(body, "harness_key_unavailable") {
		t.Fatalf("runs without GYRE_SECRET_KEY: %d %s", code, body)
	}
	if code, body := postJSON(t, s.base+"/api/v1/harnesses", admin, `{"name":"h2","base_url":"`+h.URL+`","api_key":"k"}`); code != http.StatusUnprocessableEntity || !strings.Contains(body, "secret_key_unset") {
		t.Fatalf("register with a key without GYRE_SECRET_KEY: %d %s", code, body)
	}
	s.stop(t)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("the harness was called %d times, want once", len(seen))
	}
}
