package harnesscheck_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/harnesscheck"
)

// writeFiles writes name → content under a new temp dir and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const goodSuite = `name: refunds
cases:
  - id: small
    input: {question: "Refund order 1042"}
    files: [{name: invoice.txt, context: "the invoice"}]
    graders:
      - contains: refund
  - id: where
    input:
      question: "Where is my parcel?"
    graders: [{icontains: parcel}]
`

func TestLint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
		path  string // default suite.yaml
		// agent changes the fake harness; nil: no --agent.
		agent func(f *fake)
		want  []string // substrings of problems, "ERROR …" or "WARN …", in order
		fail  bool
	}{
		{
			name:  "good suite",
			files: map[string]string{"suite.yaml": goodSuite, "fixtures/invoice.txt": "inv"},
		},
		{
			name:  "good suite against a harness",
			files: map[string]string{"suite.yaml": goodSuite, "fixtures/invoice.txt": "inv"},
			agent: func(*fake) {},
		},
		{
			name: "duplicate case ids",
			files: map[string]string{"suite.yaml": `name: s
cases:
  - id: a
    input: {question: one}
  - id: a
    input: {question: two}
`},
			want: []string{`ERROR SUITE:5: /cases/1/id: duplicate case id "a" (first at /cases/0)`},
			fail: true,
		},
		{
			name: "bad grader config",
			files: map[string]string{"suite.yaml": `name: s
cases:
  - id: a
    input: {question: one}
    graders:
      - tool_called: {nme: refund}
`},
			want: []string{"ERROR SUITE:6: /cases/0/graders/0/tool_called"},
			fail: true,
		},
		{
			name: "unknown grader",
			files: map[string]string{"suite.yaml": `name: s
cases:
  - id: a
    input: {question: one}
    graders: [{smells_good: true}]
`},
			want: []string{"ERROR SUITE:5: /cases/0/graders/0"},
			fail: true,
		},
		{
			name:  "missing fixture",
			files: map[string]string{"suite.yaml": goodSuite, "fixtures/other.txt": "x"},
			want:  []string{`ERROR SUITE:5: /cases/0/files/0/name: fixture "invoice.txt" is not in`},
			fail:  true,
		},
		{
			name: "fixture name with a path",
			files: map[string]string{"suite.yaml": `name: s
cases:
  - id: a
    input: {question: one}
    files: [{name: ../secret.txt}]
`},
			want: []string{"ERROR SUITE:5: /cases/0/files/0/name: fixture name"},
			fail: true,
		},
		{
			name:  "syntax error",
			files: map[string]string{"suite.yaml": "name: s\ncases: [\n"},
			want:  []string{"ERROR SUITE"},
			fail:  true,
		},
		{
			name: "warnings only",
			files: map[string]string{"suite.yaml": `name: s
cases:
  - id: a
    input: {question: one}
  - id: b
    input: {question: two}
    graders: [{judge: {rubric: "polite", policy: judge, optional: true}}]
`, "fixtures/unused.txt": "x"},
			want: []string{
				"WARN SUITE:3: /cases/0 (case a): no graders",
				"WARN SUITE:7: /cases/1/graders (case b): every grader is optional",
				`fixtures/unused.txt: fixture "unused.txt" is not used by any case`,
			},
		},
		{
			name: "input violates the harness schema",
			files: map[string]string{"suite.yaml": `name: s
cases:
  - id: ok
    input: {order_id: "1042"}
    graders: [{contains: x}]
  - id: bad
    input:
      order_id: 1042
    graders: [{contains: x}]
`},
			agent: func(f *fake) {
				f.caps["input_schema"] = map[string]any{"type": "object", "required": []any{"order_id"}, "properties": map[string]any{"order_id": map[string]any{"type": "string"}}}
			},
			want: []string{"ERROR SUITE:7: /cases/1/input (case bad): input does not pass the agent's input_schema: at /order_id"},
			fail: true,
		},
		{
			name: "input against the default question schema",
			files: map[string]string{"suite.yaml": `name: s
