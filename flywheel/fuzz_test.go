package flywheel_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/jsonpointer"
)

func FuzzValidateProductionTurnBatch(f *testing.F) {
	addSeeds(f, "ProductionTurnBatch")
	f.Add([]byte(batchOf(3)))
	f.Add([]byte(`{"agent_id":"..","turns":[{"turn_id":" ","input_text":null,"final_text":null,"tool_calls":[{"name":"","outcome":"unknown","status_code":200,"entity_ids":{"x":""}}],"tool_calls_omitted_count":-1,"occurred_at":"x"}],"extra":{}}`))
	f.Add([]byte(`{"agent_id":"a","turns":[{"turn_id":"t","turn_id":"u"}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkFuzz(t, flywheel.DefProductionTurnBatch, raw, reflect.TypeFor[flywheel.ProductionTurnBatch]())
	})
}

func FuzzValidateRolloutOutput(f *testing.F) {
	addSeeds(f, "RolloutOutput")
	f.Add([]byte(`{"final_text":"x","artifacts":{"a":1,"b":{"sha256":"x"}},"exclusion":{},"score":1,"llm_call_count":1e300}`))
	f.Add([]byte(`{"final_text":"x","tool_calls":[{"name":"x","outcome":"ok","status_code":2e2,"entity_ids":{"id":"1"}}],"reward":-0}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkFuzz(t, flywheel.DefRolloutOutput, raw, reflect.TypeFor[flywheel.RolloutOutput]())
	})
}

func addSeeds(f *testing.F, def string) {
	files, err := filepath.Glob(filepath.Join("testdata", "valid", def, "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// checkFuzz asserts: no panic; a valid body decodes into the Go type and
// re-encodes to a valid body with the same canonical form; an invalid body
// yields violations whose pointers are well-formed and point into the
// document (or, for a missing member, into its parent object).
func checkFuzz(t *testing.T, def flywheel.Def, raw []byte, typ reflect.Type) {
	err := flywheel.Validate(def, raw)
	if err == nil {
		v := reflect.New(typ)
		if err := json.Unmarshal(raw, v.Interface()); err != nil {
			t.Fatalf("valid body does not decode: %v\n%s", err, raw)
		}
		out, err := flywheel.Marshal(def, v.Elem().Interface())
		if err != nil {
			t.Fatalf("re-encoded body is invalid: %v\n%s", err, raw)
		}
		a, err1 := jcs.Canonicalize(raw)
		b, err2 := jcs.Canonicalize(out)
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the body:\n%s\n%s", a, b)
		}
		return
	}
	var ve *flywheel.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error is not a *ValidationError: %v", err)
	}
	if len(ve.Violations) == 0 {
		t.Fatal("no violations")
	}
	tree, perr := jcs.Parse(raw)
	if perr != nil {
		// Not I-JSON: exactly one violation, at the parser's pointer or "".
		var je *jcs.Error
		if !errors.As(perr, &je) || len(ve.Violations) != 1 {
			t.Fatalf("parse failure gave %v", ve.Violations)
		}
		if p := ve.Violations[0].Pointer; p != "" && p != je.Pointer {
			t.Fatalf("pointer %q, parser said %q", p, je.Pointer)
		}
		return
	}
	for _, v := range ve.Violations {
		if v.Message == "" {
			t.Fatalf("empty message at %q", v.Pointer)
		}
		toks, err := jsonpointer.Split(v.Pointer)
		if err != nil {
			t.Fatalf("malformed pointer %q: %v", v.Pointer, err)
		}
		if _, found := jsonpointer.Resolve(tree, toks); found {
			continue
		}
		if len(toks) == 0 {
			t.Fatalf("root pointer does not resolve")
		}
		parent, found := jsonpointer.Resolve(tree, toks[:len(toks)-1])
		if _, isObj := parent.(map[string]any); !found || !isObj || !strings.Contains(v.Message, "is required") {
			t.Fatalf("pointer %q (%s) does not point into the document", v.Pointer, v.Message)
		}
	}
}
