package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// buildGyre builds the gyre binary into a temporary directory.
func buildGyre(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build gyre with")
	}
	bin := filepath.Join(t.TempDir(), "gyre")
	out, err := exec.Command(gobin, "build", "-o", bin, "github.com/gyrehq/gyre/cmd/gyre").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// cleanEnv is the process environment without GYRE_* variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GYRE_") {
			env = append(env, kv)
		}
	}
	return env
}

// lockedBuffer collects a subprocess's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// server is a running gyre serve subprocess.
type server struct {
	cmd  *exec.Cmd
	base string
	logs *lockedBuffer
	done chan struct{} // closed when stderr reached EOF
}

// startServe starts gyre serve and waits for its "listening" log line.
func startServe(t *testing.T, bin string, args ...string) *server {
	t.Helper()
	return startServeEnv(t, bin, nil, args...)
}

// startServeEnv is startServe with env (NAME=value) added to the clean
// environment.
func startServeEnv(t *testing.T, bin string, env []string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(cleanEnv(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, logs: &lockedBuffer{}, done: make(chan struct{})}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	addr := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.logs.Write([]byte(line + "\n"))
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" {
				addr <- rec.Addr
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case a := <-addr:
		s.base = "http://" + a
	case <-s.done:
		cmd.Wait()
		t.Fatalf("gyre serve exited before listening (%v):\n%s", cmd.ProcessState, s.logs)
	}
	return s
}

// stop sends SIGTERM and checks that the server exits 0.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-s.done
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("gyre serve after SIGTERM: %v, want exit 0\n%s", err, s.logs)
	}
}

func get(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeEndToEnd runs the real binary on an empty data directory.
func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	bin := buildGyre(t)
	data := filepath.Join(t.TempDir(), "data") // does not exist yet

	s := startServe(t, bin, "--data", data)
	keyFile := filepath.Join(data, "admin.key")
	fi, err := os.Stat(keyFile)
	if err != nil {
		t.Fatalf("admin.key: %v\n%s", err, s.logs)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key has mode %v, want 0600", fi.Mode().Perm())
	}
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(raw))
	if !auth.WellFormed(key) {
		t.Fatalf("admin.key holds %q, not a key", raw)
	}

	if code, body := get(t, s.base+"/healthz", ""); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if code, body := get(t, s.base+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	if code, _ := get(t, s.base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without a key: %d, want 401", code)
	}
	code, body := get(t, s.base+"/metrics", key)
	if code != http.StatusOK || !strings.Contains(body, `gyre_http_requests_total{method="GET",route="/healthz",status="200"} 1`) {
		t.Fatalf("/metrics with the admin key: %d\n%s", code, body)
	}
	if code, body := get(t, s.base+"/api/v1/keys", key); code != http.StatusOK || !strings.Contains(body, `"role":"admin"`) {
		t.Fatalf("/api/v1/keys: %d %s", code, body)
	}
	s.stop(t)
	logs := s.logs.String()
	if strings.Contains(logs, key) {
		t.Fatalf("the admin key is in the log:\n%s", logs)
	}
	if !strings.Contains(logs, keyFile) || !strings.Contains(logs, `"msg":"stopped"`) {
		t.Fatalf("the log lacks the key file's path or the stop:\n%s", logs)
	}

	// A second start keeps the store and never rewrites admin.key.
	s = startServe(t, bin, "--data", data)
	if strings.Contains(s.logs.String(), "created the default tenant") {
		t.Fatalf("second start bootstrapped again:\n%s", s.logs)
	}
	if code, _ := get(t, s.base+"/api/v1/keys", key); code != http.StatusOK {
		t.Fatalf("the first start's key after a restart: %d", code)
	}
	s.stop(t)
	again, err := os.ReadFile(keyFile)
	if err != nil || !bytes.Equal(again, raw) {
		t.Fatalf("admin.key changed on the second start: %q, %v", again, err)
	}
}

func TestServeRefusesWildcardWithoutPublicURL(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), []string{"serve", "--addr", "0.0.0.0:0", "--data", t.TempDir()}, nil, &stdout, &stderr, func(string) (string, bool) { return "", false })
	if code != ExitUsage || !strings.Contains(stderr.String(), "--public-url") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestBootstrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	data := t.TempDir()
	c := Defaults()
	c.Data = data
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: data, Clock: clock.Real{}, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	if err := bootstrap(ctx, st, c, log); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(data, "admin.key")
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	k, err := st.KeyByHash(ctx, auth.Hash(strings.TrimSpace(string(first))))
	if err != nil || k.Role != "admin" {
		t.Fatalf("the written key does not resolve to an admin key: %+v %v", k, err)
	}
	ts, err := st.ListTenants(ctx)
	if err != nil || len(ts) != 1 || ts[0].Name != "default" {
		t.Fatalf("tenants after bootstrap: %+v %v", ts, err)
	}

	// Again, with the file in place: nothing changes.
	if err := bootstrap(ctx, st, c, log); err != nil {
		t.Fatal(err)
	}
	// Again, with the file deleted by a careful operator: nothing is
	// created and no file appears.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := bootstrap(ctx, st, c, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("bootstrap on a non-empty store wrote %s", path)
	}
	if ts, _ := st.ListTenants(ctx); len(ts) != 1 {
		t.Fatalf("tenants: %d, want 1", len(ts))
	}
}

func TestBootstrapRefusesStaleKeyFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	c := Defaults()
	c.Data = data
	path := filepath.Join(data, "admin.key")
	if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: data, Clock: clock.Real{}, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = bootstrap(ctx, st, c, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "exists but the store is empty") {
		t.Fatalf("bootstrap with a stale key file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old\n" {
		t.Fatalf("stale key file was rewritten: %q", b)
	}
	if ts, _ := st.ListTenants(ctx); len(ts) != 0 {
		t.Fatalf("bootstrap created %d tenants despite failing", len(ts))
	}
}

func TestBootstrapKeyFileFlag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := t.TempDir()
	c := Defaults()
	c.Data = data
	c.BootstrapAdminKeyFile = filepath.Join(t.TempDir(), "secret-admin.key")
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: data, Clock: clock.Real{}, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := bootstrap(ctx, st, c, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(c.BootstrapAdminKeyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(data, "admin.key")); !os.IsNotExist(err) {
		t.Fatalf("admin.key written despite --bootstrap-admin-key-file")
	}
}
