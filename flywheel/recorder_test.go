package flywheel_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gyrehq/gyre/flywheel"
)

// record runs one call through a fresh Recorder and returns its record
// with latency removed, encoded as the wire has it.
func record(t *testing.T, f func(rec *flywheel.Recorder, ctx context.Context)) map[string]any {
	t.Helper()
	rec := flywheel.NewRecorder()
	f(rec, context.Background())
	calls := rec.ToolCalls()
	if len(calls) != 1 {
		t.Fatalf("%d calls recorded", len(calls))
	}
	b, err := flywheel.Marshal(flywheel.DefToolCallRecord, calls[0])
	if err != nil {
		t.Fatalf("the Recorder produced a record that breaks the contract: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["latency_ms"].(float64); !ok {
		t.Errorf("latency_ms = %v", m["latency_ms"])
	}
	delete(m, "latency_ms")
	return m
}

func TestRecorder_HonestOutcomes(t *testing.T) {
	t.Parallel()
	start := flywheel.ToolCallStart{Name: "cancel_order", ToolCallID: "call_9", Arguments: `{"order_id":"A1"}`}
	statusOut := map[string]any{"status": "cancelled", "status_code": 200, "code": "OK", "ok": true, "error": nil, "order_id": "A1"}
	for _, tc := range []struct {
		name string
		run  func(rec *flywheel.Recorder, ctx context.Context)
		want map[string]any
	}{
		{
			name: "observed ok with a status on the wire",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, start)
				c.ObserveStatus(201)
				c.OK(statusOut)
			},
			want: map[string]any{"name": "cancel_order", "outcome": "ok", "status_code": float64(201), "tool_call_id": "call_9",
				"arguments": map[string]any{"order_id": "A1"},
				"output":    map[string]any{"status": "cancelled", "status_code": float64(200), "code": "OK", "ok": true, "error": nil, "order_id": "A1"}},
		},
		{
			name: "ok without a status seen stays null",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, flywheel.ToolCallStart{Name: "lookup"})
				c.OK("found")
			},
			want: map[string]any{"name": "lookup", "outcome": "ok", "status_code": nil, "output": "found"},
		},
		{
			name: "unknown never carries a status and its object output is scrubbed",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, start)
				c.ObserveStatus(200)
				c.Unknown(statusOut)
			},
			want: map[string]any{"name": "cancel_order", "outcome": "unknown", "status_code": nil, "tool_call_id": "call_9",
				"arguments": map[string]any{"order_id": "A1"}, "output": map[string]any{"order_id": "A1"}},
		},
		{
			name: "unknown keeps a non-object output as is",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, flywheel.ToolCallStart{Name: "t"})
				c.Unknown("status: ok")
			},
			want: map[string]any{"name": "t", "outcome": "unknown", "status_code": nil, "output": "status: ok"},
		},
		{
			name: "failed keeps the error and the observed status",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, flywheel.ToolCallStart{Name: "refund"})
				c.ObserveStatus(503)
				c.Failed(errors.New("upstream unavailable"), json.RawMessage(`{"error":"busy"}`))
			},
			want: map[string]any{"name": "refund", "outcome": "failed", "status_code": float64(503),
				"error": "upstream unavailable", "output": map[string]any{"error": "busy"}},
		},
		{
			name: "an outcome that is not ok or failed is unknown",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, flywheel.ToolCallStart{Name: "t"})
				c.ObserveStatus(200)
				c.Finish("probably_ok", nil, nil)
			},
			want: map[string]any{"name": "t", "outcome": "unknown", "status_code": nil},
		},
		{
			name: "a call never finished is reported unknown, never dropped",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, flywheel.ToolCallStart{Name: "t"})
				c.ObserveStatus(200)
			},
			want: map[string]any{"name": "t", "outcome": "unknown", "status_code": nil, "error": "the call had not finished when it was reported"},
		},
		{
			name: "the first finish wins",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, flywheel.ToolCallStart{Name: "t"})
				c.Failed(errors.New("no"), nil)
				c.OK("yes")
			},
			want: map[string]any{"name": "t", "outcome": "failed", "status_code": nil, "error": "no"},
		},
		{
			name: "entity ids only under the contract's keys",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, flywheel.ToolCallStart{Name: "create"})
				c.EntityID(flywheel.EntityKeyUUID, "0b6e…")
				c.EntityID("order_number", "42")
				c.EntityID(flywheel.EntityKeyID, "")
				c.OK(nil)
			},
			want: map[string]any{"name": "create", "outcome": "ok", "status_code": nil, "entity_ids": map[string]any{"uuid": "0b6e…"}},
		},
		{
			name: "arguments that are not an object are left out",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, flywheel.ToolCallStart{Name: "t", Arguments: `["not", "an", "object"]`, AgentName: "triage"})
				c.OK(nil)
			},
			want: map[string]any{"name": "t", "outcome": "ok", "status_code": nil, "agent_name": "triage"},
		},
		{
			name: "an impossible status is not recorded",
			run: func(rec *flywheel.Recorder, ctx context.Context) {
				_, c := rec.Start(ctx, flywheel.ToolCallStart{Name: "t"})
				c.ObserveStatus(999)
				c.OK(nil)
			},
			want: map[string]any{"name": "t", "outcome": "ok", "status_code": nil},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := record(t, tc.run)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("record (-want +got):\n%s", d)
			}
		})
	}
}

