package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gyrehq/gyre/internal/jcs"
)

// The rules of OpenAI's published fine-tuning data formats that
// ValidateChat and ValidatePreference check, as stable codes: a refused
// row is counted under ReasonFormatInvalid + the rule. They follow the
// chat format (a "messages" array of system, developer, user, assistant
// and tool messages, optional "tools" and "parallel_tool_calls", at least
// one assistant message, an optional "weight" of 0 or 1 on assistant
// messages), the preference format ("input" with "messages", and
// "preferred_output" / "non_preferred_output" each one assistant
// message), and the checks of OpenAI's data-preparation guide (no unknown
// message keys, known roles, content present, tool calls well formed with
// JSON-string arguments, every tool message answering an earlier call).
const (
	// RuleNotJSON: the row is not a JSON object (or not valid UTF-8).
	RuleNotJSON = "not_json"
	// RuleUnknownKey: a top-level (or input) member the format lacks.
	RuleUnknownKey = "unknown_key"
	// RuleMissingMessages: no "messages" array, or an empty one.
	RuleMissingMessages = "missing_messages"
	// RuleMessageNotObject: a message is not a JSON object.
	RuleMessageNotObject = "message_not_object"
	// RuleMissingRole: a message has no string "role".
	RuleMissingRole = "missing_role"
	// RuleUnknownRole: a role other than system, developer, user,
	// assistant and tool.
	RuleUnknownRole = "unknown_role"
	// RuleUnknownMessageKey: a message member its role does not have.
	RuleUnknownMessageKey = "unknown_message_key"
	// RuleMissingContent: no content (assistant messages may omit it only
	// when they carry tool_calls).
	RuleMissingContent = "missing_content"
	// RuleInvalidContent: content that is neither a string nor an array of
	// content parts the role allows.
	RuleInvalidContent = "invalid_content"
	// RuleInvalidName: a "name" that is not a string.
	RuleInvalidName = "invalid_name"
	// RuleInvalidWeight: a "weight" other than 0 or 1.
	RuleInvalidWeight = "invalid_weight"
	// RuleNoAssistantMessage: a chat row without an assistant message.
	RuleNoAssistantMessage = "no_assistant_message"
	// RuleToolCallMalformed: tool_calls not a non-empty array of
	// {"id", "type": "function", "function": {"name", "arguments"}} with
	// non-empty string id and name and a string arguments.
	RuleToolCallMalformed = "tool_call_malformed"
	// RuleToolCallArgumentsNotJSON: a tool call's arguments string is not
	// JSON text, as models sometimes emit.
	RuleToolCallArgumentsNotJSON = "tool_call_arguments_not_json"
	// RuleMissingToolCallID: a tool message without a string tool_call_id.
	RuleMissingToolCallID = "missing_tool_call_id"
	// RuleToolCallIDUnknown: a tool message answering no call id of an
	// earlier assistant message in the row.
	RuleToolCallIDUnknown = "tool_call_id_unknown"
	// RuleInvalidTools: "tools" is not an array of function tools.
	RuleInvalidTools = "invalid_tools"
	// RuleInvalidParallelToolCalls: "parallel_tool_calls" is not a boolean.
	RuleInvalidParallelToolCalls = "invalid_parallel_tool_calls"
	// RuleMissingInput: a preference row without an "input" object.
	RuleMissingInput = "missing_input"
	// RuleOutputNotSingleAssistant: a preferred or non-preferred output
	// that is not an array of exactly one assistant message.
	RuleOutputNotSingleAssistant = "output_not_single_assistant"
)

// FormatError is a row that OpenAI's fine-tuning format checks would
// refuse: the rule it breaks and a JSON Pointer to the offending member.
type FormatError struct {
	Rule    string
	Pointer string
	Message string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s%s at %q: %s", ReasonFormatInvalid, e.Rule, e.Pointer, e.Message)
}

// Reason is the manifest reason the error counts under.
func (e *FormatError) Reason() string { return ReasonFormatInvalid + e.Rule }

func refuse(rule, ptr, format string, args ...any) *FormatError {
	return &FormatError{Rule: rule, Pointer: ptr, Message: fmt.Sprintf(format, args...)}
}

// messageKeys are the members each role's message may have.
var messageKeys = map[string]map[string]bool{
	"system":    {"role": true, "content": true, "name": true},
	"developer": {"role": true, "content": true, "name": true},
	"user":      {"role": true, "content": true, "name": true},
	"assistant": {"role": true, "content": true, "name": true, "tool_calls": true, "weight": true},
	"tool":      {"role": true, "content": true, "tool_call_id": true},
}

// ValidateChat checks one row of OpenAI chat fine-tuning JSONL
// ({"messages", "tools"?, "parallel_tool_calls"?}); nil when OpenAI's
// format checks would accept it, else a *FormatError.
func ValidateChat(row []byte) error {
	top, err := document(row)
	if err != nil {
		return err
	}
	for _, k := range sortedMembers(top) {
		if k != "messages" && k != "tools" && k != "parallel_tool_calls" {
			return refuse(RuleUnknownKey, "/"+tok(k), "a chat fine-tuning row has no member %q", k)
		}
	}
	if err := checkRequestExtras(top, ""); err != nil {
		return err
	}
	v := newMessagesCheck()
	if err := v.messages(top["messages"], "/messages"); err != nil {
		return err
	}
	if !v.assistant {
		return refuse(RuleNoAssistantMessage, "/messages", "no assistant message to train on")
	}
	return nil
}

// ValidatePreference checks one row of OpenAI preference fine-tuning JSONL
// ({"input": {"messages", "tools"?, "parallel_tool_calls"?},
// "preferred_output": [one assistant message], "non_preferred_output":
// [one assistant message]}); nil when OpenAI's format checks would accept
// it, else a *FormatError.
func ValidatePreference(row []byte) error {
	top, err := document(row)
	if err != nil {
		return err
	}
	for _, k := range sortedMembers(top) {
		if k != "input" && k != "preferred_output" && k != "non_preferred_output" {
			return refuse(RuleUnknownKey, "/"+tok(k), "a preference row has no member %q", k)
		}
	}
	input, ok := object(top["input"])
	if !ok {
		return refuse(RuleMissingInput, "/input", "input must be an object with messages")
	}
	for _, k := range sortedMembers(input) {
		if k != "messages" && k != "tools" && k != "parallel_tool_calls" {
			return refuse(RuleUnknownKey, "/input/"+tok(k), "a preference input has no member %q", k)
		}
	}
	if err := checkRequestExtras(input, "/input"); err != nil {
		return err
	}
	v := newMessagesCheck()
	if err := v.messages(input["messages"], "/input/messages"); err != nil {
		return err
	}
	for _, k := range []string{"preferred_output", "non_preferred_output"} {
		out, ok := array(top[k])
		if !ok || len(out) != 1 {
			return refuse(RuleOutputNotSingleAssistant, "/"+k, "%s must be an array of exactly one assistant message", k)
		}
		// Each output answers the input on its own: check it against the
		// input's calls, not against the other output's.
		ov := v.fork()
		role, err := ov.message(out[0], "/"+k+"/0")
		if err != nil {
			return err
		}
		if role != "assistant" {
			return refuse(RuleOutputNotSingleAssistant, "/"+k+"/0/role", "%s must be an assistant message, not %q", k, role)
		}
	}
	return nil
}

// document checks that row is one UTF-8 JSON object and returns its
// members. Everything below reads the row in place, trusting this check.
func document(row []byte) (map[string]json.RawMessage, error) {
	if !utf8.Valid(row) || !json.Valid(row) {
		return nil, refuse(RuleNotJSON, "", "not UTF-8 JSON text")
	}
	top, ok := object(row)
	if !ok {
		return nil, refuse(RuleNotJSON, "", "not a JSON object")
	}
	return top, nil
}

// checkRequestExtras checks "tools" and "parallel_tool_calls" of a row or
// an input.
func checkRequestExtras(obj map[string]json.RawMessage, base string) error {
	if raw, ok := obj["parallel_tool_calls"]; ok {
		if !bytes.Equal(raw, []byte("true")) && !bytes.Equal(raw, []byte("false")) {
			return refuse(RuleInvalidParallelToolCalls, base+"/parallel_tool_calls", "parallel_tool_calls must be true or false")
		}
	}
	raw, ok := obj["tools"]
	if !ok {
		return nil
	}
	tools, ok := array(raw)
	if !ok {
		return refuse(RuleInvalidTools, base+"/tools", "tools must be an array")
	}
	for i, t := range tools {
		ptr := base + "/tools/" + strconv.Itoa(i)
		tool, ok := object(t)
		if !ok {
			return refuse(RuleInvalidTools, ptr, `a tool must be {"type": "function", "function": {…}}`)
		}
		typ, _ := str(tool["type"])
		fn, ok := object(tool["function"])
		if typ != "function" || !ok {
			return refuse(RuleInvalidTools, ptr, `a tool must be {"type": "function", "function": {…}}`)
		}
		if name, _ := str(fn["name"]); name == "" {
			return refuse(RuleInvalidTools, ptr+"/function/name", "a function tool needs a non-empty name")
		}
		if p, ok := fn["parameters"]; ok && !isNull(p) {
			if _, ok := object(p); !ok {
				return refuse(RuleInvalidTools, ptr+"/function/parameters", "parameters must be a JSON Schema object")
			}
		}
	}
	return nil
}

