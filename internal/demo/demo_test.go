package demo_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gyrehq/gyre/examples/harness/desk"
	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/demo"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/suite"
)

// suiteHash pins the content hash of the embedded suite (version "1").
// When the suite changes, bump its version in suite/suite.yaml and update
// this hash, so experiments of different suites never share a version.
const suiteHash = "5cbf755ff7f131052e6a957dbede1325af84915928c90e09ab4d796637054a54"

// The embedded suite loads, is the one its version says, runs on the desk
// (inputs match its schema, fixtures exist) and holds its expected
// failures.
func TestWriteSuite(t *testing.T) {
	t.Parallel()
	dir, err := demo.WriteSuite(filepath.Join(t.TempDir(), "data", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := suite.Load(dir, suite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != demo.SuiteName || s.Version != "1" {
		t.Errorf("suite %s@%s", s.Name, s.Version)
	}
	if s.ContentHash != suiteHash {
		t.Errorf("the demo suite changed (content hash %s): bump its version and update suiteHash", s.ContentHash)
	}
	if n := len(s.Cases); n < 6 || n > 10 {
		t.Errorf("%d cases, want 6 to 10", n)
	}
	schema, err := eval.CompileInputSchema(json.RawMessage(desk.InputSchema))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	files := 0
	for _, c := range s.Cases {
		ids = append(ids, c.ID)
		files += len(c.Files)
		if err := schema.Check(c.Input); err != nil {
			t.Errorf("case %s: input does not match the desk's input schema: %v", c.ID, err)
		}
	}
	if files == 0 {
		t.Error("no case hands the desk a fixture file")
	}
	for _, id := range demo.ExpectedFailures {
		if !slices.Contains(ids, id) {
			t.Errorf("expected failure %q is not a case", id)
		}
	}

	// Written again, the files are replaced and equal the embedded ones.
	if err := os.WriteFile(filepath.Join(dir, "suite.yaml"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := demo.WriteSuite(dir); err != nil {
		t.Fatal(err)
	}
	err = fs.WalkDir(demo.Suite(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		want, _ := fs.ReadFile(demo.Suite(), p)
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return err
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from the embedded file", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name()[0] == '.' {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// A file in the way of the suite directory is an error.
func TestWriteSuite_Error(t *testing.T) {
	t.Parallel()
	blocker := filepath.Join(t.TempDir(), "demo")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := demo.WriteSuite(blocker); err == nil {
		t.Fatal("WriteSuite over a file succeeded")
	}
}

// The harness serves the offline desk on loopback and stops on Close.
func TestStartHarness(t *testing.T) {
	t.Parallel()
	h, err := demo.StartHarness(nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(h.URL + "/capabilities")
	if err != nil {
		t.Fatal(err)
	}
	var caps harnesskit.Capabilities
	err = json.NewDecoder(resp.Body).Decode(&caps)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if caps.Agent != desk.Agent || caps.Accepts.ModelOverride || string(caps.CheckInput) != desk.CheckInput {
		t.Errorf("capabilities = %+v", caps)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(h.URL + "/capabilities"); err == nil {
		resp.Body.Close()
		t.Error("the harness still answers after Close")
	}
}
