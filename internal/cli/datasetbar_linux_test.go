package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/dataset/build"
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

// Against a server, gyre dataset export draws the same bar on a terminal,
// moved by the dataset's progress as the server's builder records it, and
// ending at the totals.
func TestDatasetExportProgressBarAgainstAServer(t *testing.T) {
	t.Parallel()
	s := newSeededStore(t, 20)
	_, key, err := auth.CreateKey(context.Background(), s.st, s.tenant.ID, auth.KeyRequest{Role: gyre.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Config{}, api.Deps{Store: s.st, Blobs: s.blobs})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go build.New(s.st, s.blobs, nil).Run(ctx, "server", 20*time.Millisecond, time.Minute)

	ptm, pts := openPTY(t, 120, 40)
	read := make(chan string)
	go func() {
		b, _ := io.ReadAll(ptm)
		read <- string(b)
	}()
	out := filepath.Join(t.TempDir(), "sft.jsonl")
	var stdout bytes.Buffer
	env := func(k string) (string, bool) {
		switch k {
		case "GYRE_SERVER":
			return ts.URL, true
		case "GYRE_KEY":
			return key, true
		}
		return "", false
	}
	code := Run(context.Background(), []string{"dataset", "export", "--agent", seed.Agent, "--format", "sft",
		"--out", out}, nil, &stdout, pts, env)
	pts.Close()
	term := <-read
	if code != 0 {
		t.Fatalf("exit %d, terminal:\n%s", code, term)
	}
	var m struct {
		Rows int `json:"rows"`
	}
	if raw, err := os.ReadFile(out + ".manifest.json"); err != nil || json.Unmarshal(raw, &m) != nil || m.Rows == 0 {
		t.Fatalf("manifest: %s %v", raw, err)
	}
	if want := fmt.Sprintf("20/20 rollouts [======================================]  %d rows", m.Rows); !strings.Contains(term, want) {
		t.Errorf("terminal lacks %q:\n%q", want, term)
	}
}
