package suite

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gyrehq/gyre"
)

const refundsYAML = `# the example of SPEC §7.1
name: refunds
version: "3"
defaults: {repetitions: 3, timeout: 300s, graders: [{max_llm_calls: 20}]}
fixtures: ./fixtures
cases:
  - id: refund-small
    input: {question: "Refund order 1042, it arrived broken."}
    files: [{name: invoice-1042.pdf, context: "the customer's invoice"}]
    graders:
      - contains: "refund"
      - tool_called: {name: issue_refund, args: {order_id: "1042"}}
      - judge: {rubric: "Apologises and confirms the refund amount.", policy: judge, optional: true}
  - id: refund-none
    input:
      question: "Where is my parcel?"
      locale: en-GB
      amount: 12.50
    graders_replace: true
    graders:
      - tool_not_called: issue_refund
    repetitions: 1
    timeout: 90
`

const refundsJSON = `{
  "cases": [
    {
      "id": "refund-small",
      "input": {"question": "Refund order 1042, it arrived broken."},
      "files": [{"context": "the customer's invoice", "name": "invoice-1042.pdf"}],
      "graders": [
        {"contains": "refund"},
        {"tool_called": {"args": {"order_id": "1042"}, "name": "issue_refund"}},
        {"judge": {"policy": "judge", "rubric": "Apologises and confirms the refund amount.", "optional": true}}
      ]
    },
    {
      "id": "refund-none",
      "input": {"amount": 12.5, "locale": "en-GB", "question": "Where is my parcel?"},
      "graders_replace": true,
      "graders": [{"tool_not_called": "issue_refund"}],
      "repetitions": 1,
      "timeout": "1m30s"
    }
  ],
  "defaults": {"graders": [{"max_llm_calls": 20}], "timeout": 300, "repetitions": 3},
  "name": "refunds",
  "version": "3"
}`

var invoiceSHA = strings.Repeat("1f", 32)

func resolver(known map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		s, ok := known[name]
		return s, ok
	}
}

func parseOK(t *testing.T, raw string, f Format, opts Options) *Suite {
	t.Helper()
	s, err := Parse([]byte(raw), f, opts)
	if err != nil {
		t.Fatalf("Parse(%s): %v", f, err)
	}
	return s
}

func TestParse_YAMLAndJSONOfTheSameContentHashTheSame(t *testing.T) {
	t.Parallel()
	opts := Options{ResolveFixture: resolver(map[string]string{"invoice-1042.pdf": invoiceSHA})}
	y := parseOK(t, refundsYAML, FormatYAML, opts)
	j := parseOK(t, refundsJSON, FormatJSON, opts)
	if y.ContentHash != j.ContentHash || string(y.Document) != string(j.Document) {
		t.Errorf("hashes differ:\nyaml %s %s\njson %s %s", y.ContentHash, y.Document, j.ContentHash, j.Document)
	}
	if len(y.ContentHash) != 64 || strings.ToLower(y.ContentHash) != y.ContentHash {
		t.Errorf("hash %q is not lowercase hex SHA-256", y.ContentHash)
	}
	sum := sha256.Sum256(y.Document)
	if hex.EncodeToString(sum[:]) != y.ContentHash {
		t.Error("ContentHash is not the SHA-256 of Document")
	}
	if y.Version != "3" || y.VersionID() != "3" {
		t.Errorf("version %q id %q", y.Version, y.VersionID())
	}
	if !strings.Contains(string(y.Document), `"fixtures":{"invoice-1042.pdf":"`+invoiceSHA+`"}`) {
		t.Errorf("document lacks the fixture digest: %s", y.Document)
	}
}

func TestParse_DecodesFields(t *testing.T) {
	t.Parallel()
	s := parseOK(t, refundsYAML, FormatYAML, Options{ResolveFixture: resolver(map[string]string{"invoice-1042.pdf": invoiceSHA})})
	if s.Name != "refunds" || s.Defaults.Repetitions != 3 || s.Defaults.Timeout != 300*time.Second || len(s.Defaults.Graders) != 1 {
		t.Errorf("suite = %+v", s)
	}
	c0, c1 := s.Cases[0], s.Cases[1]
	if c0.ID != "refund-small" || c0.Pointer != "/cases/0" || string(c0.Input) != `{"question":"Refund order 1042, it arrived broken."}` {
		t.Errorf("case 0 = %+v", c0)
	}
	if len(c0.Files) != 1 || c0.Files[0].Name != "invoice-1042.pdf" || c0.Files[0].Context != "the customer's invoice" || c0.Files[0].SHA256 != invoiceSHA {
		t.Errorf("files = %+v", c0.Files)
	}
	if c1.Repetitions != 1 || c1.Timeout != 90*time.Second || !c1.GradersReplace {
		t.Errorf("case 1 = %+v", c1)
	}
	if string(c1.Input) != `{"amount":12.5,"locale":"en-GB","question":"Where is my parcel?"}` {
		t.Errorf("case 1 input = %s", c1.Input)
	}
	if !slices.Equal(s.FixtureNames(), []string{"invoice-1042.pdf"}) {
		t.Errorf("fixture names = %v", s.FixtureNames())
	}
	if _, ok := s.Case("refund-none"); !ok {
		t.Error("Case(refund-none) not found")
	}
}

