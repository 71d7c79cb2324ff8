package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/store"
)

// chatTurn is one message of the recorded conversation.
type chatTurn struct {
	// Call is the gateway call (its seq) whose request or response
	// carried the message first; Response marks the model's answer.
	Call     int
	Response bool
	// Restart marks the first message of a call whose history is not the
	// previous call's history and answer (a new conversation).
	Restart    bool
	Role       string
	Text       string
	Parts      []string // non-text content parts, by type
	ToolCalls  []chatToolCall
	ToolCallID string
	Name       string
	// Protocol is the call's wire protocol (chat, responses, messages).
	Protocol string
	// NotExportable, set on a call's marker turn, is why the call has no
	// chat form (protocol_item_not_exportable:<type>, or that its bodies
	// could not be read as its protocol); Native is then its recorded
	// request and answer as they were, pretty-printed.
	NotExportable string
	Native        string
}

type chatToolCall struct {
	ID, Name, Arguments string
}

// chatMessage is an OpenAI chat message as recorded.
type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// key identifies a message across calls: an agent resends the model's
// answer in its own form, so the key is what a reader sees, not bytes.
func (m chatTurn) key() string {
	var b strings.Builder
	b.WriteString(m.Role + "\x00" + m.Text + "\x00" + m.ToolCallID)
	for _, c := range m.ToolCalls {
		b.WriteString("\x00" + c.ID + "\x00" + c.Name)
	}
	return b.String()
}

func turnOf(m chatMessage, seq int, response bool) chatTurn {
	t := chatTurn{Call: seq, Response: response, Role: m.Role, Name: m.Name, ToolCallID: m.ToolCallID}
	var s string
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	switch {
	case json.Unmarshal(m.Content, &s) == nil:
		t.Text = s
	case json.Unmarshal(m.Content, &parts) == nil:
		var texts []string
		for _, p := range parts {
			if p.Type == "text" {
				texts = append(texts, p.Text)
			} else {
				// Images and files are named, never loaded: the page
				// makes no request beyond the server.
				t.Parts = append(t.Parts, p.Type)
			}
		}
		t.Text = strings.Join(texts, "\n")
	}
	for _, c := range m.ToolCalls {
		t.ToolCalls = append(t.ToolCalls, chatToolCall{ID: c.ID, Name: c.Function.Name, Arguments: indentArgs(c.Function.Arguments)})
	}
	return t
}

// indentArgs pretty-prints tool arguments that are JSON.
func indentArgs(s string) string {
	var b bytes.Buffer
	if json.Indent(&b, []byte(s), "", "  ") == nil {
		return b.String()
	}
	return s
}

// conversation rebuilds the rollout's chat from its recorded bodies
// (gateway.BodyReader, as GET /api/v1/rollouts/{id}/calls does): each
// call shows only the messages its history adds to the previous call's
// history and answer, then its own answer.
func (u *UI) conversation(r *http.Request, s session, calls []store.GatewayCall, d *rolloutData) error {
	if len(calls) == 0 {
		return nil
	}
	if u.blobs == nil {
		d.ConversationNote = "This server has no blob store configured, so recorded bodies cannot be shown."
		return nil
	}
	if len(calls) > maxConversationCalls {
		d.ConversationNote = fmt.Sprintf("Showing the first %d of %d calls.", maxConversationCalls, len(calls))
		calls = calls[:maxConversationCalls]
	}
	body := gateway.NewBodyReader(u.blobs, s.TenantID)
	var prev []string // keys of the previous call's history and answer
	for _, c := range calls {
		bodies, err := body.Read(r.Context(), c.GatewayRecord)
		if err != nil {
			return fmt.Errorf("call %d of %s: %w", c.Seq, d.R.ID, err)
		}
		protocol := c.Protocol
		if protocol == "" {
			protocol = string(gateway.ProtocolChat)
		}
		if protocol != string(gateway.ProtocolChat) && len(bodies.Request) > 0 {
			chat, err := gateway.ChatBodies(protocol, bodies)
			if err != nil {
				// The call stays on the page as it was sent; the next
				// call's history starts afresh after it.
				d.Conversation = append(d.Conversation, notExportable(c.Seq, protocol, err, bodies))
				prev = nil
				continue
			}
			bodies = chat
		}
		var req struct {
			Messages []chatMessage `json:"messages"`
		}
		if len(bodies.Request) > 0 {
			if err := json.Unmarshal(bodies.Request, &req); err != nil {
				return fmt.Errorf("call %d request: %w", c.Seq, err)
			}
		}
		turns := make([]chatTurn, len(req.Messages))
		keys := make([]string, len(req.Messages))
		for i, m := range req.Messages {
			turns[i] = turnOf(m, c.Seq, false)
			turns[i].Protocol = protocol
			keys[i] = turns[i].key()
		}
		start := 0
		if len(prev) > 0 && len(keys) >= len(prev) && equalKeys(keys[:len(prev)], prev) {
			start = len(prev)
		} else if len(prev) > 0 && len(turns) > 0 {
			turns[0].Restart = true
		}
		d.Conversation = append(d.Conversation, turns[start:]...)
		prev = keys
		var resp struct {
			Choices []struct {
				Message chatMessage `json:"message"`
			} `json:"choices"`
		}
		if len(bodies.Response) > 0 && json.Unmarshal(bodies.Response, &resp) == nil && len(resp.Choices) > 0 {
			t := turnOf(resp.Choices[0].Message, c.Seq, true)
			t.Protocol = protocol
			if t.Role == "" {
				t.Role = "assistant"
			}
			d.Conversation = append(d.Conversation, t)
			prev = append(prev, t.key())
		}
	}
	return nil
}

// maxNativeBytes bounds each recorded body a not-exportable call shows.
const maxNativeBytes = 64 << 10

// notExportable is the marker turn of a call with no chat form: why, and
// its native request and answer.
func notExportable(seq int, protocol string, err error, b gateway.CallBodies) chatTurn {
	t := chatTurn{Call: seq, Protocol: protocol, Role: "call"}
	var ne *gateway.NotExportableError
	if errors.As(err, &ne) {
		t.NotExportable = ne.Reason()
	} else {
		t.NotExportable = "its recorded bodies are not a well-formed " + protocol + " call"
	}
	native := func(raw json.RawMessage) string {
		var buf bytes.Buffer
		if json.Indent(&buf, raw, "", "  ") != nil {
			buf.Reset()
			buf.Write(raw)
		}
		if buf.Len() > maxNativeBytes {
			return buf.String()[:maxNativeBytes] + "\n… " + bytesText(buf.Len()-maxNativeBytes) + " more not shown"
		}
		return buf.String()
	}
	t.Native = "request:\n" + native(b.Request)
	if len(b.Response) > 0 {
		t.Native += "\n\nresponse:\n" + native(b.Response)
	}
	return t
}

func equalKeys(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
