package harnesskit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/harnesskit"
)

func TestWorkspace(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	agent := harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		if err := run.WriteFile("answer.txt", []byte("42\n")); err != nil {
			return harnesskit.Result{}, err
		}
		if err := run.WriteArtifact("reports/2026/summary.json", []byte(`{"ok":true}`), "application/json"); err != nil {
			return harnesskit.Result{}, err
		}
		root, err := run.Workspace()
		if err != nil {
			return harnesskit.Result{}, err
		}
		// Links are neither listed nor served, inside or out.
		if err := root.Symlink(outside, "escape.txt"); err != nil {
			return harnesskit.Result{}, err
		}
		if err := root.Symlink("answer.txt", "inside-link.txt"); err != nil {
			return harnesskit.Result{}, err
		}
		if err := root.Mkdir("empty-dir", 0o755); err != nil {
			return harnesskit.Result{}, err
		}
		return harnesskit.Result{Answer: "done"}, nil
	})
	k := newKit(t, agent, harnesskit.Options{Artifacts: true})
	id := k.create(`{"input":{"question":"q"}}`)
	st := k.wait(id)
	if st.Status != harnesskit.StatusCompleted {
		t.Fatalf("run = %+v", st)
	}
	if len(st.Artifacts) != 1 || st.Artifacts[0].Name != "reports/2026/summary.json" || *st.Artifacts[0].Path != "reports/2026/summary.json" || *st.Artifacts[0].ContentType != "application/json" {
		t.Errorf("artifacts = %+v", st.Artifacts)
	}

	var list harnesskit.FileList
	k.getJSON("/runs/"+id+"/files", 200, &list)
	var got []string
	for _, f := range list.Files {
		got = append(got, f.Path+":"+itoa(int(f.Size)))
	}
	if diff := cmp.Diff([]string{"answer.txt:3", "reports/2026/summary.json:11"}, got); diff != "" {
		t.Errorf("listing (-want +got):\n%s", diff)
	}
	if ct := list.Files[1].ContentType; ct == nil || *ct != "application/json" {
		t.Errorf("content_type = %v", ct)
	}

	resp, b := k.do("GET", "/runs/"+id+"/files/reports/2026/summary.json", nil, nil)
	if resp.StatusCode != 200 || string(b) != `{"ok":true}` || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("nested file = %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	// An escaped slash names the same nested path.
	resp, b = k.do("GET", "/runs/"+id+"/files/reports%2F2026%2Fsummary.json", nil, nil)
	if resp.StatusCode != 200 || string(b) != `{"ok":true}` {
		t.Errorf("escaped nested file = %d %q", resp.StatusCode, b)
	}
	resp, b = k.do("GET", "/runs/"+id+"/files/answer.txt", nil, http.Header{"Range": {"bytes=0-0"}})
	if resp.StatusCode != 200 || string(b) != "42\n" {
		t.Errorf("range = %d %q", resp.StatusCode, b)
	}

	tests := []struct {
		name, path string
		status     int
		code       string
	}{
		{"missing", "nope.txt", 404, "not_found"},
		{"directory", "reports", 404, "not_found"},
		{"empty directory", "empty-dir", 404, "not_found"},
		{"symlink out", "escape.txt", 404, "not_found"},
		{"symlink in", "inside-link.txt", 404, "not_found"},
		{"dot-dot", "../../capabilities", 400, "invalid_path_param"},
		{"encoded dot-dot", "%2e%2e/secret.txt", 400, "invalid_path_param"},
		{"encoded dot-dot after a name", "reports%2F..%2F..%2Fsecret.txt", 400, "invalid_path_param"},
		{"absolute", "%2Fetc%2Fpasswd", 400, "invalid_path_param"},
		{"double slash", "reports//2026/summary.json", 400, "invalid_path_param"},
		{"backslash", `reports%5C2026`, 400, "invalid_path_param"},
		{"empty", "", 400, "invalid_path_param"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, b := k.do("GET", "/runs/"+id+"/files/"+tt.path, nil, nil)
			if resp.StatusCode != tt.status {
				t.Fatalf("GET files/%s = %d %s (Location %q), want %d", tt.path, resp.StatusCode, b, resp.Header.Get("Location"), tt.status)
			}
			if code, _ := errorCode(t, b); code != tt.code {
				t.Errorf("code %q, want %q", code, tt.code)
			}
		})
	}
}

func TestWorkspace_EmptyAndUnknown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := newKit(t, answer, harnesskit.Options{WorkspaceDir: dir})
	id := k.create(`{"input":{"question":"q"}}`)
	k.wait(id)
	b := k.getJSON("/runs/"+id+"/files", 200, nil)
	if string(b) != "{\"files\":[]}\n" {
		t.Errorf("empty listing = %s", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a run that wrote nothing created %d workspace directories", len(entries))
	}
	k.getJSON("/runs/"+id+"/files/a.txt", 404, nil)
}

func TestWorkspace_RemovedOnClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writer := harnesskit.AgentFunc(func(_ context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		return harnesskit.Result{Answer: "a"}, run.WriteFile("a/b.txt", []byte("x"))
	})
	srv, err := harnesskit.New(writer, harnesskit.Options{Agent: "a", Model: "m", WorkspaceDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest("POST", "/runs", strings.NewReader(`{"input":{"question":"q"}}`)))
	if w.Code != 201 {
		t.Fatalf("POST /runs = %d %s", w.Code, w.Body)
	}
	id := runID(t, w.Body.Bytes())
	if _, err := srv.Wait(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d workspaces, want 1", len(entries))
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%d workspaces left after Close", len(entries))
	}
}
