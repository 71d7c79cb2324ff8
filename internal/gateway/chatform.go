package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ChatBodies returns a recorded call's bodies in chat form, as the chat
// exports (sft, dpo, atif), trajectories and graders read them (SPEC
// §6.1): chat bodies as they are; a Responses or Messages call converted
// by ResponsesToChat or MessagesToChat into a chat request ("messages",
// "tools" and the members chat shares: "model", "parallel_tool_calls")
// and a chat.completion whose one choice holds the answer as an
// assistant message with its finish_reason. A call with an item, content
// part or tool that has no lossless chat form returns a
// *NotExportableError. A Responses request's previous_response_id is
// replaced by the items it resolved to (CallBodies.Resolved).
func ChatBodies(protocol string, b CallBodies) (CallBodies, error) {
	switch Protocol(protocol) {
	case "", ProtocolChat:
		return b, nil
	case ProtocolResponses, ProtocolMessages:
	default:
		return CallBodies{}, fmt.Errorf("no chat form for protocol %q", protocol)
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(b.Request, &req); err != nil {
		return CallBodies{}, fmt.Errorf("%s request: %w", protocol, err)
	}
	var conv ChatConversation
	var tools json.RawMessage
	var finish string
	var err error
	if Protocol(protocol) == ProtocolResponses {
		request := b.Request
		if prev, ok := req["previous_response_id"]; ok && string(prev) != "null" {
			if request, err = withResolvedInput(req, b.Resolved); err != nil {
				return CallBodies{}, err
			}
		}
		if conv, err = ResponsesToChat(request, b.Response); err != nil {
			return CallBodies{}, err
		}
		if tools, err = responsesToolsToChat(req["tools"]); err != nil {
			return CallBodies{}, err
		}
		finish = responsesFinish(b.Response, conv.Completion)
	} else {
		if conv, err = MessagesToChat(b.Request, b.Response); err != nil {
			return CallBodies{}, err
		}
		if tools, err = messagesToolsToChat(req["tools"]); err != nil {
			return CallBodies{}, err
		}
		finish = messagesFinish(b.Response)
	}
	if conv.Completion == nil {
		return CallBodies{}, &NotExportableError{ItemType: "empty_output"}
	}
	chatReq := map[string]json.RawMessage{"messages": mustJSON(conv.Messages)}
	if tools != nil {
		chatReq["tools"] = tools
	}
	for _, k := range []string{"model", "parallel_tool_calls"} {
		if v, ok := req[k]; ok {
			chatReq[k] = v
		}
	}
	choice := struct {
		Index        int             `json:"index"`
		Message      json.RawMessage `json:"message"`
		FinishReason *string         `json:"finish_reason"`
	}{Message: conv.Completion}
	if finish != "" {
		choice.FinishReason = &finish
	}
	resp := map[string]any{"object": "chat.completion", "choices": []any{choice}}
	return CallBodies{Request: mustJSON(chatReq), Forwarded: b.Forwarded, Response: mustJSON(resp)}, nil
}

// withResolvedInput rewrites a Responses request that chains from a
// previous response into one that carries the whole conversation: the
// resolved items, then its own input, and no previous_response_id.
func withResolvedInput(req map[string]json.RawMessage, resolved []json.RawMessage) (json.RawMessage, error) {
	if resolved == nil {
		return nil, &NotExportableError{ItemType: "previous_response"}
	}
	items := append([]json.RawMessage(nil), resolved...)
	switch in := bytes.TrimSpace(req["input"]); {
	case len(in) == 0 || string(in) == "null":
	case in[0] == '"':
		items = append(items, mustJSON(struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}{"user", in}))
	default:
		var own []json.RawMessage
		if err := json.Unmarshal(in, &own); err != nil {
			return nil, fmt.Errorf("responses input: %w", err)
		}
		items = append(items, own...)
	}
	out := make(map[string]json.RawMessage, len(req))
	for k, v := range req {
		out[k] = v
	}
	delete(out, "previous_response_id")
	out["input"] = mustJSON(items)
	return mustJSON(out), nil
}

// chatTool is a chat function tool.
type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description *string         `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// responsesToolsToChat converts Responses function tools to chat's; a
// built-in tool (web_search, file_search, …) has no chat form.
func responsesToolsToChat(raw json.RawMessage) (json.RawMessage, error) {
	if isNullJSON(raw) {
		return nil, nil
	}
	var tools []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description *string         `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	}
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, fmt.Errorf("responses tools: %w", err)
	}
	out := make([]chatTool, len(tools))
	for i, t := range tools {
		if t.Type != "function" {
			return nil, &NotExportableError{ItemType: "tool:" + t.Type}
		}
		out[i] = chatTool{Type: "function", Function: chatFunction{Name: t.Name, Description: t.Description,
			Parameters: nullAsAbsent(t.Parameters), Strict: t.Strict}}
	}
	return mustJSON(out), nil
}

