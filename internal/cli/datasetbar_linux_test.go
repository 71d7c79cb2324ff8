package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/dataset/build/seed"
)

// gyre dataset export on the store draws a progress bar on stderr when it
// is a terminal: rollouts read of those selected, and rows written, ending
// at the totals; a terminal that reports no width gets no bar (nor does a
// pipe: TestDatasetCommands_OnTheStoreBuildTheServersBytes).
func TestDatasetExportProgressBarOnATerminal(t *testing.T) {
	t.Parallel()
	s := newSeededStore(t, 40)
	for _, tc := range []struct {
		name       string
		cols       uint16
		wantBar    bool
		formatName string
	}{
		{"terminal of 120 columns", 120, true, "sft"},
		{"terminal of 120 columns, dpo by group", 120, true, "dpo"},
		{"terminal of 0 columns", 0, false, "rl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ptm, pts := openPTY(t, tc.cols, 40)
			read := make(chan string)
			go func() {
				b, _ := io.ReadAll(ptm) // ends with EIO once the terminal end is closed
				read <- string(b)
			}()
			out := filepath.Join(t.TempDir(), tc.formatName+".jsonl")
			var stdout bytes.Buffer
			env := func(string) (string, bool) { return "", false }
			code := Run(context.Background(), []string{"--data", s.data, "dataset", "export", "--agent", seed.Agent,
				"--format", tc.formatName, "--min-reward", "0", "--min-margin", "0", "--out", out}, nil, &stdout, pts, env)
			pts.Close()
			term := <-read
			if code != 0 {
				t.Fatalf("exit %d, terminal:\n%s", code, term)
			}
			var m struct {
				Rows int `json:"rows"`
			}
			if raw, err := os.ReadFile(out + ".manifest.json"); err != nil || json.Unmarshal(raw, &m) != nil {
				t.Fatalf("manifest: %s %v", raw, err)
			}
			final := "40/40 rollouts"
			rows := fmt.Sprintf(" %d rows", m.Rows)
			hasBar := strings.Contains(term, final) && strings.Contains(term, rows)
			if hasBar != tc.wantBar {
				t.Errorf("bar drawn: %v, want %v (%q and %q):\n%q", hasBar, tc.wantBar, final, rows, term)
			}
			if !strings.Contains(term, fmt.Sprintf("%d rows written to %s", m.Rows, out)) {
				t.Errorf("no summary line:\n%q", term)
			}
		})
	}
}
