package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/gyrehq/gyre/harnesskit"
)

// llm is the policy that asks an OpenAI-compatible model, offering it the
// desk's tools.
type llm struct {
	client openai.Client
	tools  []openai.ChatCompletionToolUnionParam
}

// newLLM returns a policy on the chat completions API at baseURL (empty:
// OpenAI's) with apiKey.
func newLLM(baseURL, apiKey string, opts ...option.RequestOption) (*llm, error) {
	o := []option.RequestOption{option.WithAPIKey(apiKey), option.WithMaxRetries(2)}
	if baseURL != "" {
		o = append(o, option.WithBaseURL(baseURL))
	}
	l := &llm{client: openai.NewClient(append(o, opts...)...)}
	for _, t := range tools {
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

// next sends the conversation and returns the model's turn.
func (l *llm) next(ctx context.Context, model string, history []message) (turn, error) {
	msgs := make([]openai.ChatCompletionMessageParamUnion, 0, len(history))
	for _, m := range history {
		switch m.role {
		case "system":
			msgs = append(msgs, openai.SystemMessage(m.content))
		case "user":
			msgs = append(msgs, openai.UserMessage(m.content))
		case "tool":
			msgs = append(msgs, openai.ToolMessage(m.content, m.toolCallID))
		case "assistant":
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.content != "" {
				a.Content.OfString = openai.String(m.content)
			}
			for _, c := range m.toolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.id,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.name, Arguments: string(c.args)},
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
		return turn{}, fmt.Errorf("chat completion: %w", err)
	}
	if len(resp.Choices) == 0 {
		return turn{}, errNoChoice
	}
	msg := resp.Choices[0].Message
	t := turn{
		text:  msg.Content,
		model: resp.Model,
		usage: &harnesskit.Metrics{
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
		t.calls = append(t.calls, toolCall{id: id, name: tc.Function.Name, args: args})
	}
	return t, nil
}
