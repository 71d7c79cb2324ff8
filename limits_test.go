package gyre

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestDecodeLimits_ReadsOnlyWellFormedLimits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in      string
		want    string // the re-encoded limits, "" when refused
		pointer string // the refusal's pointer
	}{
		{`{}`, `{"max_completions":null,"max_total_tokens":null,"max_cost_usd":null,"max_concurrent_requests":null}`, ""},
		{`{"max_completions":3,"max_total_tokens":0,"max_cost_usd":0.25,"max_concurrent_requests":2}`,
			`{"max_completions":3,"max_total_tokens":0,"max_cost_usd":0.25,"max_concurrent_requests":2}`, ""},
		{`{"max_completions":null}`, `{"max_completions":null,"max_total_tokens":null,"max_cost_usd":null,"max_concurrent_requests":null}`, ""},
		{` {"max_cost_usd" : 1e-3} `, `{"max_completions":null,"max_total_tokens":null,"max_cost_usd":0.001,"max_concurrent_requests":null}`, ""},
		{`{"max_completion":1}`, "", "/max_completion"},
		{`{"a/b~":1}`, "", "/a~1b~0"},
		{`{"max_completions":"1"}`, "", "/max_completions"},
		{`{"max_completions":1.5}`, "", "/max_completions"},
		{`{"max_completions":1e3}`, "", "/max_completions"},
		{`{"max_completions":-1}`, "", "/max_completions"},
		{`{"max_total_tokens":99999999999999999999}`, "", "/max_total_tokens"},
		{`{"max_cost_usd":-0.5}`, "", "/max_cost_usd"},
		{`{"max_cost_usd":1e999}`, "", "/max_cost_usd"},
		{`{"max_concurrent_requests":true}`, "", "/max_concurrent_requests"},
		{`{"max_completions":1,"max_completions":2}`, "", "/max_completions"},
		{`[]`, "", ""},
		{`null`, "", ""},
		{``, "", ""},
		{`{"max_completions":1`, "", ""},
		{`{} {}`, "", ""},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			l, err := DecodeLimits([]byte(c.in))
			if c.want != "" {
				got, _ := json.Marshal(l)
				if err != nil || string(got) != c.want {
					t.Fatalf("DecodeLimits = %s, %v; want %s", got, err, c.want)
				}
				return
			}
			var ge *Error
			if !errors.As(err, &ge) || ge.Code != CodeInvalidBody || ge.Pointer != c.pointer || ge.Message == "" {
				t.Fatalf("err = %v, want invalid_body at %q", err, c.pointer)
			}
		})
	}
}

// FuzzDecodeLimits: whatever DecodeLimits accepts, it reads back the same
// from its own encoding (the form batches store and the gateway reads).
func FuzzDecodeLimits(f *testing.F) {
	for _, s := range []string{`{}`, `{"max_completions":3}`, `{"max_cost_usd":0.5,"max_total_tokens":10}`, `{"x":1}`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLimits(b)
		if err != nil {
			return
		}
		enc, err := json.Marshal(l)
		if err != nil {
			t.Fatalf("encode %+v: %v", l, err)
		}
		again, err := DecodeLimits(enc)
		if err != nil {
			t.Fatalf("its own encoding %s is refused: %v", enc, err)
		}
		if enc2, _ := json.Marshal(again); string(enc2) != string(enc) {
			t.Fatalf("round trip changed %s to %s", enc, enc2)
		}
	})
}