func TestRecorder_ToolTransportRecordsTheStatusOnTheWire(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":"already cancelled"}`)
	}))
	defer api.Close()
	rec := flywheel.NewRecorder()
	hc := &http.Client{Transport: rec.ToolTransport(nil)}

	ctx, call := rec.Start(context.Background(), flywheel.ToolCallStart{Name: "cancel_order"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	call.Failed(errors.New("409 from the order API"), nil)

	// A request outside any call records nothing.
	if resp, err := hc.Get(api.URL); err == nil {
		resp.Body.Close()
	}
	calls := rec.ToolCalls()
	if len(calls) != 1 || calls[0].StatusCode == nil || *calls[0].StatusCode != 409 {
		t.Fatalf("calls = %+v, want status 409 on the one call", calls)
	}
}

func TestRecorder_LLMTransportCountsCompletionsDeliveredInFull(t *testing.T) {
	t.Parallel()
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			if r.Header.Get("X-Case") == "stream" {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n")
				io.WriteString(w, "data: [DONE]\n\n")
				return
			}
			if r.Header.Get("X-Case") == "error" {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
		default:
			io.WriteString(w, `{"data":[]}`)
		}
	}))
	defer gw.Close()
	rec := flywheel.NewRecorder()
	hc := &http.Client{Transport: rec.LLMTransport(nil)}
	post := func(kind string, readAll bool) {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(`{}`))
		req.Header.Set("X-Case", kind)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if readAll {
			io.ReadAll(resp.Body)
		} else {
			// A stream client stops at [DONE] without reading to EOF.
			buf := make([]byte, 1<<10)
			for {
				n, _ := resp.Body.Read(buf)
				if n == 0 || strings.Contains(string(buf[:n]), "[DONE]") {
					break
				}
			}
		}
		resp.Body.Close()
	}
	post("json", true)
	post("stream", false)
	post("error", true)
	if resp, err := hc.Get(gw.URL + "/v1/models"); err == nil {
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	// A response abandoned before its end does not count.
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(`{}`))
	if resp, err := hc.Do(req); err == nil {
		resp.Body.Close()
	}
	rep := rec.Report("done")
	if n, ok := rep.LLMCallCount.Get(); !ok || n != 2 {
		t.Errorf("llm_call_count = %v, want 2 (one completion, one stream)", rep.LLMCallCount)
	}
}