func TestCase_GradersExtendDefaultsUnlessReplace(t *testing.T) {
	t.Parallel()
	s := parseOK(t, refundsYAML, FormatYAML, Options{ResolveFixture: resolver(map[string]string{"invoice-1042.pdf": invoiceSHA})})
	names := func(c Case) (out []string) {
		for _, g := range c.Graders {
			out = append(out, g.Name+"@"+g.Pointer)
		}
		return out
	}
	want0 := []string{"max_llm_calls@/defaults/graders/0", "contains@/cases/0/graders/0", "tool_called@/cases/0/graders/1", "judge@/cases/0/graders/2"}
	if got := names(s.Cases[0]); !slices.Equal(got, want0) {
		t.Errorf("case 0 graders = %v, want %v", got, want0)
	}
	if got := names(s.Cases[1]); !slices.Equal(got, []string{"tool_not_called@/cases/1/graders/0"}) {
		t.Errorf("case 1 graders = %v", got)
	}
	cs, err := s.Cases[0].Compile()
	if err != nil || cs.Len() != 4 {
		t.Errorf("Compile = %d graders, %v", cs.Len(), err)
	}
	if !cs.Specs()[3].Optional {
		t.Error("judge lost optional")
	}
}

func TestHash_PinnedDocument(t *testing.T) {
	t.Parallel()
	s := parseOK(t, "name: tiny\ncases:\n  - id: a\n    input: {question: hi}\n    graders: [contains: hi]\n", FormatYAML, Options{})
	wantDoc := `{"cases":[{"graders":[{"contains":"hi"}],"id":"a","input":{"question":"hi"}}],"name":"tiny"}`
	if string(s.Document) != wantDoc {
		t.Errorf("document = %s\nwant       %s", s.Document, wantDoc)
	}
	sum := sha256.Sum256([]byte(wantDoc))
	if s.ContentHash != hex.EncodeToString(sum[:]) || s.VersionID() != s.ContentHash {
		t.Errorf("hash %s, version id %s", s.ContentHash, s.VersionID())
	}
}

func TestHash_NormalizesEquivalentSpellings(t *testing.T) {
	t.Parallel()
	base := parseOK(t, "name: n\ncases: [{id: a, input: {q: 1}}]\n", FormatYAML, Options{})
	for _, doc := range []string{
		"name: n\ncases: [{id: a, input: {q: 1.0}, files: [], graders: [], graders_replace: false}]\n",
		"name: n\ndefaults: {graders: []}\ncases: [{id: a, input: {q: 1e0}}]\n",
		"name: n\nfixtures: ./elsewhere\ncases: [{id: a, input: {q: 1}, graders: null}]\n",
	} {
		if s := parseOK(t, doc, FormatYAML, Options{}); s.ContentHash != base.ContentHash {
			t.Errorf("%q hashes %s, want %s", doc, s.Document, base.Document)
		}
	}
	for _, doc := range []string{
		"name: n\nversion: v2\ncases: [{id: a, input: {q: 1}}]\n",
		"name: n\ncases: [{id: a, input: {q: 2}}]\n",
		"name: n\ncases: [{id: a, input: {q: 1}, repetitions: 2}]\n",
		"name: m\ncases: [{id: a, input: {q: 1}}]\n",
	} {
		if s := parseOK(t, doc, FormatYAML, Options{}); s.ContentHash == base.ContentHash {
			t.Errorf("%q hashes like the base document", doc)
		}
	}
}

func TestHash_IncludesFixtureDigests(t *testing.T) {
	t.Parallel()
	doc := "name: n\ncases: [{id: a, input: {q: 1}, files: [{name: f.txt}]}]\n"
	a := parseOK(t, doc, FormatYAML, Options{ResolveFixture: resolver(map[string]string{"f.txt": strings.Repeat("a", 64)})})
	b := parseOK(t, doc, FormatYAML, Options{ResolveFixture: resolver(map[string]string{"f.txt": strings.Repeat("b", 64)})})
	if a.ContentHash == b.ContentHash {
		t.Error("a different fixture revision gave the same version hash")
	}
}

