package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzValidJSON holds validJSON to json.Valid on any input.
func FuzzValidJSON(f *testing.F) {
	for _, s := range append(chunkSamples, `[1,-0,0.5e+3,-1E-2,true,false,null,"\u00e9\n"]`, `01`, `1.`, `-`, `1e`, `"\x"`, "\"\x01\"", "\"\x1f\"", `{"a" 1}`, `[1,]`, `{,}`, `tru`, `nul`, ` `) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := validJSON(data), json.Valid(data); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

// TestValidJSON_NestingLimit: encoding/json refuses nesting deeper than
// 10,000; so does validJSON.
func TestValidJSON_NestingLimit(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{maxNestingDepth, maxNestingDepth + 1} {
		b := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Errorf("depth %d: validJSON %v, json.Valid %v", depth, got, want)
		}
	}
}
