package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/gateway"
)

// exported is one dataset of each format built from the agent's rollouts:
// its lines and its manifest.
type exported struct {
	lines    map[dataset.Format][][]byte
	manifest map[dataset.Format]dataset.Manifest
}

func (h *harness) exportAll(selected int) exported {
	h.t.Helper()
	out := exported{lines: map[dataset.Format][][]byte{}, manifest: map[dataset.Format]dataset.Manifest{}}
	b := build.New(h.st, h.blobs, nil)
	for _, f := range dataset.Formats {
		d := h.createDataset(b, fmt.Sprintf(`{"agent_id":"agent-1","format":%q}`, f))
		if d.State != "ready" || d.RolloutsSelected != selected {
			h.t.Fatalf("%s: dataset %+v, want ready with %d rollouts", f, d, selected)
		}
		file := h.mustJSON(http.MethodGet, "/api/v1/datasets/"+d.ID+"/file", h.admin, "", http.StatusOK)
		out.lines[f] = lines(file.body)
		var m dataset.Manifest
		if err := json.Unmarshal(d.Manifest, &m); err != nil {
			h.t.Fatal(err)
		}
		out.manifest[f] = m
	}
	return out
}

// chatRoles are the roles of an sft row's messages.
func chatRoles(t *testing.T, row []byte) []string {
	t.Helper()
	var r struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(row, &r); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range r.Messages {
		roles = append(roles, m.Role)
	}
	return roles
}

// rlTurns are the turns of an rl row, by rollout id.
type rlTurn struct {
	Seq             int               `json:"seq"`
	Protocol        string            `json:"protocol"`
	RequestMessages []json.RawMessage `json:"request_messages"`
	Tools           json.RawMessage   `json:"tools"`
	ResponseMessage json.RawMessage   `json:"response_message"`
}

func rlTurns(t *testing.T, rows [][]byte) map[string][]rlTurn {
	t.Helper()
	out := map[string][]rlTurn{}
	for _, row := range rows {
		var r struct {
			RolloutID string   `json:"rollout_id"`
			Turns     []rlTurn `json:"turns"`
		}
		if err := json.Unmarshal(row, &r); err != nil {
			t.Fatal(err)
		}
		out[r.RolloutID] = r.Turns
	}
	return out
}

// checkChatFormats checks what every protocol's export must hold: one sft
// row, the tool loop of rollout a, passing OpenAI's format checks; one
// dpo pair, a over c; an atif document each for a and c; the rollout
// whose answer holds an item chat cannot carry counted under
// protocol_item_not_exportable:<item> by sft, dpo and atif (rl exports it).
func checkChatFormats(t *testing.T, e exported, a, c, item string) {
	t.Helper()
	reason := "protocol_item_not_exportable:" + item
	sft := e.lines[dataset.FormatSFT]
	if len(sft) != 1 {
		t.Fatalf("sft: %d rows, want 1", len(sft))
	}
	if roles := chatRoles(t, sft[0]); !slices.Equal(roles, []string{"system", "user", "assistant", "tool", "assistant"}) {
		t.Errorf("sft row roles %v: %s", roles, sft[0])
	}
	if err := dataset.ValidateChat(sft[0]); err != nil {
		t.Errorf("sft row fails OpenAI's format checks: %v\n%s", err, sft[0])
	}
	dpo := e.lines[dataset.FormatDPO]
	if len(dpo) != 1 {
		t.Fatalf("dpo: %d rows, want 1: %v", len(dpo), e.manifest[dataset.FormatDPO])
	}
	if err := dataset.ValidatePreference(dpo[0]); err != nil {
		t.Errorf("dpo row fails OpenAI's preference checks: %v\n%s", err, dpo[0])
	}
	docs := e.lines[dataset.FormatATIF]
	if len(docs) != 2 {
		t.Fatalf("atif: %d documents, want 2", len(docs))
	}
	var sessions []string
	for _, doc := range docs {
		if err := atif.Validate(doc); err != nil {
			t.Errorf("atif document fails gyre's validator: %v", err)
		}
		var d struct {
			SessionID string `json:"session_id"`
		}
		_ = json.Unmarshal(doc, &d)
		sessions = append(sessions, d.SessionID)
	}
	want := []string{a, c}
	slices.Sort(want)
	if !slices.Equal(sessions, want) {
		t.Errorf("atif documents of %v, want %v", sessions, want)
	}
	for _, f := range []dataset.Format{dataset.FormatSFT, dataset.FormatDPO, dataset.FormatATIF} {
		if n := e.manifest[f].NotExportedByReason[reason]; n != 1 {
			t.Errorf("%s manifest counts %d under %s: %+v", f, n, reason, e.manifest[f].NotExportedByReason)
		}
	}
	if m := e.manifest[dataset.FormatRL]; m.RolloutsExported != 3 || len(m.NotExportedByReason) != 0 {
		t.Errorf("rl manifest: exported %d, not exported %v; want all 3", m.RolloutsExported, m.NotExportedByReason)
	}
}