func TestParse_JSONL(t *testing.T) {
	t.Parallel()
	raw := "{\"id\":\"a\",\"input\":{\"question\":\"one\"},\"graders\":[{\"contains\":\"x\"}]}\n\n" +
		"{\"id\":\"b\",\"input\":{\"question\":\"two\"}}\r\n"
	s := parseOK(t, raw, FormatJSONL, Options{Name: "smoke"})
	if s.Name != "smoke" || len(s.Cases) != 2 || s.Cases[1].ID != "b" || s.Cases[1].Pointer != "/cases/1" {
		t.Errorf("suite = %+v", s)
	}
	same := parseOK(t, `{"name":"smoke","cases":[{"id":"a","input":{"question":"one"},"graders":[{"contains":"x"}]},{"id":"b","input":{"question":"two"}}]}`, FormatJSON, Options{})
	if same.ContentHash != s.ContentHash {
		t.Error("JSONL and JSON of the same content hash differently")
	}
	_, err := Parse([]byte(raw), FormatJSONL, Options{})
	assertErr(t, err, gyre.CodeInvalidBody, "", 0, "name")
	// Errors point at the case and carry its line.
	_, err = Parse([]byte("{\"id\":\"a\",\"input\":{}}\n\n{\"id\":\"b\",\"inptu\":{}}\n"), FormatJSONL, Options{Name: "x"})
	assertErr(t, err, gyre.CodeInvalidBody, "/cases/1/inptu", 3, "unknown key")
	_, err = Parse([]byte("{\"id\":\"a\",\"input\":{}}\n{\"id\":\"b\",\"input\":{\"a\":1,\"a\":2}}\n"), FormatJSONL, Options{Name: "x"})
	assertErr(t, err, gyre.CodeInvalidBody, "/cases/1/input/a", 2, "duplicate")
}

func assertErr(t *testing.T, err error, code, ptr string, line int, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s at %q", code, ptr)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not a *suite.Error", err)
	}
	if e.Code != code || e.Pointer != ptr || (line > 0 && e.Line != line) || !strings.Contains(e.Message, msg) {
		t.Errorf("got %s %q line %d %q; want %s %q line %d containing %q", e.Code, e.Pointer, e.Line, e.Message, code, ptr, line, msg)
	}
	var ge *gyre.Error
	if !errors.As(err, &ge) || ge.Code != code || ge.Pointer != ptr {
		t.Errorf("errors.As(*gyre.Error) = %+v", ge)
	}
}

// caseN is a minimal two-line case.
func caseN(id string) string { return "  - id: " + id + "\n    input: {question: q}\n" }

