package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/dataset/build/seed"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
)

// seededStore is a SQLite data directory whose tenant "default" holds n
// seeded training-grade rollouts of seed.Agent, with the store and blob
// store still open for the test.
type seededStore struct {
	data   string
	st     store.Store
	blobs  *blobstore.Store
	tenant gyre.Tenant
}

func newSeededStore(t *testing.T, n int) *seededStore {
	t.Helper()
	ctx := context.Background()
	data := filepath.Join(t.TempDir(), "data")
	st, err := storeopen.Open(ctx, storeopen.Options{DataDir: data, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := blobstore.Open(ctx, "", data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	tn, err := st.CreateTenant(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := seed.Rollouts(ctx, st, blobs, tn.ID, n); err != nil || got != n {
		t.Fatalf("seed: %d %v", got, err)
	}
	return &seededStore{data: data, st: st, blobs: blobs, tenant: tn}
}

// gyreIn runs gyre in this process with stderr going to errw, and checks
// its exit code.
func gyreIn(t *testing.T, wantCode int, errw io.Writer, args ...string) string {
	t.Helper()
	var stdout bytes.Buffer
	var stderr bytes.Buffer
	if errw == nil {
		errw = &stderr
	}
	env := func(string) (string, bool) { return "", false }
	if code := Run(context.Background(), args, nil, &stdout, errw, env); code != wantCode {
		t.Fatalf("gyre %s: exit %d, want %d\nstdout %s\nstderr %s", strings.Join(args, " "), code, wantCode, stdout.String(), stderr.String())
	}
	if errw == &stderr {
		return stdout.String() + stderr.String()
	}
	return stdout.String()
}

// gyre dataset export without --server creates the dataset on the store
// through the API's own path and builds it in-process: PATH is the file a
// server serves for that dataset and the file a server builds for the
// same selection, PATH.manifest.json the server's manifest; list, show
// and download work on the store too. Bad flags are usage errors (exit 2)
// naming the flag, that create nothing and write nothing; piped stderr
// gets no progress bar.
func TestDatasetCommands_OnTheStoreBuildTheServersBytes(t *testing.T) {
	t.Parallel()
	s := newSeededStore(t, 12)
	ctx := context.Background()
	dir := t.TempDir()
	out := filepath.Join(dir, "sft.jsonl")
	var stderr bytes.Buffer
	gyreIn(t, 0, &stderr, "--data", s.data, "dataset", "export", "--agent", seed.Agent, "--format", "sft",
		"--min-reward", "0.5", "--out", out)
	if strings.Contains(stderr.String(), "\x1b[") || strings.Contains(stderr.String(), "/12 rollouts") {
		t.Errorf("piped stderr got a progress bar:\n%q", stderr.String())
	}
	file, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	mraw, err := os.ReadFile(out + ".manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		DatasetID        string `json:"dataset_id"`
		Rows             int    `json:"rows"`
		RolloutsSelected int    `json:"rollouts_selected"`
		FileSHA256       string `json:"file_sha256"`
	}
	if err := json.Unmarshal(mraw, &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(file)
	if m.RolloutsSelected != 12 || m.Rows == 0 || bytes.Count(file, []byte("\n")) != m.Rows || m.FileSHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("manifest %s for a file of %d bytes", mraw, len(file))
	}
	if !strings.Contains(stderr.String(), m.DatasetID+": 12 rollouts selected") {
		t.Errorf("stderr: %s", stderr.String())
	}
	// The build job is done: no server builds it again.
	if _, err := s.st.ClaimJob(ctx, "x", store.JobDatasetBuild, m.DatasetID, time.Minute); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the direct build left its job: %v", err)
	}

	// A server on the same store serves the same file and manifest, and
	// builds the same selection to the same bytes.
	_, key, err := auth.CreateKey(ctx, s.st, s.tenant.ID, auth.KeyRequest{Role: gyre.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{}, api.Deps{Store: s.st, Blobs: s.blobs})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	get := func(path string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	if b := get("/api/v1/datasets/" + m.DatasetID + "/file"); !bytes.Equal(b, file) {
		t.Errorf("the server serves other bytes for the CLI's dataset")
	}
	if b := get("/api/v1/datasets/" + m.DatasetID + "/manifest"); !bytes.Equal(b, mraw) {
		t.Errorf("the server's manifest differs:\n%s\nCLI:\n%s", b, mraw)
	}
	code, body := post(t, ts.URL+"/api/v1/datasets", key, `{"agent_id":"`+seed.Agent+`","format":"sft","min_reward":0.5}`)
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(body), &created); err != nil || code != http.StatusCreated {
		t.Fatalf("POST /api/v1/datasets: %d %s", code, body)
	}
	if n, err := build.New(s.st, s.blobs, nil).RunOnce(ctx, "server", time.Minute); err != nil || n != 1 {
		t.Fatalf("server build: %d %v", n, err)
	}
	if b := get("/api/v1/datasets/" + created.ID + "/file"); !bytes.Equal(b, file) {
		t.Errorf("a server build of the same selection differs from the CLI's file")
	}

	// list, show and download on the store.
	listed := gyreIn(t, 0, nil, "--data", s.data, "dataset", "list")
	if lines := strings.Split(strings.TrimSpace(listed), "\n"); len(lines) != 2 || !strings.Contains(lines[0], created.ID) ||
		!strings.Contains(lines[1], m.DatasetID) || strings.Contains(listed, `"manifest"`) {
		t.Errorf("list: %s", listed)
	}
	shown := gyreIn(t, 0, nil, "--data", s.data, "dataset", "show", m.DatasetID)
	if want := string(get("/api/v1/datasets/" + m.DatasetID)); !strings.HasPrefix(shown, want) {
		t.Errorf("show:\n%s\nthe API:\n%s", shown, want)
	}
	again := filepath.Join(dir, "again.jsonl")
	gyreIn(t, 0, nil, "--data", s.data, "dataset", "download", m.DatasetID, "--out", again)
	if b, err := os.ReadFile(again); err != nil || !bytes.Equal(b, file) {
		t.Errorf("download: %v", err)
	}
	if b, err := os.ReadFile(again + ".manifest.json"); err != nil || !bytes.Equal(b, mraw) {
		t.Errorf("downloaded manifest: %v", err)
	}

	// Bad input: usage errors naming the flag (exit 2), unknown agents
	// and datasets errors (exit 1); nothing is created or written.
	none := filepath.Join(dir, "none.jsonl")
	for _, tc := range []struct {
		code int
		want string
		args []string
	}{
		{2, "--format", []string{"export", "--agent", seed.Agent, "--format", "csv", "--out", none}},
		{2, "--since", []string{"export", "--agent", seed.Agent, "--format", "sft", "--since", "yesterday", "--out", none}},
		{2, "--until", []string{"export", "--agent", seed.Agent, "--format", "sft", "--since", "2031-01-02T00:00:00Z", "--until", "2031-01-01T00:00:00Z", "--out", none}},
		{2, "--min-margin", []string{"export", "--agent", seed.Agent, "--format", "dpo", "--min-margin", "-1", "--out", none}},
		{2, "--batch", []string{"export", "--agent", seed.Agent, "--format", "sft", "--batch", "x", "--out", none}},
		{2, "--agent", []string{"export", "--agent", "bad/agent", "--format", "sft", "--out", none}},
		{2, "--lease", []string{"export", "--agent", seed.Agent, "--format", "sft", "--lease", "0s", "--out", none}},
		{2, "--key-file goes with --server", []string{"export", "--agent", seed.Agent, "--format", "sft", "--key-file", "k", "--out", none}},
		{1, "no agent agent-9", []string{"export", "--agent", "agent-9", "--format", "sft", "--out", none}},
		{1, `no tenant "acme"`, []string{"export", "--tenant", "acme", "--agent", seed.Agent, "--format", "sft", "--out", none}},
		{1, "no dataset", []string{"show", "0192f0c4-0000-7000-8000-000000000001"}},
		{2, "not a dataset id", []string{"download", "x", "--out", none}},
	} {
		var e bytes.Buffer
		gyreIn(t, tc.code, &e, append([]string{"--data", s.data, "dataset"}, tc.args...)...)
		if !strings.Contains(e.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, e.String(), tc.want)
		}
	}
	if _, err := os.Stat(none); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused export left a file: %v", err)
	}
	if ds, _, err := s.st.ListDatasets(ctx, s.tenant.ID, store.Page{}); err != nil || len(ds) != 2 {
		t.Errorf("refused exports created datasets: %d %v", len(ds), err)
	}
	// The flags of one mode are refused in the other.
	var e bytes.Buffer
	gyreIn(t, 2, &e, "dataset", "list", "--server", ts.URL, "--tenant", "default")
	if !strings.Contains(e.String(), "--tenant work on the store directly") {
		t.Errorf("--server with --tenant: %s", e.String())
	}
}

// writeAtomically leaves nothing at the path, and no temporary file, when
// the reader fails half-way: a reader sees the whole file or none.
func TestWriteAtomically_NeverLeavesAHalfFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	r := io.MultiReader(strings.NewReader(`{"row":1}`+"\n"), iotestErrReader{errors.New("connection reset")})
	if err := writeAtomically(path, r); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("writeAtomically of a failing reader: %v", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("left behind: %v %v", entries, err)
	}
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomically(path, iotestErrReader{errors.New("boom")}); err == nil {
		t.Fatal("no error")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "old\n" {
		t.Fatalf("a failed write replaced the old file: %q %v", b, err)
	}
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }
