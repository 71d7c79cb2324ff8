package atif

import (
	"bytes"
	"encoding/json"
)

// The chat message roles of the OpenAI Chat Completions API.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// ChatMessage is one OpenAI Chat Completions message. It encodes in the
// API's wire shape: content is a string, an array of parts, or null (an
// assistant message that only calls tools); tool call arguments are a
// JSON-encoded string.
type ChatMessage struct {
	// Role is RoleSystem, RoleUser, RoleAssistant or RoleTool.
	Role string
	// Content is the text content.
	Content string
	// Parts, when non-nil, is multimodal content and replaces Content.
	Parts []ChatPart
	// ReasoningContent is the assistant's reasoning, written as the
	// reasoning_content member that vLLM, DeepSeek and others use; omitted
	// when empty.
	ReasoningContent string
	// ToolCalls are the assistant's tool calls.
	ToolCalls []ChatToolCall
	// ToolCallID is the call a tool message answers.
	ToolCallID string
}

// ChatPart is one part of multimodal content: {"type":"text","text":…}
// or {"type":"image_url","image_url":{"url":…}}.
type ChatPart struct {
	// Type is "text" or "image_url".
	Type string `json:"type"`
	// Text is a text part's text.
	Text string `json:"text,omitempty"`
	// ImageURL is an image part's location.
	ImageURL *ChatImageURL `json:"image_url,omitempty"`
}

// ChatImageURL locates an image part's image.
type ChatImageURL struct {
	// URL is the image's URL, or the path ATIF recorded (relative to the
	// trajectory file) when it is not a URL.
	URL string `json:"url"`
}

// ChatToolCall is one tool call of an assistant message.
type ChatToolCall struct {
	// ID is the call's id (ATIF's tool_call_id).
	ID string `json:"id"`
	// Type is always "function".
	Type string `json:"type"`
	// Function names the function and carries its arguments.
	Function ChatFunction `json:"function"`
}

// ChatFunction is the function a tool call invokes.
type ChatFunction struct {
	// Name is the function's name.
	Name string `json:"name"`
	// Arguments is the argument object as a JSON-encoded string.
	Arguments string `json:"arguments"`
}

// MarshalJSON writes m in the Chat Completions wire shape.
func (m ChatMessage) MarshalJSON() ([]byte, error) {
	type wire struct {
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		ReasoningContent string          `json:"reasoning_content,omitempty"`
		ToolCalls        []ChatToolCall  `json:"tool_calls,omitempty"`
		ToolCallID       string          `json:"tool_call_id,omitempty"`
	}
	w := wire{Role: m.Role, ReasoningContent: m.ReasoningContent, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
	var err error
	switch {
	case m.Parts != nil:
		w.Content, err = json.Marshal(m.Parts)
	case m.Content == "" && m.Role == RoleAssistant && len(m.ToolCalls) > 0:
		w.Content = json.RawMessage("null")
	default:
		w.Content, err = json.Marshal(m.Content)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(w)
}

// ToChat converts the root trajectory of t into OpenAI chat messages, for
// replay or supervised fine-tuning. Embedded subagent trajectories are not
// included (convert each on its own), and steps marked is_copied_context
// are dropped.
//
// Each step becomes, in order:
//   - system step: a system message with the step's message;
//   - user step: a user message;
//   - agent step: an assistant message with the step's message, reasoning
//     and tool calls (arguments JSON-encoded as the API expects).
//
// Then, for any step, each observation result becomes a tool message when
// it answers a tool call (source_call_id set), or a user message when it
// does not (the environment's output fed back to the model, as
// Terminus-2's keystroke observations are); results with no content
// (subagent references only) are skipped. Image parts become image_url
// parts whose URL is the recorded path.
func ToChat(t *Trajectory) []ChatMessage {
	var out []ChatMessage
	for i := range t.Steps {
		s := &t.Steps[i]
		if s.Copied() {
			continue
		}
		msg := chatContent(ChatMessage{}, s.Message)
		switch s.Source {
		case SourceSystem:
			msg.Role = RoleSystem
		case SourceUser:
			msg.Role = RoleUser
		default:
			msg.Role = RoleAssistant
			if s.ReasoningContent != nil {
				msg.ReasoningContent = *s.ReasoningContent
			}
			for _, tc := range s.ToolCalls {
				msg.ToolCalls = append(msg.ToolCalls, ChatToolCall{
					ID:       tc.ToolCallID,
					Type:     "function",
					Function: ChatFunction{Name: tc.FunctionName, Arguments: compactJSON(tc.Arguments)},
				})
			}
		}
		out = append(out, msg)
		if s.Observation == nil {
			continue
		}
		for _, r := range s.Observation.Results {
			switch {
			case r.SourceCallID != nil:
				m := ChatMessage{Role: RoleTool, ToolCallID: *r.SourceCallID}
				if r.Content != nil {
					m = chatContent(m, *r.Content)
				}
				out = append(out, m)
			case r.Content != nil:
				out = append(out, chatContent(ChatMessage{Role: RoleUser}, *r.Content))
			}
		}
	}
	return out
}

// chatContent sets the content of m from an ATIF message or result.
func chatContent(m ChatMessage, c Content) ChatMessage {
	if !c.IsParts() {
		m.Content = c.Text
		return m
	}
	m.Parts = []ChatPart{}
	for _, p := range c.Parts {
		switch {
		case p.Type == PartText && p.Text != nil:
			m.Parts = append(m.Parts, ChatPart{Type: "text", Text: *p.Text})
		case p.Type == PartImage && p.Source != nil:
			m.Parts = append(m.Parts, ChatPart{Type: "image_url", ImageURL: &ChatImageURL{URL: p.Source.Path}})
		}
	}
	return m
}

// compactJSON returns raw without insignificant white space, or "{}" when
// raw is empty.
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "{}"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
