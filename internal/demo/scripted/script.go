package scripted

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The model names the scripted model serves.
const (
	// Base makes a known mistake: it refunds or cancels without looking
	// the order up.
	Base = "demo-base"
	// Candidate looks every order up and acts only as the order allows.
	Candidate = "demo-candidate"
	// Name is what the scripted model calls itself in every output.
	Name = "scripted demo model"
)

// Models are the model names served, in order.
var Models = []string{Base, Candidate}

// message is one chat message as the model reads it.
type message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// text is the message's content as text: a string, or the text parts of
// a list of parts.
func (m message) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// toolRun is a tool call the conversation holds, with its result.
type toolRun struct {
	name   string
	done   bool           // a tool message answered it
	result map[string]any // the tool's JSON result, when an object
}

func (r toolRun) failed() bool { return r.result == nil || r.result["error"] != nil }

// unavailable says the tool could not reach its backend: nothing was read
// or changed.
func (r toolRun) unavailable() bool { return r.result["unavailable"] == true }

// unconfirmed says a refund was sent but not confirmed.
func (r toolRun) unconfirmed() bool { return r.result["refund"] == "unconfirmed" }

func (r toolRun) str(key string) string {
	s, _ := r.result[key].(string)
	return s
}

// reply is the model's next message: text, or one tool call.
type reply struct {
	content  string
	toolName string
	toolArgs map[string]any
	toolID   string
}

// decide is the model: the next message of the conversation, for model.
// It reads the last customer message and the tool calls made since.
func decide(model string, msgs []message) reply {
	last := -1
	for i, m := range msgs {
		if m.Role == "user" {
			last = i
		}
	}
	if last < 0 {
		return answer("Hello! Tell me your order id and whether you want it looked up, cancelled or refunded.")
	}
	order, kind := classify(msgs[last].text())
	runs := map[string]toolRun{}
	byID := map[string]string{}
	steps := 0
	for _, m := range msgs[last+1:] {
		switch m.Role {
		case "assistant":
			steps++
			for _, tc := range m.ToolCalls {
				byID[tc.ID] = tc.Function.Name
				runs[tc.Function.Name] = toolRun{name: tc.Function.Name}
			}
		case "tool":
			name := byID[m.ToolCallID]
			r := toolRun{name: name, done: true}
			_ = json.Unmarshal([]byte(m.text()), &r.result)
			runs[name] = r
		}
	}
	call := func(name string, args map[string]any) reply {
		return reply{toolName: name, toolArgs: args, toolID: fmt.Sprintf("call_%d_%s", steps+1, name)}
	}
	if order == "" || kind == "" {
		return answer("Which order is it about (for example A1), and should I look it up, cancel it or refund it?")
	}
	refundArgs := map[string]any{"order_id": order, "reason": "the customer asked for a refund"}
	lookup := runs["lookup_order"]
	if model == Base && kind != KindStatus {
		// demo-base's mistake: it acts at once, without looking the
		// order up, whatever the order's status.
		action := map[Kind]string{KindRefund: "issue_refund", KindCancel: "cancel_order"}[kind]
		r, ok := runs[action]
		switch {
		case !ok && kind == KindRefund:
			return call(action, refundArgs)
		case !ok:
			return call(action, map[string]any{"order_id": order})
		}
		return actionAnswer(order, kind, r)
	}
	if !lookup.done {
		return call("lookup_order", map[string]any{"order_id": order})
	}
	if lookup.unavailable() {
		return answer(unavailableText("look up", order))
	}
	if lookup.failed() {
		return answer(fmt.Sprintf("I could not find order %s: %s.", order, errText(lookup)))
	}
	status := lookup.str("status")
	switch kind {
	case KindRefund:
		if r, ok := runs["issue_refund"]; ok {
			return actionAnswer(order, kind, r)
		}
		if status != "delivered" {
			return answer(fmt.Sprintf("I cannot refund order %s: it is %s, and only delivered orders can be refunded.", order, status))
		}
		return call("issue_refund", refundArgs)
	case KindCancel:
		if r, ok := runs["cancel_order"]; ok {
			return actionAnswer(order, kind, r)
		}
		if status != "processing" {
			return answer(fmt.Sprintf("I cannot cancel order %s: it is already %s.", order, status))
		}
		return call("cancel_order", map[string]any{"order_id": order})
	}
	return answer(fmt.Sprintf("Your order %s (%s) is %s.", order, lookup.str("item"), status))
}

// actionAnswer reports a refund or a cancellation that ran.
func actionAnswer(order string, kind Kind, r toolRun) reply {
	verb := map[Kind]string{KindRefund: "refund", KindCancel: "cancel"}[kind]
	switch {
	case !r.done:
		return answer(fmt.Sprintf("I could not %s order %s: the tool gave no answer.", verb, order))
	case r.unavailable():
		return answer(unavailableText(verb, order))
	case r.unconfirmed():
		return answer(fmt.Sprintf("I asked the payment provider to refund order %s, but it did not confirm in time: "+
			"I cannot tell yet whether the refund went through, so I will not send a second one.", order))
	case r.failed():
		return answer(fmt.Sprintf("I could not %s order %s: %s.", verb, order, errText(r)))
	case kind == KindRefund:
		return answer(fmt.Sprintf("Order %s is refunded: refund id %s.", order, r.str("refund_id")))
	}
	return answer(fmt.Sprintf("Order %s is cancelled.", order))
}

// unavailableText answers a turn whose order system did not answer.
func unavailableText(verb, order string) string {
	return fmt.Sprintf("I could not %s order %s: the order system is not answering right now, so nothing was changed. Please try again later.", verb, order)
}

func errText(r toolRun) string {
	if s, ok := r.result["error"].(string); ok {
		return s
	}
	return "the tool's answer was not understood"
}

// answer is a final text, signed as what it is.
func answer(s string) reply { return reply{content: "[" + Name + "] " + s} }
