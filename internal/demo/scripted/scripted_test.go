package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/gyrehq/gyre/internal/demo/scripted"
)

func newClient(t *testing.T) openai.Client {
	t.Helper()
	srv := httptest.NewServer(scripted.NewHandler())
	t.Cleanup(srv.Close)
	return openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

// orders is a stand-in for the example agent's order system: enough for
// the tools to succeed and fail, and to meet trouble, as the agent's do.
type orders map[string]string

func (o orders) run(name string, args map[string]any) map[string]any {
	id, _ := args["order_id"].(string)
	st, ok := o[id]
	if !ok {
		return map[string]any{"error": id + ": order not found"}
	}
	for _, x := range scripted.TroubleOrders {
		switch {
		case x.ID != id:
		case x.Trouble == scripted.TroubleBackendUnavailable:
			return map[string]any{"error": id + ": order backend unavailable", "unavailable": true}
		case x.Trouble == scripted.TroublePaymentTimeout && name == "issue_refund":
			return map[string]any{"error": "refund of " + id + ": payment provider timed out", "refund": "unconfirmed"}
		}
	}
	switch name {
	case "cancel_order":
		if st != "processing" {
			return map[string]any{"error": "cannot cancel " + id + ", it is " + st}
		}
		o[id] = "cancelled"
	case "issue_refund":
		if st != "delivered" {
			return map[string]any{"error": "cannot refund " + id}
		}
		return map[string]any{"id": id, "status": st, "refund_id": "rf_" + id + "_0001"}
	}
	return map[string]any{"id": id, "status": o[id], "item": "thing"}
}

func tools() []openai.ChatCompletionToolUnionParam {
	var out []openai.ChatCompletionToolUnionParam
	for _, n := range []string{"lookup_order", "cancel_order", "issue_refund"} {
		out = append(out, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: n,
			Parameters: shared.FunctionParameters{"type": "object"}}))
	}
	return out
}

// converse runs the tool loop an agent runs and returns the tools called,
// in order, and the final answer.
func converse(t *testing.T, c openai.Client, model, question string, stream bool) ([]string, string) {
	t.Helper()
	ctx := context.Background()
	o := orders{}
	for _, x := range scripted.Orders {
		o[x.ID] = x.Status
	}
	for _, x := range scripted.TroubleOrders {
		o[x.ID] = x.Status
	}
	params := openai.ChatCompletionNewParams{Model: model, Tools: tools(),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a support desk."), openai.UserMessage(question)}}
	var called []string
	for range 6 {
		var msg openai.ChatCompletionMessage
		if stream {
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			s := c.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			if acc.Usage.TotalTokens == 0 || acc.Usage.PromptTokens+acc.Usage.CompletionTokens != acc.Usage.TotalTokens {
				t.Errorf("stream usage = %+v", acc.Usage)
			}
			msg = acc.Choices[0].Message
		} else {
			cc, err := c.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if cc.Usage.TotalTokens == 0 || cc.Model != model {
				t.Errorf("usage %+v, model %q", cc.Usage, cc.Model)
			}
			msg = cc.Choices[0].Message
		}
		if len(msg.ToolCalls) == 0 {
			return called, msg.Content
		}
		params.Messages = append(params.Messages, msg.ToParam())
		for _, tc := range msg.ToolCalls {
			if tc.ID == "" {
				t.Errorf("tool call without id: %+v", tc)
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil {
				t.Fatalf("arguments %q: %v", tc.Function.Arguments, err)
			}
			called = append(called, tc.Function.Name)
			b, _ := json.Marshal(o.run(tc.Function.Name, args))
			params.Messages = append(params.Messages, openai.ToolMessage(string(b), tc.ID))
		}
	}
	t.Fatalf("%s kept calling tools on %q: %v", model, question, called)
	return nil, ""
}

// The candidate always looks the order up first and acts only as the
// order's status allows; the base acts on refunds and cancellations
// without looking the order up, and answers status questions correctly.
func TestModels_BehaveAsScripted(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	cases := []struct {
		model, question string
		calls           []string
		answer          string
	}{
		{scripted.Candidate, "Please refund order C3, it arrived broken.", []string{"lookup_order", "issue_refund"}, "refund id rf_C3_0001"},
		{scripted.Candidate, "I want my money back for order A1.", []string{"lookup_order"}, "cannot refund order A1"},
		{scripted.Candidate, "Cancel order B2 please.", []string{"lookup_order", "cancel_order"}, "B2 is cancelled"},
		{scripted.Candidate, "Cancel order A1 please.", []string{"lookup_order"}, "cannot cancel order A1: it is already shipped"},
		{scripted.Candidate, "Where is my order C3?", []string{"lookup_order"}, "C3 (thing) is delivered"},
		{scripted.Candidate, "Hello there", nil, "Which order"},
		{scripted.Base, "Please refund order C3, it arrived broken.", []string{"issue_refund"}, "refund id rf_C3_0001"},
		{scripted.Base, "Can I get a refund on B2? It stopped working.", []string{"issue_refund"}, "could not refund order B2"},
		{scripted.Base, "Cancel order A1 please.", []string{"cancel_order"}, "could not cancel order A1"},
		{scripted.Base, "Could you cancel my order B2?", []string{"cancel_order"}, "B2 is cancelled"},
		{scripted.Base, "Has A1 shipped yet?", []string{"lookup_order"}, "A1 (thing) is shipped"},
		// Infrastructure trouble is said as such, by both models.
		{scripted.Candidate, "Where is my order D4?", []string{"lookup_order"}, "could not look up order D4: the order system is not answering right now, so nothing was changed. Please try again later."},
		{scripted.Candidate, "Cancel order D4 please.", []string{"lookup_order"}, "could not look up order D4: the order system is not answering"},
		{scripted.Base, "Cancel order D4 please.", []string{"cancel_order"}, "could not cancel order D4: the order system is not answering"},
		{scripted.Candidate, "Please refund order E5, it arrived broken.", []string{"lookup_order", "issue_refund"}, "cannot tell yet whether the refund went through"},
		{scripted.Base, "Please refund order E5, it arrived broken.", []string{"issue_refund"}, "cannot tell yet whether the refund went through"},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/%s/stream=%v", tc.model, tc.question, stream), func(t *testing.T) {
				t.Parallel()
				calls, answer := converse(t, c, tc.model, tc.question, stream)
				if !slices.Equal(calls, tc.calls) {
					t.Errorf("calls = %v, want %v", calls, tc.calls)
				}
				if !strings.Contains(answer, tc.answer) {
					t.Errorf("answer = %q, want it to contain %q", answer, tc.answer)
				}
				if !strings.HasPrefix(answer, "["+scripted.Name+"]") {
					t.Errorf("answer = %q does not name the scripted demo model", answer)
				}
			})
		}
	}
}

