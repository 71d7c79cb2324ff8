package grade

import (
	"encoding/json"
	"strings"
	"testing"
)

func runItem(answer *string, output string) *Item {
	it := &Item{Kind: KindRun, Answer: answer}
	if output != "" {
		it.Output = json.RawMessage(output)
	}
	return it
}

func TestTextGraders_ReadAnswerOrFinalText(t *testing.T) {
	t.Parallel()
	runGradeCases(t, []gradeCase{
		{"exact trims surrounding whitespace", `{"exact":"42"}`, rollout("\n  42 \t", nil), "pass"},
		{"exact trims the expected value too", `{"exact":" 42 "}`, rollout("42", nil), "pass"},
		{"exact keeps inner whitespace", `{"exact":"4 2"}`, rollout("42", nil), "fail"},
		{"exact is case sensitive", `{"exact":"Yes"}`, rollout("yes", nil), "fail"},
		{"contains", `{"contains":"refund"}`, rollout("Your refund is on its way", nil), "pass"},
		{"contains is case sensitive", `{"contains":"Refund"}`, rollout("your refund", nil), "fail"},
		{"icontains ignores case", `{"icontains":"REFUND"}`, rollout("your Refund", nil), "pass"},
		{"icontains fails", `{"icontains":"refund"}`, rollout("no money", nil), "fail"},
		{"not_contains passes", `{"not_contains":"sorry"}`, rollout("done", nil), "pass"},
		{"not_contains fails", `{"not_contains":"sorry"}`, rollout("so sorry", nil), "fail"},
		{"regex RE2", `{"regex":"^order \\d{4}$"}`, rollout("order 1042", nil), "pass"},
		{"regex RE2 fails", `{"regex":"^order \\d{4}$"}`, rollout("order 42", nil), "fail"},
		{"regex ECMA fallback (lookahead)", `{"regex":"^(?=.*refund)(?=.*1042)"}`, rollout("1042: refund issued", nil), "pass"},
		{"regex ECMA fallback fails", `{"regex":"^(?=.*refund)(?=.*1042)"}`, rollout("refund issued", nil), "fail"},
		{"run reads answer", `{"contains":"ok"}`, runItem(sp("all ok"), ""), "pass"},
		{"run ignores final_text", `{"contains":"ok"}`, &Item{Kind: KindRun, FinalText: sp("ok")}, "abstain:target_null"},
	})
}

func TestTextGraders_AbstainWhenTargetNull(t *testing.T) {
	t.Parallel()
	var cases []gradeCase
	for _, g := range []string{"exact", "contains", "icontains", "not_contains", "regex"} {
		cases = append(cases,
			gradeCase{g + " null answer", `{"` + g + `":"x"}`, runItem(nil, `{"a":"x"}`), "abstain:target_null"},
			gradeCase{g + " null final_text", `{"` + g + `":"x"}`, &Item{Kind: KindRollout}, "abstain:target_null"},
			gradeCase{g + " pointer into null output", `{"` + g + `":{"value":"x","pointer":"/a"}}`, runItem(sp("x"), ""), "abstain:target_null"},
			gradeCase{g + " pointer at JSON null", `{"` + g + `":{"value":"x","pointer":"/a"}}`, runItem(sp("x"), `{"a":null}`), "abstain:target_null"},
			gradeCase{g + " pointer not found", `{"` + g + `":{"value":"x","pointer":"/b"}}`, runItem(sp("x"), `{"a":"x"}`), "abstain:pointer_not_found"},
		)
	}
	runGradeCases(t, cases)
}

func TestTextGraders_PointerIntoOutput(t *testing.T) {
	t.Parallel()
	out := `{"summary":"Refund issued","order":{"id":1042,"tags":["a","b/c"]},"a/b":"slash","t~x":"tilde"}`
	runGradeCases(t, []gradeCase{
		{"string at pointer", `{"contains":{"value":"Refund","pointer":"/summary"}}`, runItem(nil, out), "pass"},
		{"answer not read with pointer", `{"contains":{"value":"nope","pointer":"/summary"}}`, runItem(sp("nope"), out), "fail"},
		{"number as JSON text", `{"exact":{"value":"1042","pointer":"/order/id"}}`, runItem(nil, out), "pass"},
		{"array index", `{"exact":{"value":"b/c","pointer":"/order/tags/1"}}`, runItem(nil, out), "pass"},
		{"escaped slash", `{"exact":{"value":"slash","pointer":"/a~1b"}}`, runItem(nil, out), "pass"},
		{"escaped tilde", `{"exact":{"value":"tilde","pointer":"/t~0x"}}`, runItem(nil, out), "pass"},
		{"object as compact JSON", `{"contains":{"value":"\"id\":1042","pointer":"/order"}}`, runItem(nil, out), "pass"},
		{"whole output", `{"contains":{"value":"slash","pointer":""}}`, runItem(nil, out), "pass"},
		{"no HTML escaping", `{"contains":{"value":"<b>&","pointer":"/h"}}`, runItem(nil, `{"h":{"x":"<b>&"}}`), "pass"},
		{"index out of range", `{"exact":{"value":"x","pointer":"/order/tags/2"}}`, runItem(nil, out), "abstain:pointer_not_found"},
		{"leading zero index", `{"exact":{"value":"a","pointer":"/order/tags/00"}}`, runItem(nil, out), "abstain:pointer_not_found"},
	})
}