// messagesCheck walks a row's messages, remembering the tool call ids
// earlier assistant messages made.
type messagesCheck struct {
	calls     map[string]bool
	assistant bool
}

func newMessagesCheck() *messagesCheck { return &messagesCheck{calls: map[string]bool{}} }

func (v *messagesCheck) fork() *messagesCheck {
	c := &messagesCheck{calls: make(map[string]bool, len(v.calls)), assistant: v.assistant}
	for k := range v.calls {
		c.calls[k] = true
	}
	return c
}

func (v *messagesCheck) messages(raw json.RawMessage, ptr string) error {
	msgs, ok := array(raw)
	if !ok || len(msgs) == 0 {
		return refuse(RuleMissingMessages, ptr, "messages must be a non-empty array")
	}
	for i, m := range msgs {
		if _, err := v.message(m, ptr+"/"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

// message checks one message and returns its role.
func (v *messagesCheck) message(raw json.RawMessage, ptr string) (string, error) {
	m, ok := object(raw)
	if !ok {
		return "", refuse(RuleMessageNotObject, ptr, "a message must be a JSON object")
	}
	role, _ := str(m["role"])
	if role == "" {
		return "", refuse(RuleMissingRole, ptr+"/role", "a message needs a string role")
	}
	keys, ok := messageKeys[role]
	if !ok {
		return "", refuse(RuleUnknownRole, ptr+"/role", "role %q is not system, developer, user, assistant or tool", role)
	}
	for k := range m {
		if !keys[k] {
			// Report the first in name order, the same on every run.
			for _, k := range sortedMembers(m) {
				if !keys[k] {
					return "", refuse(RuleUnknownMessageKey, ptr+"/"+tok(k), "a %s message has no member %q", role, k)
				}
			}
		}
	}
	if raw, ok := m["name"]; ok {
		if _, ok := str(raw); !ok {
			return "", refuse(RuleInvalidName, ptr+"/name", "name must be a string")
		}
	}
	hasCalls := false
	if role == "assistant" {
		v.assistant = true
		if raw, ok := m["weight"]; ok {
			w, err := strconv.ParseFloat(string(raw), 64)
			if err != nil || (w != 0 && w != 1) {
				return "", refuse(RuleInvalidWeight, ptr+"/weight", "weight must be 0 or 1")
			}
		}
		if raw, ok := m["tool_calls"]; ok && !isNull(raw) {
			if err := v.toolCalls(raw, ptr+"/tool_calls"); err != nil {
				return "", err
			}
			hasCalls = true
		}
	}
	if role == "tool" {
		id, _ := str(m["tool_call_id"])
		if id == "" {
			return "", refuse(RuleMissingToolCallID, ptr+"/tool_call_id", "a tool message needs a string tool_call_id")
		}
		if !v.calls[id] {
			return "", refuse(RuleToolCallIDUnknown, ptr+"/tool_call_id", "tool_call_id %q answers no call of an earlier assistant message", id)
		}
	}
	content, ok := m["content"]
	if !ok || isNull(content) {
		if hasCalls {
			return role, nil
		}
		return "", refuse(RuleMissingContent, ptr+"/content", "a %s message needs content", role)
	}
	if err := checkContent(content, role, ptr+"/content"); err != nil {
		return "", err
	}
	return role, nil
}

func (v *messagesCheck) toolCalls(raw json.RawMessage, ptr string) error {
	calls, ok := array(raw)
	if !ok || len(calls) == 0 {
		return refuse(RuleToolCallMalformed, ptr, "tool_calls must be a non-empty array")
	}
	for i, c := range calls {
		cptr := ptr + "/" + strconv.Itoa(i)
		call, ok := object(c)
		if !ok {
			return refuse(RuleToolCallMalformed, cptr, "a tool call must be an object")
		}
		for _, k := range sortedMembers(call) {
			if k != "id" && k != "type" && k != "function" {
				return refuse(RuleToolCallMalformed, cptr+"/"+tok(k), "a tool call has no member %q", k)
			}
		}
		if id, _ := str(call["id"]); id == "" {
			return refuse(RuleToolCallMalformed, cptr+"/id", "a tool call needs a non-empty string id")
		}
		if typ, _ := str(call["type"]); typ != "function" {
			return refuse(RuleToolCallMalformed, cptr+"/type", `a tool call's type must be "function"`)
		}
		fn, ok := object(call["function"])
		if !ok {
			return refuse(RuleToolCallMalformed, cptr+"/function", "a tool call needs a function object")
		}
		for _, k := range sortedMembers(fn) {
			if k != "name" && k != "arguments" {
				return refuse(RuleToolCallMalformed, cptr+"/function/"+tok(k), "a tool call's function has no member %q", k)
			}
		}
		if name, _ := str(fn["name"]); name == "" {
			return refuse(RuleToolCallMalformed, cptr+"/function/name", "a tool call needs a non-empty function name")
		}
		args, ok := str(fn["arguments"])
		if !ok {
			return refuse(RuleToolCallMalformed, cptr+"/function/arguments", "arguments must be a JSON-encoded string")
		}
		if !json.Valid([]byte(args)) {
			return refuse(RuleToolCallArgumentsNotJSON, cptr+"/function/arguments", "arguments %q are not valid JSON", truncate(args, 80))
		}
		id, _ := str(call["id"])
		v.calls[id] = true
	}
	return nil
}

// checkContent accepts a string, or a non-empty array of content parts:
// text parts for every role, image_url parts for user messages.
func checkContent(raw json.RawMessage, role, ptr string) error {
	if _, ok := str(raw); ok {
		return nil
	}
	parts, ok := array(raw)
	if !ok || len(parts) == 0 {
		return refuse(RuleInvalidContent, ptr, "content must be a string or a non-empty array of content parts")
	}
	for i, raw := range parts {
		pptr := ptr + "/" + strconv.Itoa(i)
		p, ok := object(raw)
		if !ok {
			return refuse(RuleInvalidContent, pptr, "a content part must be an object")
		}
		typ, ok := str(p["type"])
		if !ok {
			return refuse(RuleInvalidContent, pptr+"/type", "a content part needs a string type")
		}
		switch {
		case typ == "text":
			if _, ok := str(p["text"]); !ok {
				return refuse(RuleInvalidContent, pptr+"/text", "a text part needs a string text")
			}
		case typ == "image_url" && role == "user":
			img, _ := object(p["image_url"])
			if _, ok := str(img["url"]); !ok {
				return refuse(RuleInvalidContent, pptr+"/image_url", "an image_url part needs a url")
			}
		default:
			return refuse(RuleInvalidContent, pptr+"/type", "a %s message cannot hold a %q part", role, typ)
		}
	}
	return nil
}

// The readers below take JSON text that document has already checked and
// read it in place: values are sub-slices of the row, never copies.

// object returns the members of the JSON object raw; false when raw is
// not an object.
func object(raw []byte) (map[string]json.RawMessage, bool) {
	m := make(map[string]json.RawMessage, 8)
	ok := eachMember(raw, func(name string, _, val []byte) { m[name] = val })
	if !ok {
		return nil, false
	}
	return m, true
}

// eachMember calls fn with each member of the JSON object raw in text
// order: its name, its name's literal and its value; false when raw is not
// an object.
func eachMember(raw []byte, fn func(name string, lit, val []byte)) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	w := jcs.NewWalker(raw)
	pos := w.Space(1)
	if pos < len(raw) && raw[pos] == '}' {
		return true
	}
	for pos < len(raw) && raw[pos] == '"' {
		nameEnd, err := w.Skip(pos)
		if err != nil {
			return false
		}
		name, ok := str(raw[pos:nameEnd])
		if !ok {
			return false
		}
		lit := raw[pos:nameEnd]
		pos = w.Space(nameEnd)
		if pos >= len(raw) || raw[pos] != ':' {
			return false
		}
		start := w.Space(pos + 1)
		end, err := w.Skip(start)
		if err != nil {
			return false
		}
		fn(name, lit, raw[start:end])
		pos = w.Space(end)
		switch {
		case pos < len(raw) && raw[pos] == ',':
			pos = w.Space(pos + 1)
		case pos < len(raw) && raw[pos] == '}':
			return true
		default:
			return false
		}
	}
	return false
}

// array returns the elements of the JSON array raw; false when raw is
// not an array.
func array(raw []byte) ([]json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	w := jcs.NewWalker(raw)
	out := make([]json.RawMessage, 0, 8)
	_, err := w.Elements(0, func(start int) (int, error) {
		end, err := w.Skip(start)
		out = append(out, raw[start:end])
		return end, err
	})
	return out, err == nil
}

// known are the member names and values the formats use, so that reading
// them allocates nothing; other strings are decoded afresh.
var known = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		"messages", "tools", "parallel_tool_calls", "input", "preferred_output", "non_preferred_output",
		"role", "content", "name", "tool_calls", "tool_call_id", "weight", "refusal", "annotations", "audio",
		"id", "type", "function", "arguments", "description", "parameters", "strict", "text", "image_url", "url",
		"system", "developer", "user", "assistant", "tool",
	} {
		m[s] = s
	}
	return m
}()

// str decodes the JSON string raw; false when raw is not a string.
func str(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if s, ok := known[string(raw[1:len(raw)-1])]; ok {
		return s, true
	}
	s, err := jcs.NewWalker(raw).String(0, len(raw))
	return s, err == nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// sortedMembers returns m's member names in order, so that the first
// refusal reported is the same on every run.
func sortedMembers(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func tok(k string) string { return jcs.EscapePointerToken(k) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