func TestParse_ErrorsCarryPointersAndLines(t *testing.T) {
	t.Parallel()
	const head = "name: s\ncases:\n"
	okCase := "  - id: a\n    input: {question: q}\n"
	for _, tc := range []struct {
		name   string
		doc    string
		format Format
		opts   Options
		code   string
		ptr    string
		line   int
		msg    string
	}{
		{"unknown top-level key", "name: s\nnaem: t\ncases: []\n", FormatYAML, Options{}, "invalid_body", "/naem", 2, "unknown key"},
		{"missing name", "cases:\n" + okCase, FormatYAML, Options{}, "invalid_body", "", 1, `"name"`},
		{"bad suite name", "name: my suite\ncases:\n" + okCase, FormatYAML, Options{}, "invalid_body", "/name", 1, "must match"},
		{"numeric version", "name: s\nversion: 1.10\ncases:\n" + okCase, FormatYAML, Options{}, "invalid_body", "/version", 2, "quote it"},
		{"missing cases", "name: s\n", FormatYAML, Options{}, "invalid_body", "", 1, `"cases"`},
		{"no cases", "name: s\ncases: []\n", FormatYAML, Options{}, "invalid_body", "/cases", 0, "at least one case"},
		{"cases not a list", "name: s\ncases: {a: 1}\n", FormatYAML, Options{}, "invalid_body", "/cases", 2, "list"},
		{"unknown case key", head + okCase + "  - id: b\n    input: {}\n    grader: []\n", FormatYAML, Options{}, "invalid_body", "/cases/1/grader", 7, "unknown key"},
		{"missing id", head + "  - input: {}\n", FormatYAML, Options{}, "invalid_body", "/cases/0", 3, `"id"`},
		{"bad case id", head + "  - id: a/b\n    input: {}\n", FormatYAML, Options{}, "invalid_body", "/cases/0/id", 3, "must match"},
		{"dot case id", head + "  - id: ..\n    input: {}\n", FormatYAML, Options{}, "invalid_body", "/cases/0/id", 3, "must match"},
		{"duplicate case id", head + okCase + "  - id: b\n    input: {}\n  - id: a\n    input: {}\n", FormatYAML, Options{}, "invalid_body", "/cases/2/id", 7, "duplicate case id"},
		{"missing input", head + "  - id: a\n", FormatYAML, Options{}, "invalid_body", "/cases/0", 3, `"input"`},
		{"input not an object", head + "  - id: a\n    input: hello\n", FormatYAML, Options{}, "invalid_body", "/cases/0/input", 4, "object"},
		{"files not a list", head + okCase + "    files: a.pdf\n", FormatYAML, Options{}, "invalid_body", "/cases/0/files", 5, "list"},
		{"file without name", head + okCase + "    files: [{context: x}]\n", FormatYAML, Options{}, "invalid_body", "/cases/0/files/0", 5, `"name"`},
		{"fixture name with dot-dot", head + okCase + "    files: [{name: ../secret}]\n", FormatYAML, Options{}, "invalid_body", "/cases/0/files/0/name", 5, "no paths"},
		{"absolute fixture name", head + okCase + "    files: [{name: /etc/passwd}]\n", FormatYAML, Options{}, "invalid_body", "/cases/0/files/0/name", 5, "no paths"},
		{"fixture name with slash", head + okCase + "    files: [{name: a/b.pdf}]\n", FormatYAML, Options{}, "invalid_body", "/cases/0/files/0/name", 5, "no paths"},
		{"fixture name dot", head + okCase + "    files: [{name: .}]\n", FormatYAML, Options{}, "invalid_body", "/cases/0/files/0/name", 5, "no paths"},
		{"duplicate file", head + okCase + "    files: [{name: a.pdf}, {name: a.pdf}]\n", FormatYAML, Options{}, "invalid_body", "/cases/0/files/1/name", 5, "already listed"},
		{"unknown file key", head + okCase + "    files: [{name: a.pdf, url: x}]\n", FormatYAML, Options{}, "invalid_body", "/cases/0/files/0/url", 5, "unknown key"},
		{"grader config error", head + okCase + caseN("b") + caseN("c") + caseN("d") +
			"    graders:\n      - contains: x\n      - tool_called: {args: {}}\n", FormatYAML, Options{}, "invalid_body", "/cases/3/graders/1/tool_called", 13, `"name"`},
		{"grader field error", head + okCase + "    graders:\n      - contains: x\n      - tool_called:\n          name: 7\n", FormatYAML, Options{}, "invalid_body", "/cases/0/graders/1/tool_called/name", 8, "string"},
		{"unknown grader", head + okCase + "    graders: [{containz: x}]\n", FormatYAML, Options{}, "invalid_body", "/cases/0/graders/0", 5, "unknown grader"},
		{"graders not a list", head + okCase + "    graders: {contains: x}\n", FormatYAML, Options{}, "invalid_body", "/cases/0/graders", 5, "list"},
		{"defaults grader error", "name: s\ndefaults:\n  graders:\n    - max_llm_calls: -1\ncases:\n" + okCase, FormatYAML, Options{}, "invalid_body", "/defaults/graders/0/max_llm_calls", 4, "non-negative"},
		{"unknown defaults key", "name: s\ndefaults: {retries: 2}\ncases:\n" + okCase, FormatYAML, Options{}, "invalid_body", "/defaults/retries", 2, "unknown key"},
		{"repetitions zero", head + okCase + "    repetitions: 0\n", FormatYAML, Options{}, "invalid_body", "/cases/0/repetitions", 5, "integer"},
		{"repetitions fractional", head + okCase + "    repetitions: 1.5\n", FormatYAML, Options{}, "invalid_body", "/cases/0/repetitions", 5, "integer"},
		{"repetitions string", head + okCase + "    repetitions: \"3\"\n", FormatYAML, Options{}, "invalid_body", "/cases/0/repetitions", 5, "integer"},
		{"timeout text", head + okCase + "    timeout: soon\n", FormatYAML, Options{}, "invalid_body", "/cases/0/timeout", 5, "duration"},
		{"timeout negative", head + okCase + "    timeout: -5\n", FormatYAML, Options{}, "invalid_body", "/cases/0/timeout", 5, "duration"},
		{"timeout too long", "name: s\ndefaults: {timeout: 25h}\ncases:\n" + okCase, FormatYAML, Options{}, "invalid_body", "/defaults/timeout", 2, "at most"},
		{"graders_replace not bool", head + okCase + "    graders_replace: \"yes\"\n", FormatYAML, Options{}, "invalid_body", "/cases/0/graders_replace", 5, "true or false"},
		{"YAML duplicate key", "name: s\nname: t\ncases:\n" + okCase, FormatYAML, Options{}, "invalid_body", "/name", 2, "duplicate key"},
		{"YAML duplicate key in input", head + "  - id: a\n    input: {q: 1, q: 2}\n", FormatYAML, Options{}, "invalid_body", "/cases/0/input/q", 4, "duplicate key"},
		{"YAML syntax", "name: s\ncases: [\n  - id: a\n", FormatYAML, Options{}, "invalid_body", "", 2, "invalid YAML"},
		{"YAML two documents", "name: s\ncases: []\n---\nname: t\n", FormatYAML, Options{}, "invalid_body", "", 0, "one YAML document"},
		{"YAML merge key in case", head + "  - <<: {id: a}\n    input: {}\n", FormatYAML, Options{}, "invalid_body", "/cases/0", 3, "merge keys"},
		{"YAML NaN", head + "  - id: a\n    input: {x: .nan}\n", FormatYAML, Options{}, "invalid_body", "/cases/0/input/x", 4, "not a JSON number"},
		{"YAML custom tag", head + "  - id: a\n    input: {x: !env HOME}\n", FormatYAML, Options{}, "invalid_body", "/cases/0/input/x", 4, "tag"},
		{"empty document", "", FormatYAML, Options{}, "invalid_body", "", 0, "empty"},
		{"JSON duplicate key", "{\"name\":\"s\",\n\"cases\":[{\"id\":\"a\",\n\"input\":{},\"id\":\"b\"}]}", FormatJSON, Options{}, "invalid_body", "/cases/0/id", 3, "duplicate"},
		{"JSON syntax", "{\"name\":\"s\",\n\"cases\":[}", FormatJSON, Options{}, "invalid_body", "/cases/0", 2, "invalid JSON"},
		{"JSON unknown key", "{\"name\":\"s\",\n \"cases\":[{\"id\":\"a\",\"input\":{}}],\n \"extra\":1}", FormatJSON, Options{}, "invalid_body", "/extra", 3, "unknown key"},
		{"JSON not an object", "[1]", FormatJSON, Options{}, "invalid_body", "", 1, "object"},
		{"fixture missing", head + okCase + caseN("b") + caseN("c") + "    files: [{name: known.pdf}, {name: gone.pdf}]\n", FormatYAML,
			Options{ResolveFixture: resolver(map[string]string{"known.pdf": invoiceSHA})}, "fixture_missing", "/cases/2/files/1/name", 9, "gone.pdf"},
		{"fixture missing without resolver", head + okCase + "    files: [{name: a.pdf}]\n", FormatYAML, Options{}, "fixture_missing", "/cases/0/files/0/name", 5, "a.pdf"},
		{"command not allowed", head + okCase + "    graders: [{command: {run: [rm, -rf, /]}}]\n", FormatYAML,
			Options{AllowCommand: func(argv []string) bool { return argv[0] == "python3" }}, "grader_not_allowed", "/cases/0/graders/0/command", 5, "rm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.doc), tc.format, tc.opts)
			assertErr(t, err, tc.code, tc.ptr, tc.line, tc.msg)
		})
	}
}

