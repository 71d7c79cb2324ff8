package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// post sends a JSON body with a key and returns the status and body.
func post(t *testing.T, url, key, body string) (int, string) {
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
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// gyre dataset export creates a dataset on a running gyre serve, waits for
// it and writes PATH and PATH.manifest.json; list, show and download read
// it back; bad flags are usage errors (exit 2) and server refusals errors
// (exit 1) that carry the server's code.
func TestDatasetCommands_AgainstServer(t *testing.T) {
	t.Parallel()
	bin := buildGyre(t)
	dir := t.TempDir()
	s := startServe(t, bin, "--data", filepath.Join(dir, "data"))
	raw, err := os.ReadFile(filepath.Join(dir, "data", "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(raw))
	if code, body := post(t, s.base+"/api/v1/suites", key, `{"name":"s","cases":[{"id":"c0","input":{"q":"x"},"graders":[{"contains":"x"}]}]}`); code != 201 {
		t.Fatalf("suite: %d %s", code, body)
	}
	code, body := post(t, s.base+"/api/v1/tasks", key, `{"suite":"s"}`)
	var tasks struct {
		Items []struct {
			TaskID string `json:"task_id"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &tasks); err != nil || len(tasks.Items) != 1 {
		t.Fatalf("tasks: %d %s", code, body)
	}
	if code, body := post(t, s.base+"/api/v1/batches", key, fmt.Sprintf(`{"agent_id":"agent-1","task_ids":[%q]}`, tasks.Items[0].TaskID)); code != 201 {
		t.Fatalf("batch: %d %s", code, body)
	}

	gyre := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(cleanEnv(), "GYRE_KEY="+key, "GYRE_SERVER="+s.base)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != wantCode {
			t.Fatalf("gyre %v exited %d, want %d\nstdout %s\nstderr %s", args, code, wantCode, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}

	out := filepath.Join(dir, "sft.jsonl")
	gyre(0, "dataset", "export", "--agent", "agent-1", "--format", "sft", "--out", out)
	file, err := os.ReadFile(out)
	if err != nil || len(file) != 0 {
		t.Fatalf("exported file: %q %v, want empty (nothing was submitted)", file, err)
	}
	var m struct {
		DatasetID   string  `json:"dataset_id"`
		Rows        int     `json:"rows"`
		EmptyReason *string `json:"empty_reason"`
		FileSHA256  string  `json:"file_sha256"`
	}
	mraw, err := os.ReadFile(out + ".manifest.json")
	if err != nil || json.Unmarshal(mraw, &m) != nil || m.Rows != 0 || m.EmptyReason == nil || m.DatasetID == "" {
		t.Fatalf("manifest: %s %v", mraw, err)
	}
	listed, _ := gyre(0, "dataset", "list")
	if lines := strings.Split(strings.TrimSpace(listed), "\n"); len(lines) != 1 || !strings.Contains(lines[0], m.DatasetID) {
		t.Fatalf("list: %s", listed)
	}
	// Like every admin command, the dataset commands take the key from
	// GYRE_KEY_FILE when neither --key-file nor GYRE_KEY is given.
	byFile := exec.Command(bin, "dataset", "list")
	byFile.Env = append(cleanEnv(), "GYRE_KEY_FILE="+filepath.Join(dir, "data", "admin.key"), "GYRE_SERVER="+s.base)
	if got, err := byFile.CombinedOutput(); err != nil || !strings.Contains(string(got), m.DatasetID) {
		t.Fatalf("dataset list with GYRE_KEY_FILE: %v\n%s", err, got)
	}
	shown, _ := gyre(0, "dataset", "show", m.DatasetID)
	if !strings.Contains(shown, `"state":"ready"`) || !strings.Contains(shown, m.FileSHA256) {
		t.Fatalf("show: %s", shown)
	}
	again := filepath.Join(dir, "again.jsonl")
	gyre(0, "dataset", "download", m.DatasetID, "--out", again)
	if b, err := os.ReadFile(again + ".manifest.json"); err != nil || !bytes.Equal(b, mraw) {
		t.Fatalf("downloaded manifest differs: %s %v", b, err)
	}

	_, stderr := gyre(2, "dataset", "export", "--agent", "agent-1", "--format", "csv", "--out", out)
	if !strings.Contains(stderr, "--format") {
		t.Errorf("bad format: %s", stderr)
	}
	_, stderr = gyre(1, "dataset", "export", "--agent", "agent-9", "--format", "rl", "--out", filepath.Join(dir, "none.jsonl"))
	if !strings.Contains(stderr, "not_found") {
		t.Errorf("unknown agent: %s", stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused export left a file: %v", err)
	}
}
