package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/harnesskit"
)

func TestLintCommandAgainstHarness(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	suite := `name: s
cases:
  - id: ok
    input: {question: "hi"}
    graders: [{contains: hi}]
  - id: bad
    input: {prompt: "hi"}
    graders: [{contains: hi}]
  - id: files
    input: {question: "see the file"}
    files: [{name: a.txt}]
    graders: [{contains: hi}]
`
	if err := os.WriteFile(filepath.Join(dir, "s.yaml"), []byte(suite), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "fixtures"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fixtures", "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "s.yaml")

	// Without --agent the suite is fine.
	if code, stdout, stderr := runGyre(t, nil, "lint", path); code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	// Against a harness that takes files: only the bad input.
	url := kitHarness(t, harnesskit.Options{APIKey: "k2"}, nil)
	code, stdout, _ := runGyre(t, map[string]string{"GYRE_HARNESS_KEY": "k2"}, "lint", path, "--agent", url)
	if code != ExitError || !strings.Contains(stdout, ":7: /cases/1/input (case bad): input does not pass the agent's default question schema") || strings.Contains(stdout, "/cases/2/files") {
		t.Fatalf("exit %d:\n%s", code, stdout)
	}
	// Against one that takes no files: the files case too.
	url = kitHarness(t, harnesskit.Options{NoFiles: true, NoFileURLs: true}, nil)
	code, stdout, _ = runGyre(t, nil, "lint", path, "--agent", url)
	if code != ExitError || !strings.Contains(stdout, ":11: /cases/2/files (case files): the agent accepts neither files nor file_urls") {
		t.Fatalf("exit %d:\n%s", code, stdout)
	}
	if !strings.Contains(stdout, "2 errors, 0 warnings") {
		t.Fatalf("summary missing:\n%s", stdout)
	}
}