func TestRecorder_LLMTransportNoticesTheGatewaysNoPolicy(t *testing.T) {
	t.Parallel()
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"message":"no policy","type":"server_error","code":"no_policy"}}`)
	}))
	defer gw.Close()
	rec := flywheel.NewRecorder()
	hc := &http.Client{Transport: rec.LLMTransport(nil)}
	resp, err := hc.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "no_policy") {
		t.Errorf("the body the client reads was consumed: %q", body)
	}
	rep := rec.Report("")
	if ex, ok := rep.Exclusion.Get(); !ok || ex.Reason != flywheel.ExclusionSubstrateUnavailable {
		t.Errorf("exclusion = %+v, want substrate_unavailable", rep.Exclusion)
	}
	if n, _ := rep.LLMCallCount.Get(); n != 0 {
		t.Errorf("llm_call_count = %d", n)
	}

	// The agent's own exclusion wins.
	rec.Exclude(flywheel.ExclusionCredentialExpired, "")
	if ex, _ := rec.Report("").Exclusion.Get(); ex.Reason != flywheel.ExclusionCredentialExpired {
		t.Errorf("exclusion = %v", ex.Reason)
	}
}

// TestRecorder_LLMTransportCountsMessagesStreamsAtMessageStop: an
// Anthropic Messages stream counts once its message_stop was read, even
// by a client that stops there, and never when it ended without one (the
// gateway ends a cut stream with an error event and does not count it); a
// whole message counts when read to the end; the gateway's Anthropic-shaped
// no_policy is noticed by its error.code.
func TestRecorder_LLMTransportCountsMessagesStreamsAtMessageStop(t *testing.T) {
	t.Parallel()
	event := func(w io.Writer, data string) { io.WriteString(w, "event: x\ndata: "+data+"\n\n") }
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("X-Case") {
		case "stream", "cut":
			w.Header().Set("Content-Type", "text/event-stream")
			event(w, `{"type":"message_start","message":{"id":"m","type":"message","content":[]}}`)
			// A text that mentions message_stop is not the event.
			event(w, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"{\"type\":\"message_stop\"}"}}`)
			if r.Header.Get("X-Case") == "cut" {
				event(w, `{"type":"error","error":{"type":"api_error","message":"cut","code":"upstream_error"}}`)
				return
			}
			event(w, `{"type":"message_stop"}`)
		case "no_policy":
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"type":"error","error":{"type":"api_error","message":"no policy","code":"no_policy"},"request_id":"r"}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"m","type":"message","content":[]}`)
		}
	}))
	defer gw.Close()
	rec := flywheel.NewRecorder()
	hc := &http.Client{Transport: rec.LLMTransport(nil)}
	post := func(kind string, stopAtMessageStop bool) {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/messages", strings.NewReader(`{}`))
		req.Header.Set("X-Case", kind)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		buf := make([]byte, 7) // small reads: the marker spans them
		for {
			n, err := resp.Body.Read(buf)
			got.Write(buf[:n])
			if err != nil || (stopAtMessageStop && strings.HasSuffix(got.String(), `{"type":"message_stop"}`+"\n\n")) {
				break
			}
		}
		resp.Body.Close()
	}
	post("stream", true)
	post("cut", false)
	post("json", false)
	post("no_policy", false)
	rep := rec.Report("done")
	if n, ok := rep.LLMCallCount.Get(); !ok || n != 2 {
		t.Errorf("llm_call_count = %v, want 2 (the whole stream and the message, not the cut stream)", rep.LLMCallCount)
	}
	if ex, ok := rep.Exclusion.Get(); !ok || ex.Reason != flywheel.ExclusionSubstrateUnavailable {
		t.Errorf("exclusion = %+v, want substrate_unavailable from the Anthropic-shaped no_policy", rep.Exclusion)
	}
}

func TestRecorder_ReportKeepsNullAndEmptyApart(t *testing.T) {
	t.Parallel()
	rec := flywheel.NewRecorder()
	b, err := rec.Report("hi").Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"final_text":"hi","tool_calls":[]}`; got != want {
		t.Errorf("report = %s, want %s: zero calls observed is [], and nothing not counted is sent", got, want)
	}
	rec.Omit(2)
	rec.CountLLMCall()
	rec.SetReward(0.5)
	rec.AddEvent(map[string]any{"type": "note"})
	if rec.AddEvent("not an object") {
		t.Error("AddEvent accepted a string")
	}
	rec.SetAgentFingerprint(map[string]any{"sdk": "go"})
	b, err = rec.Report("hi").Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"final_text":"hi","tool_calls":[],"tool_calls_omitted_count":2,"llm_call_count":1,"reward":0.5,"events":[{"type":"note"}],"agent_fingerprint":{"sdk":"go"}}`
	if string(b) != want {
		t.Errorf("report = %s\nwant %s", b, want)
	}
}

func TestRecorder_WriteReportTo(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "report.json")
	rec := flywheel.NewRecorder()
	if err := rec.WriteReportTo("", "standalone"); err != nil {
		t.Fatal(err)
	}
	_, c := rec.Start(context.Background(), flywheel.ToolCallStart{Name: "t"})
	c.OK(nil)
	if err := rec.WriteReportTo(path, "answer"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := flywheel.ParseReport(b)
	if err != nil {
		t.Fatal(err)
	}
	if *rep.FinalText != "answer" {
		t.Errorf("final_text = %q", *rep.FinalText)
	}
	if calls, _ := rep.ToolCalls.Get(); len(calls) != 1 {
		t.Errorf("tool_calls = %v", rep.ToolCalls)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("the directory holds %d files, want only the report (no temporary left)", len(entries))
	}
}
