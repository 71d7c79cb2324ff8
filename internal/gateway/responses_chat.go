package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// NotExportablePrefix starts the reason a call with an item chat cannot
// carry is left out of the chat formats: the reason is the prefix and the
// item's type (SPEC §6.1).
const NotExportablePrefix = "protocol_item_not_exportable:"

// NotExportableError says a Responses or Messages item has no lossless
// chat form.
type NotExportableError struct {
	// ItemType is the item's (or content part's) type, e.g. reasoning,
	// input_image.
	ItemType string
}

func (e *NotExportableError) Error() string {
	return fmt.Sprintf("a %s item has no lossless chat form", e.ItemType)
}

// Reason is the exclusion reason, protocol_item_not_exportable:<type>.
func (e *NotExportableError) Reason() string { return NotExportablePrefix + e.ItemType }

// ChatConversation is a Responses call as chat messages.
type ChatConversation struct {
	// Messages are the prompt: the instructions as a system message, then
	// the input.
	Messages []json.RawMessage
	// Completion is the answer as one assistant message, nil when the
	// response had no output.
	Completion json.RawMessage
}

// ResponsesToChat converts a recorded Responses call — the request the
// agent sent and the response — into chat messages where that is
// lossless: instructions become a system message, a string input a user
// message, message items messages of their role (text content as a string
// or text parts, as sent), function_call items an assistant message's
// tool_calls (consecutive ones, and the text before them, in one
// message), function_call_output items role "tool" messages. Any other
// item or content part (reasoning, images, files, built-in tool calls,
// item references, annotated text) returns a *NotExportableError naming
// its type. A previous_response_id is not resolved here: a request that
// has one is not exportable by itself (type previous_response).
func ResponsesToChat(request, response json.RawMessage) (ChatConversation, error) {
	var out ChatConversation
	var req struct {
		Instructions *string         `json:"instructions"`
		Input        json.RawMessage `json:"input"`
		Previous     *string         `json:"previous_response_id"`
	}
	if err := json.Unmarshal(request, &req); err != nil {
		return out, fmt.Errorf("responses request: %w", err)
	}
	if req.Previous != nil && *req.Previous != "" {
		return out, &NotExportableError{ItemType: "previous_response"}
	}
	var c chatBuilder
	if req.Instructions != nil {
		c.message("system", mustJSON(*req.Instructions))
	}
	switch in := bytes.TrimSpace(req.Input); {
	case len(in) == 0 || string(in) == "null":
	case in[0] == '"':
		c.message("user", in)
	default:
		var items []json.RawMessage
		if err := json.Unmarshal(in, &items); err != nil {
			return out, fmt.Errorf("responses input: %w", err)
		}
		for _, it := range items {
			if err := c.item(it); err != nil {
				return out, err
			}
		}
	}
	c.flush()
	out.Messages = c.msgs
	if len(response) == 0 || string(bytes.TrimSpace(response)) == "null" {
		return out, nil
	}
	var resp struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(response, &resp); err != nil {
		return out, fmt.Errorf("responses response: %w", err)
	}
	var a chatBuilder
	for _, it := range resp.Output {
		if err := a.item(it); err != nil {
			return out, err
		}
	}
	a.flush()
	switch len(a.msgs) {
	case 0:
	case 1:
		out.Completion = a.msgs[0]
	default:
		// Output items that are not one assistant turn (a message after
		// a tool call) have no single chat completion.
		return out, &NotExportableError{ItemType: "output_sequence"}
	}
	return out, nil
}

// chatBuilder collects chat messages, merging an assistant's text and the
// function calls that follow it into one message.
type chatBuilder struct {
	msgs []json.RawMessage
	// open is the assistant message being built, if any.
	open *chatAssistant
}

type chatAssistant struct {
	content   json.RawMessage // nil: null
	toolCalls []chatToolCall
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v) // strings and gyre's own types always marshal
	return b
}

func (c *chatBuilder) flush() {
	if c.open == nil {
		return
	}
	m := struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []chatToolCall  `json:"tool_calls,omitempty"`
	}{Role: "assistant", Content: c.open.content, ToolCalls: c.open.toolCalls}
	if m.Content == nil {
		m.Content = json.RawMessage("null")
	}
	c.msgs = append(c.msgs, mustJSON(m))
	c.open = nil
}

func (c *chatBuilder) message(role string, content json.RawMessage) {
	c.flush()
	c.msgs = append(c.msgs, mustJSON(struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}{role, content}))
}

// item adds one Responses item.
func (c *chatBuilder) item(raw json.RawMessage) error {
	var it struct {
		Type      string          `json:"type"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Arguments string          `json:"arguments"`
		Output    json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(raw, &it); err != nil {
		return fmt.Errorf("responses item: %w", err)
	}
	switch it.Type {
	case "", "message":
		content, err := chatContent(it.Content)
		if err != nil {
			return err
		}
		switch it.Role {
		case "assistant":
			c.flush()
			c.open = &chatAssistant{content: content}
		case "user", "system", "developer":
			c.message(it.Role, content)
		default:
			return &NotExportableError{ItemType: "message:" + it.Role}
		}
	case "function_call":
		if c.open == nil {
			c.open = &chatAssistant{}
		}
		tc := chatToolCall{ID: it.CallID, Type: "function"}
		tc.Function.Name, tc.Function.Arguments = it.Name, it.Arguments
		c.open.toolCalls = append(c.open.toolCalls, tc)
	case "function_call_output":
		content, err := chatContent(it.Output)
		if err != nil {
			return err
		}
		c.flush()
		c.msgs = append(c.msgs, mustJSON(struct {
			Role       string          `json:"role"`
			ToolCallID string          `json:"tool_call_id"`
			Content    json.RawMessage `json:"content"`
		}{"tool", it.CallID, content}))
	default:
		return &NotExportableError{ItemType: it.Type}
	}
	return nil
}

// chatContent converts Responses content — a string, or text parts — to
// chat content: the string as it is, text parts as chat text parts (a
// refusal as a refusal part).
func chatContent(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] == '"' {
		if len(raw) == 0 {
			return json.RawMessage(`""`), nil
		}
		return raw, nil
	}
	var parts []struct {
		Type        string            `json:"type"`
		Text        *string           `json:"text"`
		Refusal     *string           `json:"refusal"`
		Annotations []json.RawMessage `json:"annotations"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, fmt.Errorf("responses content: %w", err)
	}
	type part struct {
		Type    string  `json:"type"`
		Text    *string `json:"text,omitempty"`
		Refusal *string `json:"refusal,omitempty"`
	}
	out := make([]part, 0, len(parts))
	for _, p := range parts {
		switch {
		case (p.Type == "input_text" || p.Type == "output_text") && p.Text != nil && len(p.Annotations) == 0:
			out = append(out, part{Type: "text", Text: p.Text})
		case p.Type == "output_text" && len(p.Annotations) > 0:
			return nil, &NotExportableError{ItemType: "annotation"}
		case p.Type == "refusal" && p.Refusal != nil:
			out = append(out, part{Type: "refusal", Refusal: p.Refusal})
		default:
			return nil, &NotExportableError{ItemType: p.Type}
		}
	}
	return mustJSON(out), nil
}