cases:
  - id: a
    input: {prompt: "hi"}
    graders: [{contains: x}]
`},
			agent: func(f *fake) { delete(f.caps, "input_schema") },
			want:  []string{"ERROR SUITE:4: /cases/0/input (case a): input does not pass the agent's default question schema"},
			fail:  true,
		},
		{
			name:  "files against a harness without file delivery",
			files: map[string]string{"suite.yaml": goodSuite, "fixtures/invoice.txt": "inv"},
			agent: func(f *fake) { f.caps["accepts"] = map[string]any{"stop": true} },
			want:  []string{"ERROR SUITE:5: /cases/0/files (case small): the agent accepts neither files nor file_urls"},
			fail:  true,
		},
		{
			name:  "files against a harness with file_urls only",
			files: map[string]string{"suite.yaml": goodSuite, "fixtures/invoice.txt": "inv"},
			agent: func(f *fake) { f.caps["accepts"] = map[string]any{"file_urls": true} },
		},
		{
			name:  "harness with an external schema reference",
			files: map[string]string{"suite.yaml": goodSuite, "fixtures/invoice.txt": "inv"},
			agent: func(f *fake) { f.caps["input_schema"] = map[string]any{"$ref": "https://example.com/schema.json"} },
			want:  []string{"ERROR agent"},
			fail:  true,
		},
		{
			name:  "harness speaking v2",
			files: map[string]string{"suite.yaml": goodSuite, "fixtures/invoice.txt": "inv"},
			agent: func(f *fake) { f.caps["contract_version"] = "v2" },
			want:  []string{`ERROR agent http://`},
			fail:  true,
		},
		{
			name: "jsonl suite",
			files: map[string]string{"cases.jsonl": `{"id":"a","input":{"question":"q"},"graders":[{"contains":"x"}]}

{"id":"b","input":{"question":7},"graders":[{"contains":"x"}]}
`},
			path:  "cases.jsonl",
			agent: func(*fake) {},
			want:  []string{"ERROR SUITE:3: /cases/1/input (case b): input does not pass"},
			fail:  true,
		},
		{
			name: "directory suite",
			files: map[string]string{
				"suite.yaml":    "name: dir\ncases:\n  - id: a\n    input: {question: q}\n    graders: [{contains: x}]\n",
				"cases/02.yaml": "id: c\ninput:\n  question: [1]\ngraders: [{contains: x}]\n",
				"cases/01.json": `{"id": "b", "input": {"question": "q"}, "graders": [{"contains": "x"}]}`,
			},
			path:  ".",
			agent: func(*fake) {},
			want:  []string{"cases/02.yaml:2: /cases/2/input (case c): input does not pass"},
			fail:  true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeFiles(t, tc.files)
			path := tc.path
			if path == "" {
				path = "suite.yaml"
			}
			cfg := harnesscheck.LintConfig{Path: filepath.Join(dir, path)}
			if tc.agent != nil {
				_, cfg.AgentURL = newFake(t, tc.agent)
			}
			rep := harnesscheck.Lint(t.Context(), cfg)
			var got []string
			for _, p := range rep.Problems {
				got = append(got, strings.ReplaceAll(p.String(), cfg.Path, "SUITE"))
			}
			if rep.Failed() != tc.fail {
				t.Fatalf("Failed() = %v, want %v; problems:\n%s", rep.Failed(), tc.fail, strings.Join(got, "\n"))
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
			if rep.Errors+rep.Warnings != len(rep.Problems) {
				t.Errorf("errors %d + warnings %d != %d problems", rep.Errors, rep.Warnings, len(rep.Problems))
			}
		})
	}
}

func TestLintMissingSuite(t *testing.T) {
	t.Parallel()
	rep := harnesscheck.Lint(t.Context(), harnesscheck.LintConfig{Path: filepath.Join(t.TempDir(), "nope.yaml")})
	if !rep.Failed() || len(rep.Problems) != 1 {
		t.Fatalf("problems = %+v, want one error", rep.Problems)
	}
}
