// Package llm is the model policy of the example support desk: it asks an
// OpenAI-compatible chat completions server (OpenAI, vLLM, a gyre gateway
// URL…), offering it the desk's tools. It lives apart from package desk so
// that importing the desk (gyre demo does) does not pull in an OpenAI
// client.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/gyrehq/gyre/examples/harness/desk"
	"github.com/gyrehq/gyre/harnesskit"
)

// ErrNoChoice is a model answer without a choice.
var ErrNoChoice = errors.New("the model returned no choice")

// Policy is a desk.Policy that asks an OpenAI-compatible model, offering it
// desk.Tools.
type Policy struct {
	client openai.Client
	tools  []openai.ChatCompletionToolUnionParam
}

// New returns a policy on the chat completions API at baseURL (empty:
// OpenAI's) with apiKey; opts are added to the client's options.
func New(baseURL, apiKey string, opts ...option.RequestOption) (*Policy, error) {
	o := []option.RequestOption{option.WithAPIKey(apiKey), option.WithMaxRetries(2)}
	if baseURL != "" {
		o = append(o, option.WithBaseURL(baseURL))
	}
	l := &Policy{client: openai.NewClient(append(o, opts...)...)}
	for _, t := range desk.Tools {
		var params shared.FunctionParameters
		if err := json.Unmarshal(t.Parameters, &params); err != nil {
			return nil, fmt.Errorf("tool %s parameters: %w", t.Name, err)
		}
		l.tools = append(l.tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        t.Name,
			Description: openai.String(t.Description),
			Parameters:  params,
		}))
	}
	return l, nil
}

// Next sends the conversation and returns the model's turn.
func (l *Policy) Next(ctx context.Context, model string, history []desk.Message) (desk.Turn, error) {
	msgs := make([]openai.ChatCompletionMessageParamUnion, 0, len(history))
	for _, m := range history {
		switch m.Role {
		case "system":
			msgs = append(msgs, openai.SystemMessage(m.Content))
		case "user":
			msgs = append(msgs, openai.UserMessage(m.Content))
		case "tool":
			msgs = append(msgs, openai.ToolMessage(m.Content, m.ToolCallID))
		case "assistant":
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, c := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: string(c.Args)},
					},
				})
			}
			msgs = append(msgs, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	resp, err := l.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    model,
		Messages: msgs,
		Tools:    l.tools,
	})
	if err != nil {
		return desk.Turn{}, fmt.Errorf("chat completion: %w", err)
	}
	if len(resp.Choices) == 0 {
		return desk.Turn{}, ErrNoChoice
	}
	msg := resp.Choices[0].Message
	t := desk.Turn{
		Text:  msg.Content,
		Model: resp.Model,
		Usage: &harnesskit.Metrics{
			PromptTokens:     int(resp.Usage.PromptTokens),
			CompletionTokens: int(resp.Usage.CompletionTokens),
			CachedTokens:     int(resp.Usage.PromptTokensDetails.CachedTokens),
		},
	}
	for i, tc := range msg.ToolCalls {
		if tc.Type != "function" {
			continue
		}
		// ATIF wants an arguments object: anything else reaches the tool
		// as {} and the tool reports the missing argument.
		args := json.RawMessage(tc.Function.Arguments)
		var obj map[string]json.RawMessage
		if json.Unmarshal(args, &obj) != nil || obj == nil {
			args = json.RawMessage(`{}`)
		}
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%d", i+1)
		}
		t.Calls = append(t.Calls, desk.ToolCall{ID: id, Name: tc.Function.Name, Args: args})
	}
	return t, nil
}
