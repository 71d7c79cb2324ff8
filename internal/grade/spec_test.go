package grade

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gyrehq/gyre"
)

// minimalDecl is a valid declaration for every grader SPEC §8 names.
var minimalDecl = map[string]string{
	"exact":           `{"exact":"42"}`,
	"contains":        `{"contains":"refund"}`,
	"icontains":       `{"icontains":"Refund"}`,
	"not_contains":    `{"not_contains":"sorry"}`,
	"regex":           `{"regex":"^\\d+$"}`,
	"json_schema":     `{"json_schema":{"schema":{"type":"object"}}}`,
	"equals_json":     `{"equals_json":{"value":{"a":1}}}`,
	"tool_called":     `{"tool_called":"issue_refund"}`,
	"tool_not_called": `{"tool_not_called":"delete_account"}`,
	"tool_sequence":   `{"tool_sequence":["lookup","refund"]}`,
	"tool_outcome":    `{"tool_outcome":{"name":"refund","want":"ok"}}`,
	"all_tools_ok":    `{"all_tools_ok":true}`,
	"entity_written":  `{"entity_written":{"tool":"create_ticket","key":"id"}}`,
	"max_steps":       `{"max_steps":10}`,
	"max_llm_calls":   `{"max_llm_calls":5}`,
	"max_tokens":      `{"max_tokens":10000}`,
	"max_cost_usd":    `{"max_cost_usd":0.25}`,
	"artifact":        `{"artifact":"report.md"}`,
	"judge":           `{"judge":{"rubric":"Apologises.","policy":"judge","optional":true}}`,
	"command":         `{"command":{"run":["./check.sh","--strict"],"timeout":"30s"}}`,
}

func TestParseSpecs_RecognisesEverySpecGrader(t *testing.T) {
	t.Parallel()
	spec := []string{"exact", "contains", "icontains", "not_contains", "regex", "json_schema", "equals_json",
		"tool_called", "tool_not_called", "tool_sequence", "tool_outcome", "all_tools_ok", "entity_written",
		"max_steps", "max_llm_calls", "max_tokens", "max_cost_usd", "artifact", "judge", "command"}
	if got := Names(); strings.Join(got, ",") != strings.Join(sortedCopy(spec), ",") {
		t.Errorf("Names() = %v, want %v", got, sortedCopy(spec))
	}
	for _, name := range spec {
		decl, ok := minimalDecl[name]
		if !ok {
			t.Fatalf("no declaration for %s", name)
		}
		specs, err := ParseSpecs([]byte("[" + decl + "]"))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if specs[0].Name != name || specs[0].Version() == "" {
			t.Errorf("%s: parsed as %q version %q", name, specs[0].Name, specs[0].Version())
		}
	}
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c
}