// Every question the demo may ask gets demo-candidate's correct handling,
// and demo-base's mistake exactly where Question.BaseMistake says: it
// skips lookup_order.
func TestQuestions_BaseMistakeIsWhereDeclared(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	qs := scripted.Questions()
	ids, texts := map[string]bool{}, map[string]bool{}
	mistakes := 0
	for _, q := range qs {
		if ids[q.ID] || texts[q.Text] {
			t.Errorf("question %s repeats", q.ID)
		}
		ids[q.ID], texts[q.Text] = true, true
		if q.BaseMistake {
			mistakes++
		}
		cand, _ := converse(t, c, scripted.Candidate, q.Text, false)
		base, _ := converse(t, c, scripted.Base, q.Text, false)
		if len(cand) == 0 || cand[0] != "lookup_order" {
			t.Errorf("%s: candidate calls %v, want lookup_order first", q.ID, cand)
		}
		if got := !slices.Contains(base, "lookup_order"); got != q.BaseMistake {
			t.Errorf("%s: base calls %v; mistake %v, declared %v", q.ID, base, got, q.BaseMistake)
		}
	}
	if len(qs) < 20 || mistakes < 10 || mistakes == len(qs) {
		t.Errorf("%d questions, %d with a base mistake: want at least 20, with at least 10 mistakes and some without", len(qs), mistakes)
	}
}

// The questions about orders in trouble are distinct from the others,
// name their order's trouble, and keep the models' behaviours: the
// candidate looks up first, the base skips it exactly where BaseMistake
// says. Both kinds of trouble are asked about.
func TestTroubleQuestions_NameTheirTrouble(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	known := map[string]bool{}
	for _, q := range scripted.Questions() {
		known[q.ID], known[q.Text] = true, true
		if q.Trouble != "" {
			t.Errorf("%s: trouble %q among the healthy questions", q.ID, q.Trouble)
		}
	}
	trouble := map[string]scripted.Trouble{}
	for _, o := range scripted.TroubleOrders {
		trouble[o.ID] = o.Trouble
	}
	seen := map[scripted.Trouble]bool{}
	for _, q := range scripted.TroubleQuestions() {
		if known[q.ID] || known[q.Text] {
			t.Errorf("question %s repeats", q.ID)
		}
		known[q.ID], known[q.Text] = true, true
		if q.Trouble == "" || q.Trouble != trouble[q.Order] {
			t.Errorf("%s: trouble %q, order %s has %q", q.ID, q.Trouble, q.Order, trouble[q.Order])
		}
		seen[q.Trouble] = true
		cand, _ := converse(t, c, scripted.Candidate, q.Text, false)
		base, _ := converse(t, c, scripted.Base, q.Text, false)
		if len(cand) == 0 || cand[0] != "lookup_order" {
			t.Errorf("%s: candidate calls %v, want lookup_order first", q.ID, cand)
		}
		if got := !slices.Contains(base, "lookup_order"); got != q.BaseMistake {
			t.Errorf("%s: base calls %v; mistake %v, declared %v", q.ID, base, got, q.BaseMistake)
		}
	}
	if !seen[scripted.TroubleBackendUnavailable] || !seen[scripted.TroublePaymentTimeout] {
		t.Errorf("troubles asked about: %v, want both", seen)
	}
}

// An unknown model is a 404 in OpenAI's shape that names the models served.
func TestUnknownModel_IsAnOpenAI404(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v", err)
	}
	if ae.StatusCode != 404 || ae.Code != "model_not_found" || ae.Param != "model" ||
		!strings.Contains(ae.Message, scripted.Name) || !strings.Contains(ae.Message, scripted.Candidate) {
		t.Errorf("error = %d %q %q %q", ae.StatusCode, ae.Code, ae.Param, ae.Message)
	}
}

// Bad requests are OpenAI-shaped 400s.
func TestBadRequest_IsAnOpenAI400(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: scripted.Base})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "messages" {
		t.Fatalf("err = %v", err)
	}
}

// /v1/models lists both models, owned by the scripted demo model.
func TestModelsList_NamesTheScriptedModel(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	page, err := c.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		if m.OwnedBy != scripted.Name {
			t.Errorf("model %s owned by %q", m.ID, m.OwnedBy)
		}
	}
	if !slices.Equal(ids, scripted.Models) {
		t.Errorf("models = %v", ids)
	}
	if _, err := c.Models.Get(context.Background(), "nope"); err == nil {
		t.Error("GET /v1/models/nope succeeded")
	}
}