// messagesToolsToChat converts Messages client tools (name, description,
// input_schema) to chat function tools; a server tool (one with a type
// other than custom, such as web_search_20250305) has no chat form.
func messagesToolsToChat(raw json.RawMessage) (json.RawMessage, error) {
	if isNullJSON(raw) {
		return nil, nil
	}
	var tools []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description *string         `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, fmt.Errorf("messages tools: %w", err)
	}
	out := make([]chatTool, len(tools))
	for i, t := range tools {
		if t.Type != "" && t.Type != "custom" {
			return nil, &NotExportableError{ItemType: "tool:" + t.Type}
		}
		out[i] = chatTool{Type: "function", Function: chatFunction{Name: t.Name, Description: t.Description,
			Parameters: nullAsAbsent(t.InputSchema)}}
	}
	return mustJSON(out), nil
}

// responsesFinish is chat's finish_reason for a Responses answer: tool
// calls when the assistant message calls tools, length when the response
// is incomplete, else stop.
func responsesFinish(response, completion json.RawMessage) string {
	var m struct {
		ToolCalls []json.RawMessage `json:"tool_calls"`
	}
	_ = json.Unmarshal(completion, &m) // the converter built it
	if len(m.ToolCalls) > 0 {
		return "tool_calls"
	}
	var r struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(response, &r) // converted already, so it is JSON
	if r.Status == "incomplete" {
		return "length"
	}
	return "stop"
}

// messagesFinish is chat's finish_reason for a Messages stop_reason; ""
// for one chat has no name for.
func messagesFinish(response json.RawMessage) string {
	var r struct {
		StopReason string `json:"stop_reason"`
	}
	_ = json.Unmarshal(response, &r) // converted already, so it is JSON
	switch r.StopReason {
	case "end_turn", "stop_sequence":
		return "stop"
	case "tool_use":
		return "tool_calls"
	case "max_tokens":
		return "length"
	}
	return ""
}

func isNullJSON(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func nullAsAbsent(raw json.RawMessage) json.RawMessage {
	if isNullJSON(raw) {
		return nil
	}
	return raw
}

// NativeTurn is a recorded Responses or Messages call in its own
// protocol's terms, as the rl format keeps it (SPEC §9): the prompt's
// items, the tools and the answer.
type NativeTurn struct {
	// Items are the prompt. Responses: the instructions as a system
	// message item, the items a previous_response_id resolved to, then
	// the input (a string input as one user message item). Messages: the
	// system prompt as a leading {"role":"system","content"} entry, then
	// the messages.
	Items []json.RawMessage
	// Tools is the request's tools array as sent, nil when absent.
	Tools json.RawMessage
	// Response is the answer: Responses' output item array, Messages'
	// message object.
	Response json.RawMessage
}

// Native returns a Responses or Messages call's NativeTurn.
func Native(protocol string, b CallBodies) (NativeTurn, error) {
	var out NativeTurn
	var req map[string]json.RawMessage
	if err := json.Unmarshal(b.Request, &req); err != nil {
		return out, fmt.Errorf("%s request: %w", protocol, err)
	}
	out.Tools = nullAsAbsent(req["tools"])
	system := func(content json.RawMessage) {
		out.Items = append(out.Items, mustJSON(struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}{"system", content}))
	}
	switch Protocol(protocol) {
	case ProtocolResponses:
		if in := req["instructions"]; !isNullJSON(in) {
			system(in)
		}
		out.Items = append(out.Items, b.Resolved...)
		switch in := bytes.TrimSpace(req["input"]); {
		case len(in) == 0 || string(in) == "null":
		case in[0] == '"':
			out.Items = append(out.Items, mustJSON(struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			}{"user", in}))
		default:
			var own []json.RawMessage
			if err := json.Unmarshal(in, &own); err != nil {
				return out, fmt.Errorf("responses input: %w", err)
			}
			out.Items = append(out.Items, own...)
		}
		var resp struct {
			Output json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(b.Response, &resp); err != nil {
			return out, fmt.Errorf("responses response: %w", err)
		}
		out.Response = nullAsAbsent(resp.Output)
	case ProtocolMessages:
		if s := req["system"]; !isNullJSON(s) {
			system(s)
		}
		var msgs []json.RawMessage
		if m := req["messages"]; !isNullJSON(m) {
			if err := json.Unmarshal(m, &msgs); err != nil {
				return out, fmt.Errorf("messages request: %w", err)
			}
		}
		out.Items = append(out.Items, msgs...)
		out.Response = nullAsAbsent(b.Response)
	default:
		return out, fmt.Errorf("no native turn for protocol %q", protocol)
	}
	if out.Items == nil {
		out.Items = []json.RawMessage{}
	}
	return out, nil
}