func TestParse_CommandAllowedWhenPolicyAllows(t *testing.T) {
	t.Parallel()
	doc := "name: s\ncases: [{id: a, input: {}, graders: [{command: {run: [python3, check.py]}}]}]\n"
	if _, err := Parse([]byte(doc), FormatYAML, Options{}); err != nil {
		t.Errorf("no policy: %v", err)
	}
	if _, err := Parse([]byte(doc), FormatYAML, Options{AllowCommand: func(a []string) bool { return a[0] == "python3" }}); err != nil {
		t.Errorf("allowed: %v", err)
	}
}

func TestParse_YAMLScalarsBecomeJSON(t *testing.T) {
	t.Parallel()
	s := parseOK(t, "name: s\ncases: [{id: a, input: {d: 2024-01-01, y: yes, n: ~, o: 0o17, h: 0x1F, f: 1.50, e: 1e3, b: !!binary aGk=, q: \"1\"}}]\n", FormatYAML, Options{})
	want := `{"b":"aGk=","d":"2024-01-01","e":1000,"f":1.5,"h":31,"n":null,"o":15,"q":"1","y":"yes"}`
	if got := string(s.Cases[0].Input); got != want {
		t.Errorf("input = %s, want %s", got, want)
	}
}

func TestParse_YAMLAliasBombIsBounded(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 9; i++ {
		prev := "*a" + string(rune('0'+i-1))
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [" + strings.Repeat(prev+", ", 9) + prev + "]\n")
	}
	_, err := Parse([]byte(b.String()), FormatYAML, Options{})
	if err == nil {
		t.Fatal("alias bomb parsed")
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v", err)
	}
}

func TestParse_YAMLAliasesExpand(t *testing.T) {
	t.Parallel()
	doc := "name: s\ndefaults: {graders: &g [{contains: ok}]}\ncases:\n  - id: a\n    input: {}\n    graders_replace: true\n    graders: *g\n"
	s := parseOK(t, doc, FormatYAML, Options{})
	if len(s.Cases[0].Graders) != 1 || s.Cases[0].Graders[0].Name != "contains" || s.Cases[0].Graders[0].Pointer != "/cases/0/graders/0" {
		t.Errorf("graders = %+v", s.Cases[0].Graders)
	}
}

