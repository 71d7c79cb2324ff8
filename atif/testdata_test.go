package atif_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/atif"
)

// The testdata directory is a verbatim copy of the shared ATIF samples
// (testdata/SOURCES.md says where each file comes from).

func readFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no files in testdata/%s", dir)
	}
	out := make(map[string][]byte, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

func TestValidTestdata(t *testing.T) {
	t.Parallel()
	files := readFiles(t, "valid")
	if len(files) != 22 {
		t.Errorf("testdata/valid holds %d files, want the 22 of SOURCES.md", len(files))
	}
	for name, b := range files {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := atif.Check(b)
			if !r.Valid() {
				t.Fatalf("rejected a valid document:\n%s", joinViolations(r.Violations))
			}
			var head struct {
				SchemaVersion string `json:"schema_version"`
			}
			if err := json.Unmarshal(b, &head); err != nil {
				t.Fatal(err)
			}
			if r.SchemaVersion != head.SchemaVersion || r.Trajectory.SchemaVersion != head.SchemaVersion {
				t.Errorf("SchemaVersion = %q / %q, want %q", r.SchemaVersion, r.Trajectory.SchemaVersion, head.SchemaVersion)
			}
		})
	}
}

// TestInvalidTestdata rejects each invalid sample for the reason SOURCES.md
// gives, and for nothing else. Harbor counts two errors per bad content
// (one per union branch) where gyre reports one.
func TestInvalidTestdata(t *testing.T) {
	t.Parallel()
	contentObj := "must be a string or an array of content parts, got object"
	placeholders := func(prefix string, steps ...int) []string {
		var out []string
		for _, s := range steps {
			p := prefix + "steps." + string(rune('0'+s)) + ".metrics."
			out = append(out,
				p+"cached_tokens: must be an integer, got string",
				p+"cost_usd: must be a number, got string",
				p+"prompt_token_ids: must be an array of integers, got string",
				p+"completion_token_ids: must be an array of integers, got string",
				p+"logprobs: must be an array of numbers, got string",
			)
		}
		return out
	}
	var otelSample []string
	otelSample = append(otelSample, placeholders("subagent_trajectories.0.", 2, 3)...)
	otelSample = append(otelSample, "subagent_trajectories.0.final_metrics.total_cost_usd: must be a number, got string")
	otelSample = append(otelSample, placeholders("subagent_trajectories.1.", 2)...)
	otelSample = append(otelSample, "subagent_trajectories.1.final_metrics.total_cost_usd: must be a number, got string")

	want := map[string]struct {
		version string
		errs    []string
	}{
		// Deliberate negative fixture: step ids 1, 3.
		"daydream-atif-golden-invalid__non-sequential-step-id.json": {"ATIF-v1.6", []string{
			"steps.1.step_id: expected 2 (sequential from 1), got 3",
		}},
		// Observation content is a JSON object in five results.
		"openagents-mechacoder__session-2025-12-05T08-00-23-404Z-ew8gut.atif.json": {"ATIF-v1.4", []string{
			"steps.1.observation.results.0.content: " + contentObj,
			"steps.5.observation.results.0.content: " + contentObj,
			"steps.8.observation.results.0.content: " + contentObj,
			"steps.10.observation.results.0.content: " + contentObj,
			"steps.11.observation.results.0.content: " + contentObj,
		}},
		// agent.version missing at every nesting level.
		"otel-semconv-genai-cross-trace__trajectory.atif.json": {"ATIF-v1.7", []string{
			"agent.version: field required",
			"subagent_trajectories.0.agent.version: field required",
			"subagent_trajectories.1.agent.version: field required",
			"subagent_trajectories.2.agent.version: field required",
			"subagent_trajectories.2.subagent_trajectories.0.agent.version: field required",
		}},
		// Placeholder strings in numeric and array metric fields.
		"otel-semconv-genai-harbor-trajectory__sample-trajectory.atif.json": {"ATIF-v1.7", otelSample},
	}
	files := readFiles(t, "invalid")
	if len(files) != len(want) {
		t.Errorf("testdata/invalid holds %d files, want %d", len(files), len(want))
	}
	for name, b := range files {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w, ok := want[name]
			if !ok {
				t.Fatal("no expectation for this file")
			}
			r := atif.Check(b)
			if r.Valid() {
				t.Fatal("accepted an invalid document")
			}
			if r.Trajectory != nil {
				t.Error("Trajectory set for an invalid document")
			}
			if r.SchemaVersion != w.version {
				t.Errorf("SchemaVersion = %q, want %q", r.SchemaVersion, w.version)
			}
			if diff := cmp.Diff(w.errs, violationStrings(r.Violations)); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRoundTrip decodes each valid sample, encodes it again and checks
// that nothing was lost (null members aside, which ATIF reads as absent)
// and that the result still validates to the same value.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for name, b := range readFiles(t, "valid") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tr, err := atif.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			out, err := json.Marshal(tr)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(dropNulls(decode(t, b)), decode(t, out)); diff != "" {
				t.Errorf("re-encoded document differs (-original +re-encoded):\n%s", diff)
			}
			again, err := atif.Parse(out)
			if err != nil {
				t.Fatalf("re-encoded document is invalid: %v", err)
			}
			if diff := cmp.Diff(tr, again, rawJSON); diff != "" {
				t.Errorf("second decode differs (-first +second):\n%s", diff)
			}
		})
	}
}

// rawJSON compares json.RawMessage values by what they decode to.
var rawJSON = cmp.Transformer("rawJSON", func(raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	return v
})

func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// dropNulls removes null members from ATIF objects, leaving the opaque
// values (extra, arguments, tool definitions) untouched.
func dropNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch {
			case x == nil:
				delete(v, k)
			case k == "extra" || k == "arguments" || k == "tool_definitions":
			default:
				v[k] = dropNulls(x)
			}
		}
	case []any:
		for i, x := range v {
			v[i] = dropNulls(x)
		}
	}
	return v
}

func violationStrings(vs []atif.Violation) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}

func joinViolations(vs []atif.Violation) string {
	return strings.Join(violationStrings(vs), "\n")
}
