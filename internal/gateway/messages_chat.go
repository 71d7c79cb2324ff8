package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// MessagesToChat converts a recorded Messages call — the request the agent
// sent and the response message — into chat messages where that is
// lossless (SPEC §6.1): system (a string, or text blocks) becomes a system
// message; a user turn's text becomes a user message (a string as it is,
// text blocks as text parts) and its tool_result blocks role "tool"
// messages answering tool_use_id, placed before the turn's text, as chat
// needs them right after the assistant turn that called; an assistant
// turn's text and tool_use blocks become one assistant message with
// tool_calls (arguments the input's JSON text). Anything else — thinking,
// images, documents, server tools, citations, a tool_result marked
// is_error or holding more than text — returns a *NotExportableError
// naming its type. A block's cache_control is a caching hint, not content,
// and is dropped.
func MessagesToChat(request, response json.RawMessage) (ChatConversation, error) {
	var out ChatConversation
	var req struct {
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(request, &req); err != nil {
		return out, fmt.Errorf("messages request: %w", err)
	}
	var c chatBuilder
	if sys := bytes.TrimSpace(req.System); len(sys) > 0 && string(sys) != "null" {
		content, err := textContent(sys)
		if err != nil {
			return out, err
		}
		c.message("system", content)
	}
	for _, m := range req.Messages {
		if err := c.anthropicTurn(m.Role, m.Content); err != nil {
			return out, err
		}
	}
	c.flush()
	out.Messages = c.msgs
	if len(response) == 0 || string(bytes.TrimSpace(response)) == "null" {
		return out, nil
	}
	var resp struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(response, &resp); err != nil {
		return out, fmt.Errorf("messages response: %w", err)
	}
	var a chatBuilder
	if err := a.anthropicTurn("assistant", resp.Content); err != nil {
		return out, err
	}
	a.flush()
	if len(a.msgs) == 1 {
		out.Completion = a.msgs[0]
	}
	return out, nil
}

// anthropicBlock is what the conversion reads of a content block.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	Citations json.RawMessage `json:"citations"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   *bool           `json:"is_error"`
}

// anthropicTurn adds one Messages turn.
func (c *chatBuilder) anthropicTurn(role string, raw json.RawMessage) error {
	if role != "user" && role != "assistant" {
		return &NotExportableError{ItemType: "message:" + role}
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		if role == "assistant" {
			c.flush()
			c.open = &chatAssistant{content: raw}
			return nil
		}
		c.message("user", raw)
		return nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return fmt.Errorf("messages content: %w", err)
	}
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	var texts []part
	c.flush()
	if role == "assistant" {
		c.open = &chatAssistant{}
	}
	for _, b := range blocks {
		switch {
		case b.Type == "text" && b.Text != nil:
			if len(bytes.TrimSpace(b.Citations)) > 0 && string(bytes.TrimSpace(b.Citations)) != "null" {
				return &NotExportableError{ItemType: "citations"}
			}
			texts = append(texts, part{Type: "text", Text: *b.Text})
		case b.Type == "tool_use" && role == "assistant":
			args := bytes.TrimSpace(b.Input)
			if len(args) == 0 {
				args = []byte("{}")
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, args); err != nil {
				return fmt.Errorf("tool_use input: %w", err)
			}
			tc := chatToolCall{ID: b.ID, Type: "function"}
			tc.Function.Name, tc.Function.Arguments = b.Name, compact.String()
			c.open.toolCalls = append(c.open.toolCalls, tc)
		case b.Type == "tool_result" && role == "user":
			if b.IsError != nil && *b.IsError {
				return &NotExportableError{ItemType: "tool_result:is_error"}
			}
			content := json.RawMessage(`""`)
			if cb := bytes.TrimSpace(b.Content); len(cb) > 0 && string(cb) != "null" {
				var err error
				if content, err = textContent(cb); err != nil {
					return err
				}
			}
			c.msgs = append(c.msgs, mustJSON(struct {
				Role       string          `json:"role"`
				ToolCallID string          `json:"tool_call_id"`
				Content    json.RawMessage `json:"content"`
			}{"tool", b.ToolUseID, content}))
		default:
			return &NotExportableError{ItemType: b.Type}
		}
	}
	if role == "assistant" {
		if len(texts) > 0 {
			c.open.content = mustJSON(texts)
		}
		return nil
	}
	if len(texts) > 0 {
		c.message("user", mustJSON(texts))
	}
	return nil
}

// textContent converts Messages text content — a string, or text blocks —
// to chat content: the string as it is, the blocks as text parts.
func textContent(raw json.RawMessage) (json.RawMessage, error) {
	if raw[0] == '"' {
		return raw, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, fmt.Errorf("messages content: %w", err)
	}
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	out := make([]part, 0, len(blocks))
	for _, b := range blocks {
		if b.Type != "text" || b.Text == nil {
			return nil, &NotExportableError{ItemType: b.Type}
		}
		if len(bytes.TrimSpace(b.Citations)) > 0 && string(bytes.TrimSpace(b.Citations)) != "null" {
			return nil, &NotExportableError{ItemType: "citations"}
		}
		out = append(out, part{Type: "text", Text: *b.Text})
	}
	return mustJSON(out), nil
}
