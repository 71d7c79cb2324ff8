package desk

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Rules is the offline policy: a deterministic support-desk script. It
// finds the order number in the customer's message (attached files
// included), looks the order up, refunds it when asked and allowed, and
// answers. Its turns are marked deterministic (ATIF llm_call_count 0).
//
// It is deliberately naive: it reads the first order number only, and any
// mention of a refund or damage as a request for one, even a negated one.
type Rules struct{}

var (
	orderNumber  = regexp.MustCompile(`(?i)(?:order\s*(?:number|no\.?|#)?\s*:?\s*#?|#)(\d{3,})`)
	bareNumber   = regexp.MustCompile(`\b(\d{4,})\b`)
	refundIntent = regexp.MustCompile(`(?i)\b(refund|money back|reimburse|broken|damaged|defective|cracked|return)`)
)

// Next decides from the last user message and the tool results so far.
func (Rules) Next(_ context.Context, _ string, history []Message) (Turn, error) {
	var user string
	results := map[string]map[string]any{} // tool name -> last result
	calls := map[string]string{}           // tool call id -> tool name
	for _, m := range history {
		switch m.Role {
		case "user":
			user = m.Content
		case "assistant":
			for _, c := range m.ToolCalls {
				calls[c.ID] = c.Name
			}
		case "tool":
			var r map[string]any
			if json.Unmarshal([]byte(m.Content), &r) == nil {
				results[calls[m.ToolCallID]] = r
			}
		}
	}
	say := func(format string, args ...any) (Turn, error) {
		return Turn{Text: fmt.Sprintf(format, args...), Deterministic: true}, nil
	}
	call := func(name string, args map[string]string) (Turn, error) {
		b, _ := json.Marshal(args)
		id := fmt.Sprintf("call_%d", len(calls)+1)
		return Turn{Calls: []ToolCall{{ID: id, Name: name, Args: b}}, Deterministic: true}, nil
	}

	id := findOrder(user)
	if id == "" {
		return say("I'm happy to help. Could you tell me your order number?")
	}
	wantsRefund := refundIntent.MatchString(user)
	found, looked := results["lookup_order"]
	switch {
	case !looked:
		return call("lookup_order", map[string]string{"order_id": id})
	case found["error"] != nil:
		return say("I couldn't find order %s. Could you double-check the number?", id)
	}
	if r, ok := results["issue_refund"]; ok {
		if msg, failed := r["error"].(string); failed {
			return say("I'm sorry, I could not refund order %s: %s.", id, msg)
		}
		return say("I'm sorry your %s arrived in that state. I've refunded %s for order %s to your original payment method (refund %s); the receipt is attached.",
			strings.ToLower(str(found["item"])), str(r["amount"]), id, str(r["refund_id"]))
	}
	status, item := str(found["status"]), str(found["item"])
	switch {
	case !wantsRefund:
		return say("Order %s (%s) is %s.", id, item, status)
	case found["refunded"] == true:
		return say("Order %s (%s) has already been refunded; you should see %s back on your original payment method.", id, item, str(found["amount"]))
	case status != "delivered":
		return say("Order %s (%s) is still %s, so it can't be refunded yet. Once it is delivered, contact us again if anything is wrong with it.", id, item, status)
	default:
		return call("issue_refund", map[string]string{"order_id": id, "reason": reason(user)})
	}
}

// findOrder returns the first order number in text: one introduced as an
// order number, else the first bare number of four or more digits.
func findOrder(text string) string {
	if m := orderNumber.FindStringSubmatch(text); m != nil {
		return m[1]
	}
	if m := bareNumber.FindStringSubmatch(text); m != nil {
		return m[1]
	}
	return ""
}

// reason summarises why the customer wants a refund.
func reason(text string) string {
	if m := refundIntent.FindString(text); m != "" {
		switch strings.ToLower(m) {
		case "broken", "damaged", "defective", "cracked":
			return "arrived " + strings.ToLower(m)
		}
	}
	return "customer request"
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
