package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

// ReasonPreviousUnreadable: the response a previous_response_id names is
// recorded, but its bodies cannot be read to resolve it.
const ReasonPreviousUnreadable = "previous_response_unreadable"

// resolvePrevious resolves a Responses previous_response_id through the
// responses recorded in the same rollout — this replica's records not yet
// flushed included — into the items it stands for, which the call's
// fingerprint covers (SPEC §6.1). An id from anywhere else is 400
// unknown_previous_response: state from outside the rollout would be off
// policy. On the policy endpoint, which serves no rollout, the id is
// forwarded as sent and the fingerprint covers the request's own items.
// It returns false when it answered already.
func (c *call) resolvePrevious() bool {
	if c.req.previous == "" || c.rec.RolloutID == nil {
		return true
	}
	items, err := c.g.resolveResponse(c.ctx, c.rec.TenantID, *c.rec.RolloutID, c.req.previous)
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.reject(&apiError{Status: http.StatusBadRequest, Code: CodeUnknownPreviousResponse, Param: "previous_response_id",
			Message: "previous_response_id names no response recorded in this rollout; a rollout may chain only from its own responses."},
			ReasonUnknownPrevious)
		return false
	case err != nil:
		c.reject(c.g.failed(c.ctx, "previous response unreadable", err, &apiError{Status: http.StatusServiceUnavailable, Code: CodeInternal,
			Message: "The gateway cannot read the response previous_response_id names right now."}, slog.String("rollout_id", *c.rec.RolloutID)),
			ReasonPreviousUnreadable)
		return false
	}
	c.req.resolved = items
	return true
}

// resolveResponse returns the canonical items a response of the rollout
// stands for as a previous_response_id: the items its own request
// resolved, its request's input, then its output. store.ErrNotFound when
// the rollout recorded no response with that id.
func (g *Gateway) resolveResponse(ctx context.Context, tenantID, rolloutID, responseID string) ([][]byte, error) {
	if p := g.rec.pendingResponse(rolloutID, responseID); p != nil {
		if p.body == nil {
			return nil, errors.New("the previous response's request was not captured")
		}
		return chainOf(p.body.resolved, renderedInput(p.body.messages, p.body.fwd.shape), p.response)
	}
	rec, err := g.st.GatewayCallByResponse(ctx, tenantID, rolloutID, responseID)
	if err != nil {
		return nil, err
	}
	if g.blobReader == nil || rec.RequestBlob == nil || rec.ResponseBlob == nil {
		return nil, fmt.Errorf("call %s: its bodies were not recorded", rec.ID)
	}
	r := NewBodyReader(g.blobReader, tenantID)
	doc, err := r.requestDoc(ctx, *rec.RequestBlob)
	if err != nil {
		return nil, err
	}
	resolved, err := r.messageBlobs(ctx, doc.Resolved)
	if err != nil {
		return nil, err
	}
	input, err := r.messageBlobs(ctx, doc.Messages)
	if err != nil {
		return nil, err
	}
	resp, err := r.get(ctx, *rec.ResponseBlob, "responses/")
	if err != nil {
		return nil, err
	}
	return chainOf(resolved, renderedInput(input, doc.Items), resp)
}

// chainOf joins resolved items, a request's rendered input and the output
// items of its response, each canonical.
func chainOf(resolved, input [][]byte, response []byte) ([][]byte, error) {
	var resp struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(response, &resp); err != nil {
		return nil, fmt.Errorf("the previous response is not a response object: %w", err)
	}
	out := make([][]byte, 0, len(resolved)+len(input)+len(resp.Output))
	out = append(append(out, resolved...), input...)
	for i, it := range resp.Output {
		c, err := jcs.Canonicalize(it)
		if err != nil {
			return nil, fmt.Errorf("the previous response's output[%d]: %w", i, err)
		}
		out = append(out, c)
	}
	return slices.Clip(out), nil
}

// pendingResponse returns the latest record of the rollout not yet
// durable — waiting for a flush, or announced by a call still finishing —
// whose response had the id responseID, nil when none.
func (r *Recorder) pendingResponse(rolloutID, responseID string) *pendingRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found *pendingRecord
	consider := func(p *pendingRecord) {
		if p != nil && p.rec.RolloutID != nil && *p.rec.RolloutID == rolloutID && p.rec.ResponseID != nil &&
			*p.rec.ResponseID == responseID && (found == nil || !p.rec.ReceivedAt.Before(found.rec.ReceivedAt)) {
			found = p
		}
	}
	for _, list := range [][]*pendingRecord{r.inTransit, r.pending} {
		for _, p := range list {
			consider(p)
		}
	}
	for _, f := range r.inflight {
		consider(f.answer)
	}
	return found
}