func TestTaskInput_Rules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"question":"Refund order 1042"}`, "Refund order 1042"},
		{`{ "question" : "  spaced  " }`, "  spaced  "},
		{`{"question":""}`, ""},
		{`{"question":"q","locale":"en"}`, `{"locale":"en","question":"q"}`},
		{`{"question":42}`, `{"question":42}`},
		{`{"question":null}`, `{"question":null}`},
		{`{"question":["a"]}`, `{"question":["a"]}`},
		{`{"prompt":"hi"}`, `{"prompt":"hi"}`},
		{`{}`, `{}`},
		{`{"b":1.0,"a":{"z":"é","y":1e2}}`, `{"a":{"y":100,"z":"é"},"b":1}`},
	} {
		got, err := TaskInput([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("TaskInput(%s) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := TaskInput([]byte(`{"a":1,"a":2}`)); err == nil {
		t.Error("duplicate keys accepted")
	}
}

func TestCase_TurnInputRefusesFiles(t *testing.T) {
	t.Parallel()
	s := parseOK(t, refundsYAML, FormatYAML, Options{ResolveFixture: resolver(map[string]string{"invoice-1042.pdf": invoiceSHA})})
	_, err := s.Cases[0].TurnInput()
	assertErr(t, err, gyre.CodeFilesUnsupported, "/cases/0/files", 0, "file channel")
	if in, err := s.Cases[1].TurnInput(); err != nil || in != `{"amount":12.5,"locale":"en-GB","question":"Where is my parcel?"}` {
		t.Errorf("TurnInput = %q, %v", in, err)
	}
}

func TestFormatFromContentType(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]Format{
		"application/json":                FormatJSON,
		"application/json; charset=utf-8": FormatJSON,
		"application/yaml":                FormatYAML,
		"application/x-yaml":              FormatYAML,
		"text/yaml":                       FormatYAML,
		"application/x-ndjson":            FormatJSONL,
		"application/jsonl":               FormatJSONL,
	} {
		if got, err := FormatFromContentType(ct); err != nil || got != want {
			t.Errorf("%s: %s, %v", ct, got, err)
		}
	}
	for _, ct := range []string{"text/plain", "", "application/xml"} {
		if _, err := FormatFromContentType(ct); err == nil {
			t.Errorf("%q accepted", ct)
		}
	}
}

// ---- files on disk ----

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestLoad_FileReadsFixturesThroughRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "refunds.yaml"), refundsYAML)
	write(t, filepath.Join(dir, "fixtures", "invoice-1042.pdf"), "%PDF-1.4 invoice")
	s, err := Load(filepath.Join(dir, "refunds.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Cases[0].Files[0].SHA256 != sha("%PDF-1.4 invoice") || s.FixturesDir != filepath.Join(dir, "fixtures") {
		t.Errorf("fixture = %+v dir %s", s.Cases[0].Files[0], s.FixturesDir)
	}
	// The same content uploaded with the same fixture revision hashes the same.
	up := parseOK(t, refundsYAML, FormatYAML, Options{ResolveFixture: resolver(map[string]string{"invoice-1042.pdf": sha("%PDF-1.4 invoice")})})
	if up.ContentHash != s.ContentHash {
		t.Error("loaded and uploaded suites hash differently")
	}
	// Changing the fixture's bytes changes the version.
	write(t, filepath.Join(dir, "fixtures", "invoice-1042.pdf"), "%PDF-1.4 invoice v2")
	s2, err := Load(filepath.Join(dir, "refunds.yaml"), Options{})
	if err != nil || s2.ContentHash == s.ContentHash {
		t.Errorf("fixture change: %v, same hash %v", err, s2 != nil && s2.ContentHash == s.ContentHash)
	}
}

func TestLoad_FixtureEscapesAreRejected(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outside := filepath.Join(dir, "secret.txt")
	write(t, outside, "top secret")
	fix := filepath.Join(dir, "suite", "fixtures")
	write(t, filepath.Join(fix, "real.txt"), "real")
	if err := os.Symlink(outside, filepath.Join(fix, "out-abs.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../secret.txt", filepath.Join(fix, "out-rel.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.txt", filepath.Join(fix, "in.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(fix, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	load := func(name string) (*Suite, error) {
		p := filepath.Join(dir, "suite", "s.yaml")
		write(t, p, "name: s\ncases:\n  - id: a\n    input: {}\n    files:\n      - name: "+name+"\n")
		return Load(p, Options{})
	}
	for _, tc := range []struct {
		name, file, code, msg string
	}{
		{"absolute symlink out", "out-abs.txt", "invalid_body", "escapes"},
		{"relative symlink out", "out-rel.txt", "invalid_body", "escapes"},
		{"dot-dot path", "../secret.txt", "invalid_body", "no paths"},
		{"absolute path", "/etc/passwd", "invalid_body", "no paths"},
		{"quoted dot-dot", "\"..\"", "invalid_body", "no paths"},
		{"directory", "subdir", "invalid_body", "regular file"},
		{"missing", "nope.txt", "fixture_missing", "nope.txt"},
	} {
		_, err := load(tc.file)
		if err == nil {
			t.Errorf("%s: loaded", tc.name)
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Pointer != "/cases/0/files/0/name" || e.Line != 6 || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: %v (%+v)", tc.name, err, e)
		}
		if strings.Contains(err.Error(), "top secret") {
			t.Errorf("%s: error leaks file content", tc.name)
		}
	}
	s, err := load("in.txt")
	if err != nil || s.Fixtures["in.txt"] != sha("real") {
		t.Errorf("symlink inside the root: %v", err)
	}
}

func TestLoad_FixturesKeyIsRelativeToSuiteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "shared", "f.txt"), "shared")
	p := filepath.Join(dir, "suites", "s.yaml")
	write(t, p, "name: s\nfixtures: ../shared\ncases: [{id: a, input: {}, files: [{name: f.txt}]}]\n")
	s, err := Load(p, Options{})
	if err != nil || s.Fixtures["f.txt"] != sha("shared") {
		t.Fatalf("Load: %v", err)
	}
	write(t, p, "name: s\nfixtures: ./nowhere\ncases: [{id: a, input: {}, files: [{name: f.txt}]}]\n")
	_, err = Load(p, Options{})
	assertErr(t, err, gyre.CodeFixtureMissing, "/cases/0/files/0/name", 3, "fixtures directory")
}

func TestLoad_JSONLNamedAfterFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "smoke-tests.jsonl")
	write(t, p, "{\"id\":\"a\",\"input\":{\"question\":\"hi\"},\"files\":[{\"name\":\"f.txt\"}]}\n{\"id\":\"b\",\"input\":{\"question\":\"yo\"}}\n")
	write(t, filepath.Join(dir, "fixtures", "f.txt"), "data")
	s, err := Load(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "smoke-tests" || len(s.Cases) != 2 || s.Fixtures["f.txt"] != sha("data") || s.Defaults.Repetitions != 0 {
		t.Errorf("suite = %+v", s)
	}
	write(t, p, "{\"id\":\"a\",\"input\":{}}\n{\"id\":\"a\",\"input\":{}}\n")
	_, err = Load(p, Options{})
	assertErr(t, err, gyre.CodeInvalidBody, "/cases/1/id", 2, "duplicate case id")
	var e *Error
	if errors.As(err, &e) && e.File != p {
		t.Errorf("file = %q", e.File)
	}
}

func TestLoad_DirectoryOfCaseFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "suite.yaml"), "name: refunds\nversion: \"3\"\ndefaults: {repetitions: 3, timeout: 300s, graders: [{max_llm_calls: 20}]}\n")
	write(t, filepath.Join(dir, "cases", "01-small.yaml"), "id: refund-small\ninput: {question: \"Refund order 1042, it arrived broken.\"}\n"+
		"files: [{name: invoice-1042.pdf, context: \"the customer's invoice\"}]\ngraders:\n  - contains: \"refund\"\n"+
		"  - tool_called: {name: issue_refund, args: {order_id: \"1042\"}}\n"+
		"  - judge: {rubric: \"Apologises and confirms the refund amount.\", policy: judge, optional: true}\n")
	write(t, filepath.Join(dir, "cases", "02-none.json"), `{"id":"refund-none","input":{"question":"Where is my parcel?","locale":"en-GB","amount":12.50},
		"graders_replace":true,"graders":[{"tool_not_called":"issue_refund"}],"repetitions":1,"timeout":90}`)
	write(t, filepath.Join(dir, "cases", "README.md"), "ignored")
	write(t, filepath.Join(dir, "cases", ".hidden.yaml"), "ignored: true")
	write(t, filepath.Join(dir, "fixtures", "invoice-1042.pdf"), "%PDF-1.4 invoice")
	s, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Cases) != 2 || s.Cases[0].ID != "refund-small" || s.Cases[1].ID != "refund-none" {
		t.Fatalf("cases = %+v", s.Cases)
	}
	// Same content as the single-file form: same version hash.
	single := filepath.Join(dir, "single.yaml")
	write(t, single, refundsYAML)
	one, err := Load(single, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if one.ContentHash != s.ContentHash {
		t.Errorf("directory form hashes differently:\n%s\n%s", s.Document, one.Document)
	}
	// Errors in a case file name that file and line, and point into the
	// combined document.
	write(t, filepath.Join(dir, "cases", "03-bad.yaml"), "id: bad\ninput: {}\ngraders:\n  - tool_outcome: {name: x, want: maybe}\n")
	_, err = Load(dir, Options{})
	assertErr(t, err, gyre.CodeInvalidBody, "/cases/2/graders/0/tool_outcome/want", 4, "ok or failed")
	var e *Error
	if errors.As(err, &e) && e.File != filepath.Join(dir, "cases", "03-bad.yaml") {
		t.Errorf("file = %q", e.File)
	}
	write(t, filepath.Join(dir, "cases", "03-bad.yaml"), "id: bad\ninput: {a: 1, a: 2}\n")
	_, err = Load(dir, Options{})
	assertErr(t, err, gyre.CodeInvalidBody, "/cases/2/input/a", 2, "duplicate key")
	write(t, filepath.Join(dir, "cases", "03-bad.yaml"), "id: refund-small\ninput: {}\n")
	_, err = Load(dir, Options{})
	assertErr(t, err, gyre.CodeInvalidBody, "/cases/2/id", 1, "duplicate case id")
}

func TestLoad_DirectoryNeedsOneSuiteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Load(dir, Options{}); err == nil {
		t.Error("empty directory loaded")
	}
	write(t, filepath.Join(dir, "suite.yaml"), "name: s\n")
	_, err := Load(dir, Options{})
	assertErr(t, err, gyre.CodeInvalidBody, "/cases", 0, "at least one case")
	write(t, filepath.Join(dir, "suite.json"), `{"name":"s"}`)
	if _, err := Load(dir, Options{}); err == nil || !strings.Contains(err.Error(), "already defines") {
		t.Errorf("two suite files: %v", err)
	}
}

func TestError_MessageAndGyreError(t *testing.T) {
	t.Parallel()
	e := &Error{Code: gyre.CodeFixtureMissing, Pointer: "/cases/2/files/0/name", File: "s.yaml", Line: 9, Message: "fixture \"x\" has no revision"}
	if got := e.Error(); got != `s.yaml:9: /cases/2/files/0/name: fixture "x" has no revision` {
		t.Errorf("Error() = %s", got)
	}
	var ge *gyre.Error
	if !errors.As(error(e), &ge) || ge.Status() != 422 || ge.Pointer != e.Pointer || !strings.Contains(ge.Message, "line 9") {
		t.Errorf("gyre error = %+v", ge)
	}
}

func FuzzParseSuite(f *testing.F) {
	f.Add([]byte(refundsYAML), uint8(0))
	f.Add([]byte(refundsJSON), uint8(1))
	f.Add([]byte("{\"id\":\"a\",\"input\":{}}\n{\"id\":\"b\",\"input\":{\"question\":\"q\"},\"files\":[{\"name\":\"f\"}]}\n"), uint8(2))
	f.Add([]byte("a: &a [*a]\n"), uint8(0))
	f.Add([]byte("name: s\ncases: [{id: a, input: {x: !!binary aGk=}, graders: [{regex: '(?=x)'}]}]\n"), uint8(0))
	f.Add([]byte("name: s\ncases:\n  - <<: {id: a}\n"), uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, kind uint8) {
		format := []Format{FormatYAML, FormatJSON, FormatJSONL}[int(kind)%3]
		opts := Options{Name: "fuzz", ResolveFixture: func(name string) (string, bool) { return strings.Repeat("0", 64), name != "missing" }}
		s, err := Parse(raw, format, opts)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error is not a *suite.Error: %v", err)
			}
			if e.Code == "" || (e.Pointer != "" && e.Pointer[0] != '/') {
				t.Fatalf("bad error location: %+v", e)
			}
			return
		}
		if len(s.ContentHash) != 64 || len(s.Cases) == 0 {
			t.Fatalf("suite without hash or cases: %+v", s)
		}
		again, err := Parse(s.Document, FormatJSON, Options{ResolveFixture: opts.ResolveFixture})
		_ = again
		_ = err // the hashed document is not itself a suite file (fixtures map); it must not panic
		for _, c := range s.Cases {
			if _, err := c.Compile(); err != nil {
				t.Fatalf("case %s graders do not compile: %v", c.ID, err)
			}
			if _, err := c.TurnInput(); err != nil && len(c.Files) == 0 {
				t.Fatalf("case %s turn input: %v", c.ID, err)
			}
			var in map[string]any
			if err := json.Unmarshal(c.Input, &in); err != nil {
				t.Fatalf("case %s input is not an object: %v", c.ID, err)
			}
		}
	})
}
