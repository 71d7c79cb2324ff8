package atif_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/atif"
)

// TestTypesCoverEveryField compares the JSON names of each type with the
// fields reference/atif.md §2 lists for ATIF-v1.0 to ATIF-v1.7.
func TestTypesCoverEveryField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ    reflect.Type
		fields string
	}{
		{reflect.TypeFor[atif.Trajectory](), "schema_version session_id trajectory_id agent steps notes final_metrics continued_trajectory_ref extra subagent_trajectories"},
		{reflect.TypeFor[atif.Agent](), "name version model_name tool_definitions extra"},
		{reflect.TypeFor[atif.Step](), "step_id timestamp source model_name reasoning_effort message reasoning_content tool_calls observation metrics is_copied_context llm_call_count extra"},
		{reflect.TypeFor[atif.ToolCall](), "tool_call_id function_name arguments extra"},
		{reflect.TypeFor[atif.Observation](), "results"},
		{reflect.TypeFor[atif.ObservationResult](), "source_call_id content subagent_trajectory_ref extra"},
		{reflect.TypeFor[atif.SubagentTrajectoryRef](), "session_id trajectory_id trajectory_path extra"},
		{reflect.TypeFor[atif.Metrics](), "prompt_tokens completion_tokens cached_tokens cost_usd prompt_token_ids completion_token_ids logprobs extra"},
		{reflect.TypeFor[atif.FinalMetrics](), "total_prompt_tokens total_completion_tokens total_cached_tokens total_cost_usd total_steps extra"},
		{reflect.TypeFor[atif.ContentPart](), "type text source"},
		{reflect.TypeFor[atif.ImageSource](), "media_type path"},
	}
	for _, tt := range tests {
		var got []string
		for f := range tt.typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			got = append(got, name)
		}
		want := strings.Fields(tt.fields)
		slices.Sort(got)
		slices.Sort(want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s fields (-atif.md +type):\n%s", tt.typ.Name(), diff)
		}
	}
}

// TestZeroValuesSurvive checks that a real 0, false and empty list are
// written back, not dropped.
func TestZeroValuesSurvive(t *testing.T) {
	t.Parallel()
	in := `{"schema_version":"ATIF-v1.7","agent":{"name":"","version":"","tool_definitions":[]},"steps":[` +
		`{"step_id":1,"source":"agent","message":[],"tool_calls":[],"observation":{"results":[]},"is_copied_context":false,"llm_call_count":0,` +
		`"metrics":null}],"final_metrics":{"total_prompt_tokens":0,"total_cost_usd":0,"total_steps":0},"subagent_trajectories":[]}`
	tr, err := atif.Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(in, `,"metrics":null`, "", 1) // null reads as absent
	if diff := cmp.Diff(jsonValue(t, want), jsonValue(t, string(out))); diff != "" {
		t.Errorf("re-encoded (-want +got):\n%s", diff)
	}
}

func TestContentJSON(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want atif.Content
		str  string
	}{
		{`"hi"`, atif.TextContent("hi"), "hi"},
		{`[]`, atif.Content{Parts: []atif.ContentPart{}}, ""},
		{`[{"type":"text","text":"a"},{"type":"image","source":{"media_type":"image/png","path":"p"}},{"type":"text","text":"b"}]`, atif.Content{Parts: []atif.ContentPart{
			{Type: "text", Text: ptr("a")}, {Type: "image", Source: &atif.ImageSource{MediaType: "image/png", Path: "p"}}, {Type: "text", Text: ptr("b")},
		}}, "a\nb"},
	} {
		var c atif.Content
		if err := json.Unmarshal([]byte(tt.in), &c); err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if diff := cmp.Diff(tt.want, c); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.in, diff)
		}
		if c.String() != tt.str || c.IsParts() != strings.HasPrefix(tt.in, "[") {
			t.Errorf("%s: String() = %q, IsParts() = %v", tt.in, c.String(), c.IsParts())
		}
		out, err := json.Marshal(c)
		if err != nil || string(out) != tt.in {
			t.Errorf("Marshal = %s, %v; want %s", out, err, tt.in)
		}
	}
	var c atif.Content
	if err := json.Unmarshal([]byte(`{}`), &c); err == nil {
		t.Error("an object decoded as content")
	}
	c = atif.TextContent("kept")
	if err := json.Unmarshal([]byte(`null`), &c); err != nil || c.Text != "kept" {
		t.Errorf("null: %v, %+v", err, c)
	}
}

func ptr[T any](v T) *T { return &v }
