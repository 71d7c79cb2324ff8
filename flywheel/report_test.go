package flywheel_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

func TestParseReport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		pointer    string // of the first violation; "" for a plain error
		ok         bool
	}{
		{name: "empty object", body: `{}`, ok: true},
		{name: "every member", ok: true, body: `{"final_text":"hi","tool_calls":[{"name":"t","outcome":"ok","status_code":200}],
			"tool_calls_omitted_count":0,"llm_call_count":3,"success":true,"reward":0.5,"events":[{"type":"x"}],
			"exclusion":{"reason":"credential_expired","detail":null},"agent_fingerprint":{"sdk":"go"}}`},
		{name: "null tool_calls", body: `{"tool_calls":null}`, ok: true},
		{name: "status with unknown", body: `{"tool_calls":[{"name":"t","outcome":"unknown","status_code":200}]}`, pointer: "/tool_calls/0/status_code"},
		{name: "missing status_code", body: `{"tool_calls":[{"name":"t","outcome":"ok"}]}`, pointer: "/tool_calls/0/status_code"},
		{name: "timing is the worker's", body: `{"final_text":"x","timing":{}}`, pointer: "/timing"},
		{name: "artifacts are the worker's", body: `{"artifacts":{}}`, pointer: "/artifacts"},
		{name: "server-authored score", body: `{"score":1}`, pointer: "/score"},
		{name: "null final_text", body: `{"final_text":null}`, pointer: "/final_text"},
		{name: "bad exclusion", body: `{"exclusion":{"reason":"bored"}}`, pointer: "/exclusion/reason"},
		{name: "negative count", body: `{"llm_call_count":-1}`, pointer: "/llm_call_count"},
		{name: "duplicate key", body: `{"final_text":"a","final_text":"b"}`, pointer: "/final_text"},
		{name: "not JSON", body: `{"final_text":`},
		{name: "an array", body: `[]`},
		{name: "too large", body: `{"final_text":"` + strings.Repeat("x", flywheel.MaxReportBytes) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := flywheel.ParseReport([]byte(tc.body))
			if tc.ok {
				if err != nil {
					t.Fatalf("ParseReport = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("ParseReport accepted an invalid report")
			}
			var ve *flywheel.ValidationError
			if tc.pointer != "" && (!errors.As(err, &ve) || ve.First().Pointer != tc.pointer) {
				t.Errorf("ParseReport = %v, want a violation at %s", err, tc.pointer)
			}
		})
	}
}

func TestReport_MarshalKeepsTheThreeStatesOfToolCalls(t *testing.T) {
	t.Parallel()
	text := "x"
	for _, tc := range []struct {
		rep  flywheel.Report
		want string
	}{
		{flywheel.Report{FinalText: &text}, `{"final_text":"x"}`},
		{flywheel.Report{ToolCalls: flywheel.NotReported()}, `{"tool_calls":null}`},
		{flywheel.Report{ToolCalls: flywheel.ReportedToolCalls(nil)}, `{"tool_calls":[]}`},
	} {
		b, err := tc.rep.Marshal()
		if err != nil || string(b) != tc.want {
			t.Errorf("Marshal = %s, %v; want %s", b, err, tc.want)
		}
	}
	bad := flywheel.Report{ToolCalls: flywheel.ReportedToolCalls([]flywheel.ToolCallRecord{{Name: "t", Outcome: flywheel.OutcomeUnknown, StatusCode: new(200)}})}
	if _, err := bad.Marshal(); err == nil {
		t.Error("Marshal encoded a report that breaks the contract")
	}
}
