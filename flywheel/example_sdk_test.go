package flywheel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/gyrehq/gyre/flywheel"
)

// A Go agent records each tool call it executes. The outcome is what the
// agent observed; a status code is kept only with an observed verdict.
func ExampleRecorder() {
	rec := flywheel.NewRecorder()
	ctx := context.Background()

	// The model asked for lookup_order; the tool answered and the agent
	// saw it succeed.
	_, call := rec.Start(ctx, flywheel.ToolCallStart{
		Name: "lookup_order", ToolCallID: "call_abc", Arguments: `{"order_id":"A1"}`,
	})
	call.ObserveStatus(200)
	call.OK(map[string]any{"order_id": "A1", "status": "shipped"})

	// A framework swallowed the error of cancel_order: no verdict, so the
	// outcome is unknown, the status is dropped and the output scrubbed.
	_, call = rec.Start(ctx, flywheel.ToolCallStart{Name: "cancel_order", ToolCallID: "call_def"})
	call.ObserveStatus(200)
	call.Unknown(map[string]any{"ok": true, "message": "request sent"})

	for _, c := range rec.ToolCalls() {
		c.LatencyMS = flywheel.Optional[float64]{} // varies run to run
		b, _ := flywheel.Marshal(flywheel.DefToolCallRecord, c)
		fmt.Println(string(b))
	}
	// Output:
	// {"name":"lookup_order","arguments":{"order_id":"A1"},"outcome":"ok","status_code":200,"output":{"order_id":"A1","status":"shipped"},"tool_call_id":"call_abc"}
	// {"name":"cancel_order","outcome":"unknown","status_code":null,"output":{"message":"request sent"},"tool_call_id":"call_def"}
}

// Under gyre worker, the agent writes its report to GYRE_REPORT before it
// exits; run on its own, WriteReport does nothing.
func ExampleRecorder_WriteReport() {
	rec := flywheel.NewRecorder()
	rec.CountLLMCall()
	rec.SetSuccess(true)
	if err := rec.WriteReport("Your order A1 has shipped."); err != nil {
		log.Fatal(err)
	}
	b, _ := rec.Report("Your order A1 has shipped.").Marshal()
	fmt.Println(string(b))
	// Output:
	// {"final_text":"Your order A1 has shipped.","tool_calls":[],"llm_call_count":1,"success":true}
}

// ToolTransport records the HTTP status of a tool's own API calls on the
// call in the request's context.
func ExampleRecorder_ToolTransport() {
	orders := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	}))
	defer orders.Close()

	rec := flywheel.NewRecorder()
	hc := &http.Client{Transport: rec.ToolTransport(nil)}
	ctx, call := rec.Start(context.Background(), flywheel.ToolCallStart{Name: "lookup_order"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, orders.URL+"/orders/Z9", nil)
	resp, err := hc.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	call.Failed(errors.New("order Z9 not found"), nil)

	c := rec.ToolCalls()[0]
	fmt.Println(c.Outcome, *c.StatusCode)
	// Output:
	// failed 404
}

// The Encoder writes contract bodies exactly: null and [] stay apart, and
// required-but-null members are always present.
func ExampleEncoder() {
	enc := flywheel.NewEncoder(os.Stdout)
	_ = enc.Encode(flywheel.DefRolloutOutput, flywheel.RolloutOutput{
		FinalText: "no tools needed", ToolCalls: flywheel.ReportedToolCalls(nil),
	})
	_ = enc.Encode(flywheel.DefRolloutOutput, flywheel.RolloutOutput{
		FinalText: "cannot tell which tools ran", ToolCalls: flywheel.NotReported(),
	})
	err := enc.Encode(flywheel.DefToolCallRecord, flywheel.ToolCallRecord{
		Name: "t", Outcome: flywheel.OutcomeUnknown, StatusCode: new(200),
	})
	fmt.Println(err)
	// Output:
	// {"final_text":"no tools needed","tool_calls":[]}
	// {"final_text":"cannot tell which tools ran","tool_calls":null}
	// flywheel: invalid ToolCallRecord: /status_code: status_code must be null when outcome is "unknown" (got integer)
}

// A report that breaks the contract is refused with a pointer to the
// fault; gyre worker then ignores it and says why in the output's events.
func ExampleParseReport() {
	_, err := flywheel.ParseReport([]byte(`{"final_text":"done","score":1}`))
	var ve *flywheel.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.First().Pointer)
	}
	// Output:
	// /score
}

// Attach captures production turns in the background: Add never blocks,
// and Close flushes what is queued.
func ExampleAttach() {
	gyre := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b flywheel.ProductionTurnBatch
		_ = json.NewDecoder(r.Body).Decode(&b)
		fmt.Fprintf(w, `{"accepted":%d,"duplicates":0}`, len(b.Turns))
	}))
	defer gyre.Close()

	client, err := flywheel.NewClient(gyre.URL, "agent-key")
	if err != nil {
		log.Fatal(err)
	}
	capture, err := flywheel.Attach(flywheel.AttachConfig{Client: client, AgentID: "support-bot"})
	if err != nil {
		log.Fatal(err)
	}
	for _, q := range []string{"Where is A1?", "Cancel B2", "Refund C3"} {
		in, out := q, "done"
		_, err := capture.Add(flywheel.ProductionTurn{
			InputText: &in, FinalText: &out,
			ToolCalls: nil, // not reported: this agent does not record its tools
		})
		if err != nil {
			fmt.Println("dropped:", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := capture.Close(ctx); err != nil {
		log.Fatal(err)
	}
	st := capture.Stats()
	fmt.Println("accepted", st.Accepted, "dropped", st.Dropped)
	// Output:
	// accepted 3 dropped 0
}

// Serve is gyre worker's loop as a library, with a Go function as the
// agent. The handler builds its LLM client from the rollout's own gateway
// URL and key: configuration never goes through the process environment.
func ExampleServe() {
	client, err := flywheel.NewClient("http://127.0.0.1:7070", os.Getenv("GYRE_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	agent := flywheel.HandlerFunc(func(ctx context.Context, r *flywheel.Rollout) (flywheel.RolloutOutput, error) {
		rec := flywheel.NewRecorder()
		// … call the model at r.Request.LLMURL with r.Request.APIKey, run
		// tools, record them with rec, write files to r.ArtifactsDir …
		answer := "Your order has shipped."
		rep := rec.Report(answer)
		return flywheel.RolloutOutput{
			FinalText:    answer,
			ToolCalls:    rep.ToolCalls,
			LLMCallCount: rep.LLMCallCount,
		}, nil
	})
	ctx, stop := context.WithCancel(context.Background()) // cancel to drain and stop
	defer stop()
	err = flywheel.Serve(ctx, flywheel.ServeConfig{
		Client: client, AgentID: "support-bot", Concurrency: 4, Root: "./gyre-worker",
	}, agent)
	if err != nil {
		log.Fatal(err)
	}
}