func TestRegex_ECMATimeoutAbstains(t *testing.T) {
	t.Parallel()
	// The lookahead forces the ECMA engine; the nested quantifier makes it
	// backtrack catastrophically on a string without the final b.
	v := gradeOne(t, `{"regex":"^(?=(a+)+b)"}`, rollout(strings.Repeat("a", 64), nil), Env{})
	if got := outcomeOf(v); got != "abstain:regex_timeout" {
		t.Errorf("got %s, want abstain:regex_timeout", got)
	}
}

func TestEqualsJSON(t *testing.T) {
	t.Parallel()
	runGradeCases(t, []gradeCase{
		{"output equal, key order ignored", `{"equals_json":{"value":{"a":1,"b":[true,null]}}}`, runItem(nil, `{"b":[true,null],"a":1}`), "pass"},
		{"numbers compare as doubles", `{"equals_json":{"value":{"a":1}}}`, runItem(nil, `{"a":1.0}`), "pass"},
		{"exponent form", `{"equals_json":{"value":{"a":100}}}`, runItem(nil, `{"a":1e2}`), "pass"},
		{"strings are exact", `{"equals_json":{"value":{"a":"é"}}}`, runItem(nil, `{"a":"e\u0301"}`), "fail"},
		{"extra key fails", `{"equals_json":{"value":{"a":1}}}`, runItem(nil, `{"a":1,"b":2}`), "fail"},
		{"answer parsed when output null", `{"equals_json":[1,2,3]}`, runItem(sp(" [1, 2, 3] "), ""), "pass"},
		{"rollout final_text parsed", `{"equals_json":{"value":{"ok":true}}}`, rollout(`{"ok": true}`, nil), "pass"},
		{"scalar shorthand", `{"equals_json":42}`, rollout(`42`, nil), "pass"},
		{"answer not JSON fails", `{"equals_json":{"value":{"a":1}}}`, runItem(sp("a is 1"), ""), "fail"},
		{"both null abstains", `{"equals_json":{"value":{"a":1}}}`, runItem(nil, ""), "abstain:target_null"},
		{"pointer", `{"equals_json":{"value":[1042],"pointer":"/ids"}}`, runItem(nil, `{"ids":[1042]}`), "pass"},
		{"pointer missing", `{"equals_json":{"value":1,"pointer":"/x"}}`, runItem(nil, `{"ids":[1042]}`), "abstain:pointer_not_found"},
	})
}

func TestJSONSchema(t *testing.T) {
	t.Parallel()
	schema := `{"type":"object","required":["order_id","amount"],"properties":{"order_id":{"type":"string","pattern":"^\\d+$"},"amount":{"type":"number","minimum":0}},"additionalProperties":false}`
	ecma := `{"type":"string","pattern":"^(?!draft)"}`
	runGradeCases(t, []gradeCase{
		{"valid output", `{"json_schema":{"schema":` + schema + `}}`, runItem(nil, `{"order_id":"1042","amount":12.5}`), "pass"},
		{"invalid output", `{"json_schema":{"schema":` + schema + `}}`, runItem(nil, `{"order_id":"x","amount":12.5}`), "fail"},
		{"extra property", `{"json_schema":{"schema":` + schema + `}}`, runItem(nil, `{"order_id":"1","amount":1,"z":1}`), "fail"},
		{"answer parsed", `{"json_schema":{"schema":` + schema + `}}`, rollout(`{"order_id":"7","amount":0}`, nil), "pass"},
		{"answer not JSON", `{"json_schema":{"schema":` + schema + `}}`, rollout(`order 7`, nil), "fail"},
		{"target null", `{"json_schema":{"schema":` + schema + `}}`, &Item{Kind: KindRollout}, "abstain:target_null"},
		{"pointer", `{"json_schema":{"schema":{"type":"integer"},"pointer":"/n"}}`, runItem(nil, `{"n":3}`), "pass"},
		{"ECMA pattern passes", `{"json_schema":{"schema":` + ecma + `,"pointer":"/s"}}`, runItem(nil, `{"s":"final"}`), "pass"},
		{"ECMA pattern fails", `{"json_schema":{"schema":` + ecma + `,"pointer":"/s"}}`, runItem(nil, `{"s":"draft 2"}`), "fail"},
		{"formats asserted", `{"json_schema":{"schema":{"type":"string","format":"email"},"pointer":"/e"}}`, runItem(nil, `{"e":"not an email"}`), "fail"},
		{"internal ref", `{"json_schema":{"schema":{"$defs":{"n":{"type":"integer"}},"$ref":"#/$defs/n"}}}`, rollout(`5`, nil), "pass"},
		{"draft-07 meta-schema", `{"json_schema":{"schema":{"$schema":"http://json-schema.org/draft-07/schema#","type":"integer"}}}`, rollout(`5`, nil), "pass"},
		{"boolean schema", `{"json_schema":{"schema":false}}`, rollout(`5`, nil), "fail"},
	})
}

func TestJSONSchema_RefusesExternalReferences(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{
		`{"$ref":"https://example.com/schema.json"}`,
		`{"$ref":"file:///etc/passwd"}`,
		`{"$ref":"other.json"}`,
		`{"$schema":"https://example.com/my-meta","type":"object"}`,
	} {
		if _, err := ParseSpecs([]byte(`[{"json_schema":{"schema":` + schema + `}}]`)); err == nil {
			t.Errorf("schema %s compiled", schema)
		}
	}
}
