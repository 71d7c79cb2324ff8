package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// emittedToolCalls lists the tool calls the model emitted in the
// rollout's counted completions, in completion order, read from the
// recorded answers in chat form (a Responses or Messages answer converted
// by gateway.ChatBodies), for graders with source: emitted (SPEC §8). It
// returns nil — unknown, so those graders abstain — unless the list is
// known to be complete: every gateway replica has flushed the rollout's
// records, every counted completion's bodies were captured and can be
// read, and each has a chat form. An unknown list is never read as an
// empty one.
func (g *Grader) emittedToolCalls(ctx context.Context, r store.Rollout) ([]grade.EmittedToolCall, error) {
	if g.blobs == nil {
		return nil, nil
	}
	seal, err := g.store.SealGateway(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	if !seal.Ready || seal.Lost {
		return nil, nil
	}
	calls, err := g.store.GatewayCalls(ctx, r.TenantID, r.ID)
	if err != nil {
		return nil, err
	}
	body := gateway.NewBodyReader(g.blobs, r.TenantID)
	out := []grade.EmittedToolCall{}
	for _, c := range calls {
		if !c.Counted {
			continue
		}
		if c.RequestBlob == nil || c.ResponseBlob == nil {
			return nil, nil
		}
		b, err := body.Read(ctx, c.GatewayRecord)
		if errors.Is(err, blobstore.ErrNotFound) {
			// A body that is gone (deleted, or written to a blob store this
			// replica does not share) leaves the list unknown; it is not a
			// reason to fail the grading.
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("completion %d: %w", c.Seq, err)
		}
		chat, err := gateway.ChatBodies(c.Protocol, b)
		var ne *gateway.NotExportableError
		if errors.As(err, &ne) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("completion %d: %w", c.Seq, err)
		}
		var resp struct {
			Choices []struct {
				Message struct {
					ToolCalls []struct {
						ID       *string `json:"id"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(chat.Response, &resp); err != nil {
			// A counted answer that is not a chat completion: the list
			// cannot be known.
			return nil, nil
		}
		if len(resp.Choices) == 0 {
			continue
		}
		for _, tc := range resp.Choices[0].Message.ToolCalls {
			args := json.RawMessage(tc.Function.Arguments)
			if !json.Valid(args) {
				args, _ = json.Marshal(tc.Function.Arguments) // a string always marshals
			}
			out = append(out, grade.EmittedToolCall{Name: tc.Function.Name, Arguments: args, ToolCallID: tc.ID, CompletionSeq: c.Seq})
		}
	}
	return out, nil
}