// trajectory answers GET /rollouts/{id}/trajectory.
func (h *harness) trajectory(id string, status int) response {
	h.t.Helper()
	return h.mustJSON(http.MethodGet, "/api/v1/rollouts/"+id+"/trajectory", h.admin, "", status)
}

// TestDownstream_ResponsesTrafficExportsAsChatAndRLKeepsItsNativeTurns:
// rollouts made with openai-go's Responses client — a tool loop chained
// by previous_response_id, a direct answer, and an answer holding a
// reasoning item — export to sft, dpo and atif converted to chat (the
// chained call carries the whole conversation), the reasoning rollout is
// left out of those formats with protocol_item_not_exportable:reasoning,
// rl keeps every turn's Responses items with "protocol":"responses", and
// trajectories convert the same way (409 for the reasoning rollout).
func TestDownstream_ResponsesTrafficExportsAsChatAndRLKeepsItsNativeTurns(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h, stub := newResponsesHarness(t, eng, harnessOpts{})
		stub.configure("refund issued", "", false)
		ctx := context.Background()
		tools := []responses.ToolUnionParam{lookupTool()}
		user := responses.ResponseInputItemParamOfMessage("refund order 7", responses.EasyInputMessageRoleUser)
		input := responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{user}}

		// a: a tool loop, its second turn chained by previous_response_id.
		a := h.rollout(`,"policy":"pr","group_size":2`)
		cl := h.client(a)
		first, err := cl.Responses.New(ctx, responses.ResponseNewParams{Model: "m", Instructions: openai.String("be terse"),
			Input: input, Tools: tools})
		if err != nil || len(first.Output) != 1 || first.Output[0].Type != "function_call" {
			t.Fatalf("first turn %+v %v", first, err)
		}
		out := responses.ResponseInputItemParamOfFunctionCallOutput(`{"status":"shipped"}`)
		out.OfFunctionCallOutput.CallID = openai.String(first.Output[0].CallID)
		second, err := cl.Responses.New(ctx, responses.ResponseNewParams{Model: "m", Instructions: openai.String("be terse"),
			PreviousResponseID: openai.String(first.ID), Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}},
			Tools: tools})
		if err != nil || second.OutputText() != "refund issued" {
			t.Fatalf("second turn %+v %v", second, err)
		}
		h.submit(a, `{"final_text":"refund issued","llm_call_count":2,
			"tool_calls":[{"name":"lookup_order","outcome":"ok","status_code":200,"tool_call_id":"`+first.Output[0].CallID+`"}]}`)

		// c, in a's group: answers at once, streamed, and fails.
		c := h.claimNext()
		stub.configure("sorry, no", "", false)
		stream := h.client(c).Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "m", Instructions: openai.String("be terse"), Input: input})
		for stream.Next() {
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		h.submit(c, `{"final_text":"sorry, no","llm_call_count":1,"tool_calls":[]}`)

		// b: the upstream answers with a reasoning item before its text.
		h.up.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"resp_r","object":"response","created_at":1700000000,"status":"completed","model":"served-model",
				"output":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"message","id":"msg_r","status":"completed","role":"assistant",
				"content":[{"type":"output_text","text":"refund issued","annotations":[]}]}],"usage":%s}`, responsesUsage)
		})
		b := h.rollout(`,"policy":"pr"`)
		if _, err := h.client(b).Responses.New(ctx, responses.ResponseNewParams{Model: "m", Input: input}); err != nil {
			t.Fatal(err)
		}
		h.submit(b, `{"final_text":"refund issued","llm_call_count":1,"tool_calls":[]}`)
		for _, id := range []string{a.RolloutID, b.RolloutID, c.RolloutID} {
			h.settle(id)
		}

		e := h.exportAll(3)
		checkChatFormats(t, e, a.RolloutID, c.RolloutID, "reasoning")
		var row struct {
			Messages []struct {
				Role       string          `json:"role"`
				Content    json.RawMessage `json:"content"`
				ToolCalls  json.RawMessage `json:"tool_calls"`
				ToolCallID string          `json:"tool_call_id"`
			} `json:"messages"`
			Tools []struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(e.lines[dataset.FormatSFT][0], &row); err != nil {
			t.Fatal(err)
		}
		if string(row.Messages[0].Content) != `"be terse"` || !strings.Contains(string(row.Messages[2].ToolCalls), first.Output[0].CallID) ||
			row.Messages[3].ToolCallID != first.Output[0].CallID || len(row.Tools) != 1 || row.Tools[0].Function.Name != "lookup_order" {
			t.Errorf("sft row is not a's tool loop: %s", e.lines[dataset.FormatSFT][0])
		}

		turns := rlTurns(t, e.lines[dataset.FormatRL])
		ta := turns[a.RolloutID]
		if len(ta) != 2 || ta[0].Protocol != "responses" || ta[1].Protocol != "responses" {
			t.Fatalf("rl turns of a: %+v", ta)
		}
		// The chained turn holds the items previous_response_id stood for,
		// in Responses' own shape, and its answer is the output items.
		var kinds []string
		for _, m := range ta[1].RequestMessages {
			var it struct {
				Type string `json:"type"`
				Role string `json:"role"`
			}
			_ = json.Unmarshal(m, &it)
			kinds = append(kinds, it.Type+"/"+it.Role)
		}
		if !slices.Equal(kinds, []string{"/system", "/user", "function_call/", "function_call_output/"}) ||
			!strings.Contains(string(ta[1].Tools), `"parameters"`) || !strings.HasPrefix(string(ta[1].ResponseMessage), `[{`) {
			t.Errorf("rl turn 2 of a: items %v tools %s response %s", kinds, ta[1].Tools, ta[1].ResponseMessage)
		}
		if tb := turns[b.RolloutID]; len(tb) != 1 || tb[0].Protocol != "responses" || !strings.Contains(string(tb[0].ResponseMessage), `"type":"reasoning"`) {
			t.Errorf("rl keeps b's native answer: %+v", tb)
		}

		doc := h.trajectory(a.RolloutID, http.StatusOK)
		if err := atif.Validate(doc.body); err != nil {
			t.Errorf("a's trajectory: %v", err)
		}
		if !strings.Contains(string(doc.body), "refund issued") || !strings.Contains(string(doc.body), "lookup_order") {
			t.Errorf("a's trajectory lacks its answer or tool call: %s", doc.body)
		}
		if got := decodeError(t, h.trajectory(b.RolloutID, http.StatusConflict)); got.Error.Code != "conflict" ||
			!strings.Contains(got.Error.Message, "protocol_item_not_exportable:reasoning") {
			t.Errorf("b's trajectory: %+v", got)
		}
	})
}

// TestDownstream_MessagesTrafficExportsAsChatAndRLKeepsItsNativeTurns:
// the same with the Anthropic SDK: a tool_use/tool_result loop (the
// second turn streamed), a direct answer, and an answer holding a
// thinking block, left out of the chat formats under
// protocol_item_not_exportable:thinking.
func TestDownstream_MessagesTrafficExportsAsChatAndRLKeepsItsNativeTurns(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h, ant := messagesHarness(t, eng, harnessOpts{})
		ctx := context.Background()
		answer := func(content string) {
			ant.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"id":"msg_x","type":"message","role":"assistant","model":"claude-served","content":%s,
					"stop_reason":"end_turn","stop_sequence":null,"usage":%s}`, content, anthropicUsage)
			})
		}
		ask := anthropic.MessageNewParams{Model: "claude-agent-asked", MaxTokens: 64,
			System:   []anthropic.TextBlockParam{{Text: "You are terse."}},
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))}}

		a := h.rollout(`,"policy":"pm","group_size":2`)
		id := toolLoop(t, h.anthropicClient(a))
		h.submit(a, `{"final_text":"refund: sunny in Paris","llm_call_count":2,
			"tool_calls":[{"name":"weather","outcome":"ok","status_code":200,"tool_call_id":"`+id+`"}]}`)

		c := h.claimNext()
		answer(`[{"type":"text","text":"No idea."}]`)
		clc := h.anthropicClient(c)
		if _, err := clc.Messages.New(ctx, ask); err != nil {
			t.Fatal(err)
		}
		h.submit(c, `{"final_text":"No idea.","llm_call_count":1,"tool_calls":[]}`)

		answer(`[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"text","text":"Sunny."}]`)
		b := h.rollout(`,"policy":"pm"`)
		clb := h.anthropicClient(b)
		if _, err := clb.Messages.New(ctx, ask); err != nil {
			t.Fatal(err)
		}
		h.submit(b, `{"final_text":"refund: sunny","llm_call_count":1,"tool_calls":[]}`)
		for _, r := range []string{a.RolloutID, b.RolloutID, c.RolloutID} {
			h.settle(r)
		}

		e := h.exportAll(3)
		checkChatFormats(t, e, a.RolloutID, c.RolloutID, "thinking")
		var row struct {
			Messages []struct {
				Content    json.RawMessage   `json:"content"`
				ToolCalls  []json.RawMessage `json:"tool_calls"`
				ToolCallID string            `json:"tool_call_id"`
			} `json:"messages"`
			Tools []struct {
				Function struct {
					Name       string          `json:"name"`
					Parameters json.RawMessage `json:"parameters"`
				} `json:"function"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(e.lines[dataset.FormatSFT][0], &row); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(row.Messages[0].Content), "You are terse.") || len(row.Messages[2].ToolCalls) != 1 ||
			row.Messages[3].ToolCallID != id || len(row.Tools) != 1 || row.Tools[0].Function.Name != "weather" ||
			!strings.Contains(string(row.Tools[0].Function.Parameters), `"city"`) {
			t.Errorf("sft row is not a's tool loop: %s", e.lines[dataset.FormatSFT][0])
		}

		turns := rlTurns(t, e.lines[dataset.FormatRL])
		ta := turns[a.RolloutID]
		if len(ta) != 2 || ta[0].Protocol != "messages" || len(ta[1].RequestMessages) != 4 ||
			!strings.Contains(string(ta[1].RequestMessages[3]), `"tool_result"`) || !strings.Contains(string(ta[1].Tools), `"input_schema"`) ||
			!strings.Contains(string(ta[1].ResponseMessage), `"type":"message"`) {
			t.Errorf("rl turns of a are not native Messages turns: %+v", ta)
		}
		if tb := turns[b.RolloutID]; len(tb) != 1 || !strings.Contains(string(tb[0].ResponseMessage), `"type":"thinking"`) {
			t.Errorf("rl keeps b's native answer: %+v", tb)
		}

		doc := h.trajectory(a.RolloutID, http.StatusOK)
		if err := atif.Validate(doc.body); err != nil {
			t.Errorf("a's trajectory: %v", err)
		}
		if !strings.Contains(string(doc.body), "It is sunny in Paris.") || !strings.Contains(string(doc.body), id) {
			t.Errorf("a's trajectory lacks its answer or tool call: %s", doc.body)
		}
		if got := decodeError(t, h.trajectory(b.RolloutID, http.StatusConflict)); !strings.Contains(got.Error.Message, "protocol_item_not_exportable:thinking") {
			t.Errorf("b's trajectory: %+v", got)
		}
	})
}

// emittedVerdicts regrades a rollout with graders reading the calls the
// gateway saw the model emit, and returns the verdicts' pass and reason.
func (h *harness) emittedVerdicts(id, graders string) []string {
	h.t.Helper()
	r := h.mustJSON(http.MethodPost, "/api/v1/rollouts/"+id+"/regrade", h.admin, `{"graders":`+graders+`}`, http.StatusOK)
	var v struct {
		Verdicts []struct {
			Pass   *bool  `json:"pass"`
			Reason string `json:"reason"`
		} `json:"verdicts"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, vd := range v.Verdicts {
		p := "null"
		if vd.Pass != nil {
			p = fmt.Sprint(*vd.Pass)
		}
		out = append(out, p+" "+vd.Reason)
	}
	return out
}

// TestDownstream_EmittedGradersReadTheConvertedTraffic: graders with
// source: emitted read the tool calls the model emitted in Responses and
// Messages answers, converted to chat (a tool the model never called is
// not called); a rollout whose traffic has no chat form leaves the list
// unknown, and they abstain, never fail.
func TestDownstream_EmittedGradersReadTheConvertedTraffic(t *testing.T) {
	t.Parallel()
	forEachEngine(t, func(t *testing.T, eng engine) {
		h, ant := messagesHarness(t, eng, harnessOpts{stubProtocols: []gateway.Protocol{gateway.ProtocolChat, gateway.ProtocolResponses}})
		ctx := context.Background()
		// A Messages tool loop.
		m := h.rollout(`,"policy":"pm"`)
		id := toolLoop(t, h.anthropicClient(m))
		h.submit(m, `{"final_text":"refund: sunny","llm_call_count":2,"tool_calls":[{"name":"weather","outcome":"ok","status_code":200,"tool_call_id":"`+id+`"}]}`)
		// A Messages answer with a thinking block and a tool call.
		ant.set(func(w http.ResponseWriter, r *http.Request, body []byte) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg_t","type":"message","role":"assistant","model":"claude-served","content":[{"type":"thinking","thinking":"hm","signature":"s"},
				{"type":"tool_use","id":"toolu_t","name":"weather","input":{}}],"stop_reason":"tool_use","stop_sequence":null,"usage":%s}`, anthropicUsage)
		})
		th := h.rollout(`,"policy":"pm"`)
		clt := h.anthropicClient(th)
		if _, err := clt.Messages.New(ctx, anthropic.MessageNewParams{Model: "c", MaxTokens: 8,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}); err != nil {
			t.Fatal(err)
		}
		h.submit(th, `{"final_text":"refund","llm_call_count":1,"tool_calls":[]}`)
		// A Responses tool loop on the stub upstream that speaks it.
		stub := &responsesStub{text: "refund issued"}
		h.mustJSON(http.MethodPost, "/api/v1/policies", h.admin, `{"name":"pr2","upstream":"stub","model":"served-model"}`, http.StatusCreated)
		h.up.set(stub.serve)
		r := h.rollout(`,"policy":"pr2"`)
		cl := h.client(r)
		user := responses.ResponseInputItemParamOfMessage("refund order 7", responses.EasyInputMessageRoleUser)
		_, err := cl.Responses.New(ctx, responses.ResponseNewParams{Model: "m",
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{user}}, Tools: []responses.ToolUnionParam{lookupTool()}})
		if err != nil {
			t.Fatal(err)
		}
		h.submit(r, `{"final_text":"refund","llm_call_count":1,"tool_calls":[]}`)
		for _, x := range []string{m.RolloutID, th.RolloutID, r.RolloutID} {
			h.settle(x)
		}

		const graders = `[{"tool_called":{"name":"%s","source":"emitted"}},{"tool_not_called":{"name":"refund","source":"emitted"}}]`
		for _, tc := range []struct {
			name, id, tool string
			want           []string
		}{
			{"messages", m.RolloutID, "weather", []string{"true weather called 1 time(s)", "true refund called 0 time(s)"}},
			{"responses", r.RolloutID, "lookup_order", []string{"true lookup_order called 1 time(s)", "true refund called 0 time(s)"}},
			{"no chat form", th.RolloutID, "weather", []string{"null emitted_tool_calls_not_reported", "null emitted_tool_calls_not_reported"}},
		} {
			if got := h.emittedVerdicts(tc.id, fmt.Sprintf(graders, tc.tool)); !slices.Equal(got, tc.want) {
				t.Errorf("%s: verdicts %q, want %q", tc.name, got, tc.want)
			}
		}

		// A recorded body that is gone leaves the list unknown: the graders
		// abstain and the grading itself does not fail.
		calls, err := h.st.GatewayCalls(ctx, h.tenant.ID, m.RolloutID)
		if err != nil || len(calls) == 0 || calls[0].ResponseBlob == nil {
			t.Fatalf("calls: %+v %v", calls, err)
		}
		if err := h.blobs.Delete(ctx, *calls[0].ResponseBlob); err != nil {
			t.Fatal(err)
		}
		want := []string{"null emitted_tool_calls_not_reported", "null emitted_tool_calls_not_reported"}
		if got := h.emittedVerdicts(m.RolloutID, fmt.Sprintf(graders, "weather")); !slices.Equal(got, want) {
			t.Errorf("body gone: verdicts %q, want %q", got, want)
		}
	})
}