func TestParseSpecs_CommonFields(t *testing.T) {
	t.Parallel()
	specs, err := ParseSpecs([]byte(`[
		{"contains":"refund"},
		{"contains":{"value":"sorry","optional":true,"weight":2.5,"label":"apology"}},
		{"all_tools_ok":null},
		{"all_tools_ok":{"optional":true}}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	if s := specs[0]; s.Label != "contains" || s.Optional || s.Weight != 1 || s.Pointer != "/0" {
		t.Errorf("spec 0 = %+v", s)
	}
	if s := specs[1]; s.Label != "apology" || !s.Optional || s.Weight != 2.5 || s.Pointer != "/1" {
		t.Errorf("spec 1 = %+v", s)
	}
	if !specs[3].Optional {
		t.Errorf("spec 3 not optional")
	}
}

func TestParseSpecs_ErrorsCarryPointers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, ptr, msg string
	}{
		{"not a list", `{"contains":"x"}`, "", "list"},
		{"not an object", `["contains"]`, "/0", "exactly one key"},
		{"two keys", `[{"contains":"a","exact":"b"}]`, "/0", "exactly one key"},
		{"no key", `[{}]`, "/0", "exactly one key"},
		{"unknown grader", `[{"contains":"a"},{"containz":"b"}]`, "/1", "unknown grader"},
		{"missing tool name", `[{"exact":"a"},{"exact":"b"},{"tool_called":{"args":{}}}]`, "/2/tool_called", `missing required field "name"`},
		{"tool name wrong type", `[{"exact":"a"},{"exact":"b"},{"tool_called":{"name":7}}]`, "/2/tool_called/name", "string"},
		{"unknown field", `[{"tool_called":{"name":"x","maxx":1}}]`, "/0/tool_called/maxx", "unknown field"},
		{"unknown field in document order", `[{"contains":{"value":"x","zz":1,"aa":2}}]`, "/0/contains/zz", "unknown field"},
		{"bad regex", `[{"regex":{"value":"(unclosed"}}]`, "/0/regex/value", "compile"},
		{"bad regex shorthand", `[{"regex":"(unclosed"}]`, "/0/regex", "compile"},
		{"shorthand wrong type", `[{"contains":3}]`, "/0/contains", "string"},
		{"null config", `[{"contains":null}]`, "/0/contains", "required"},
		{"weight zero", `[{"contains":{"value":"x","weight":0}}]`, "/0/contains/weight", "greater than 0"},
		{"weight string", `[{"contains":{"value":"x","weight":"2"}}]`, "/0/contains/weight", "number"},
		{"optional not bool", `[{"contains":{"value":"x","optional":"yes"}}]`, "/0/contains/optional", "true or false"},
		{"empty label", `[{"contains":{"value":"x","label":""}}]`, "/0/contains/label", "empty"},
		{"bad pointer", `[{"contains":{"value":"x","pointer":"summary"}}]`, "/0/contains/pointer", "start with /"},
		{"max below min", `[{"tool_called":{"name":"x","min":2,"max":1}}]`, "/0/tool_called/max", "at least min"},
		{"max negative", `[{"max_llm_calls":-1}]`, "/0/max_llm_calls", "non-negative integer"},
		{"max fractional", `[{"max_steps":{"max":1.5}}]`, "/0/max_steps/max", "non-negative integer"},
		{"bad source", `[{"tool_called":{"name":"x","source":"gateway"}}]`, "/0/tool_called/source", "executed or emitted"},
		{"outcome want", `[{"tool_outcome":{"name":"x","want":"unknown"}}]`, "/0/tool_outcome/want", "ok or failed"},
		{"entity key", `[{"entity_written":{"tool":"x","key":"email"}}]`, "/0/entity_written/key", "one of"},
		{"empty sequence", `[{"tool_sequence":[]}]`, "/0/tool_sequence", "empty"},
		{"artifact two checks", `[{"artifact":{"name":"a","sha256":"x","contains":"y"}}]`, "/0/artifact/contains", "one check"},
		{"artifact bad digest", `[{"artifact":{"name":"a","sha256":"ABC"}}]`, "/0/artifact/sha256", "hex"},
		{"schema external ref", `[{"json_schema":{"schema":{"$ref":"https://example.com/s.json"}}}]`, "/0/json_schema/schema", "compile"},
		{"schema not object", `[{"json_schema":{"schema":3}}]`, "/0/json_schema/schema", "object or a boolean"},
		{"equals_json object needs value", `[{"equals_json":{"a":1}}]`, "/0/equals_json", `"value"`},
		{"judge threshold", `[{"judge":{"rubric":"r","threshold":2}}]`, "/0/judge/threshold", "between 0 and 1"},
		{"judge empty rubric", `[{"judge":"  "}]`, "/0/judge", "empty"},
		{"command empty", `[{"command":{"run":[]}}]`, "/0/command/run", "executable"},
		{"command timeout", `[{"command":{"run":["x"],"timeout":"11m"}}]`, "/0/command/timeout", "at most"},
		{"command timeout text", `[{"command":{"run":["x"],"timeout":"soon"}}]`, "/0/command/timeout", "duration"},
		{"all_tools_ok false", `[{"all_tools_ok":false}]`, "/0/all_tools_ok", "true"},
		{"duplicate config key", `[{"contains":{"value":"a","value":"b"}}]`, "/0/contains", "duplicate"},
		{"escaped grader pointer", `[{"tool_called":{"name":"x","a/b":1}}]`, "/0/tool_called/a~1b", "unknown field"},
		{"trailing data", `[{"contains":"a"}] x`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseSpecs([]byte(tc.in))
			if err == nil {
				t.Fatalf("ParseSpecs(%s) succeeded", tc.in)
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a *SpecError", err)
			}
			if se.Pointer != tc.ptr {
				t.Errorf("pointer = %q, want %q (%v)", se.Pointer, tc.ptr, err)
			}
			if !strings.Contains(se.Message, tc.msg) {
				t.Errorf("message %q does not mention %q", se.Message, tc.msg)
			}
			var ge *gyre.Error
			if !errors.As(err, &ge) || ge.Code != gyre.CodeInvalidBody || ge.Pointer != tc.ptr {
				t.Errorf("errors.As(*gyre.Error) = %+v", ge)
			}
		})
	}
}

func TestParseSpecsAt_PrefixesPointers(t *testing.T) {
	t.Parallel()
	_, err := ParseSpecsAt([]byte(`[{"contains":"a"},{"contains":"b"},{"tool_called":{"name":1}}]`), "/cases/3/graders")
	var se *SpecError
	if !errors.As(err, &se) || se.Pointer != "/cases/3/graders/2/tool_called/name" {
		t.Fatalf("err = %v", err)
	}
}

func TestSpec_MarshalRoundTrip(t *testing.T) {
	t.Parallel()
	var all []string
	for _, d := range minimalDecl {
		all = append(all, d)
	}
	raw := "[" + strings.Join(all, ",") + "]"
	specs, err := ParseSpecs([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	suite, err := Compile(specs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(suite)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseSpecs(b)
	if err != nil {
		t.Fatalf("re-parse %s: %v", b, err)
	}
	if len(again) != len(specs) {
		t.Fatalf("got %d specs back, want %d", len(again), len(specs))
	}
	for i := range specs {
		if again[i].Name != specs[i].Name || again[i].Optional != specs[i].Optional || string(again[i].Config) != string(specs[i].Config) {
			t.Errorf("spec %d: %+v != %+v", i, again[i], specs[i])
		}
	}
}

func TestCompile_HandBuiltSpecIsParsed(t *testing.T) {
	t.Parallel()
	s, err := Compile([]Spec{{Name: "contains", Config: json.RawMessage(`"refund"`)}})
	if err != nil {
		t.Fatal(err)
	}
	if g := s.Graders(); g[0].Label != "contains" || g[0].Version != "1" || g[0].Weight != 1 {
		t.Errorf("graders = %+v", g)
	}
	if _, err := Compile([]Spec{{Name: "nope", Config: json.RawMessage(`1`), Pointer: "/graders/0"}}); err == nil {
		t.Error("unknown hand-built grader compiled")
	}
}

func FuzzParseSpecs(f *testing.F) {
	for _, d := range minimalDecl {
		f.Add("[" + d + "]")
	}
	f.Add(`[{"tool_called":{"name":"x","args":{"a":[1,{"b":null}]},"max":3,"source":"emitted"}}]`)
	f.Add(`[{"artifact":{"name":"a","json_schema":{"type":"object","properties":{"x":{"pattern":"^(?=a)"}}}}}]`)
	f.Add(`[{"contains":{"value":"x","pointer":"/a~1b/0"}}]`)
	f.Add(`null`)
	f.Add(`[1,2,3]`)
	f.Fuzz(func(t *testing.T, in string) {
		specs, err := ParseSpecsAt([]byte(in), "/graders")
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("error is not a *SpecError: %v", err)
			}
			if !strings.HasPrefix(se.Pointer, "/graders") {
				t.Fatalf("pointer %q is not under /graders", se.Pointer)
			}
			return
		}
		s, err := Compile(specs)
		if err != nil {
			t.Fatalf("Compile after ParseSpecs: %v", err)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		if _, err := ParseSpecs(b); err != nil {
			t.Fatalf("re-parse of %s: %v", b, err)
		}
	})
}
