package dataset_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/gyrehq/gyre/internal/dataset"
)

// FuzzValidateChat: the validator never panics, and a row it accepts is
// JSON whose messages all decode into openai-go's message parameter types.
func FuzzValidateChat(f *testing.F) {
	for _, name := range []string{"sft.jsonl", "unicode.jsonl"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f.Add([]byte(l))
		}
	}
	f.Add([]byte(`{"messages":[{"role":"tool","tool_call_id":"x","content":"y"}]}`))
	f.Fuzz(func(t *testing.T, row []byte) {
		if dataset.ValidateChat(row) != nil {
			return
		}
		var r struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(row, &r); err != nil {
			t.Fatalf("accepted a row that is not JSON: %v", err)
		}
		for i, m := range r.Messages {
			var p openai.ChatCompletionMessageParamUnion
			if err := json.Unmarshal(m, &p); err != nil || p.GetRole() == nil {
				t.Fatalf("accepted message %d that openai-go does not take: %v", i, err)
			}
		}
	})
}

// FuzzValidatePreference: the validator never panics, and an accepted
// row has exactly one assistant message on each side.
func FuzzValidatePreference(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "dpo.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, row []byte) {
		if dataset.ValidatePreference(row) != nil {
			return
		}
		var r struct {
			Preferred    []map[string]any `json:"preferred_output"`
			NonPreferred []map[string]any `json:"non_preferred_output"`
		}
		if err := json.Unmarshal(row, &r); err != nil {
			t.Fatalf("accepted a row that is not JSON: %v", err)
		}
		if len(r.Preferred) != 1 || len(r.NonPreferred) != 1 || r.Preferred[0]["role"] != "assistant" || r.NonPreferred[0]["role"] != "assistant" {
			t.Fatalf("accepted outputs %v / %v", r.Preferred, r.NonPreferred)
		}
	})
}
