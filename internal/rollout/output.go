package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

// OutputResult answers an accepted or replayed output (SPEC §4.6).
type OutputResult struct {
	RolloutID string            `json:"rollout_id"`
	State     gyre.RolloutState `json:"state"`
	Replayed  bool              `json:"replayed"`
}

// SubmitOutput runs the output checks of SPEC §4.6 in their order: unknown
// or foreign rollout (404), lease token (409 lease_lost), schema and
// artifacts (422 invalid_body), replay or conflict, state and lease, then
// deadline. It never waits for grading.
func (s *Service) SubmitOutput(ctx context.Context, tenantID, rolloutID string, leaseToken string, body []byte) (OutputResult, error) {
	tok := HashSecret(leaseToken)
	if err := s.store.CheckLease(ctx, tenantID, rolloutID, tok); err != nil {
		return OutputResult{}, leaseError(err)
	}
	normalized, hash, exclusion, err := NormalizeOutput(body)
	if err != nil {
		return OutputResult{}, err
	}
	res, err := s.store.SubmitOutput(ctx, store.OutputSubmission{
		TenantID: tenantID, RolloutID: rolloutID, LeaseToken: tok,
		Output: normalized, OutputHash: hash, Exclusion: exclusion, Grace: s.cfg.Grace,
	})
	if err != nil {
		return OutputResult{}, leaseError(err)
	}
	if !res.Replayed {
		s.grader.Wake()
	}
	if res.Retry != "" {
		if r, err := s.store.GetRollout(ctx, tenantID, res.Retry); err == nil {
			s.WorkQueued(tenantID, r.AgentID)
		}
	}
	return OutputResult{RolloutID: rolloutID, State: res.State, Replayed: res.Replayed}, nil
}

// NormalizeOutput validates a RolloutOutput body against the contract and
// gyre's artifact rules, applies intake normalisation (an absent
// tool_calls is null, an absent tool_calls_omitted_count is 0; null and []
// stay distinct) and returns the canonical JSON, its SHA-256 (which decides
// replays) and the exclusion reason. Errors are *gyre.Error invalid_body
// with the pointer of the first offending field.
func NormalizeOutput(body []byte) (json.RawMessage, string, *string, error) {
	if err := flywheel.Validate(flywheel.DefRolloutOutput, body); err != nil {
		return nil, "", nil, invalidBody(err)
	}
	var out flywheel.RolloutOutput
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, "", nil, gyre.Errorf(gyre.CodeInvalidBody, "the output does not decode: %v", err)
	}
	names := make([]string, 0, len(out.Artifacts))
	for name := range out.Artifacts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := out.Artifacts[name].Verify(); err != nil {
			return nil, "", nil, gyre.Errorf(gyre.CodeInvalidBody, "artifact %q: %v", name, err).
				AtPointer("/artifacts/" + jcs.EscapePointerToken(name))
		}
	}
	tree, err := jcs.Parse(body)
	if err != nil {
		return nil, "", nil, gyre.Errorf(gyre.CodeInvalidBody, "%v", err)
	}
	obj := tree.(map[string]any) // the schema guarantees an object
	if _, ok := obj["tool_calls"]; !ok {
		obj["tool_calls"] = nil
	}
	if _, ok := obj["tool_calls_omitted_count"]; !ok {
		obj["tool_calls_omitted_count"] = json.Number("0")
	}
	canon, err := jcs.Marshal(obj)
	if err != nil {
		return nil, "", nil, fmt.Errorf("canonicalize output: %w", err)
	}
	hash, err := jcs.Hash(canon)
	if err != nil {
		return nil, "", nil, fmt.Errorf("hash output: %w", err)
	}
	var exclusion *string
	if ex, ok := out.Exclusion.Get(); ok {
		r := string(ex.Reason)
		exclusion = &r
	}
	return canon, hash, exclusion, nil
}

// invalidBody turns a contract validation error into a 422 with the
// pointer of the first offending field in document order.
func invalidBody(err error) error {
	var ve *flywheel.ValidationError
	if errors.As(err, &ve) {
		v := ve.First()
		return gyre.Errorf(gyre.CodeInvalidBody, "%s", v.Message).AtPointer(v.Pointer)
	}
	return gyre.Errorf(gyre.CodeInvalidBody, "%v", err)
}

// leaseError maps the store's state-machine sentinels to wire errors.
func leaseError(err error) error {
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		return &gyre.Error{Code: gyre.CodeLeaseLost, Message: "the lease token is not this rollout's current lease, or the lease lapsed", Err: err}
	case errors.Is(err, store.ErrRolloutFinished):
		return &gyre.Error{Code: gyre.CodeRolloutFinished, Message: "the rollout has finished", Err: err}
	case errors.Is(err, store.ErrOutputConflict):
		return &gyre.Error{Code: gyre.CodeOutputConflict, Message: "a different output was already accepted for this rollout", Err: err}
	case errors.Is(err, store.ErrDeadlineExceeded):
		return &gyre.Error{Code: gyre.CodeDeadlineExceeded, Message: "the output arrived after the rollout's deadline and grace period", Err: err}
	case errors.Is(err, store.ErrAlreadyStarted):
		return &gyre.Error{Code: gyre.CodeAlreadyStarted, Message: "the gateway already counted a completion for this rollout; submit an output instead", Err: err}
	}
	return err
}

// Heartbeat renews a live lease to now + the granted length (SPEC §4.4)
// and returns the new expiry.
func (s *Service) Heartbeat(ctx context.Context, tenantID, rolloutID, leaseToken string) (time.Time, error) {
	exp, err := s.store.Heartbeat(ctx, tenantID, rolloutID, HashSecret(leaseToken))
	if err != nil {
		return time.Time{}, leaseError(err)
	}
	return exp, nil
}

// Release hands a rollout back before it started (SPEC §4.5): it ends
// released and its task is queued again without spending an attempt.
func (s *Service) Release(ctx context.Context, tenantID, rolloutID, leaseToken string) error {
	if _, err := s.store.Release(ctx, tenantID, rolloutID, HashSecret(leaseToken)); err != nil {
		return leaseError(err)
	}
	if r, err := s.store.GetRollout(ctx, tenantID, rolloutID); err == nil {
		s.WorkQueued(tenantID, r.AgentID)
	}
	return nil
}

// CancelRollout cancels a queued or leased rollout (admin).
func (s *Service) CancelRollout(ctx context.Context, tenantID, rolloutID string) (store.Rollout, error) {
	r, err := s.store.CancelRollout(ctx, tenantID, rolloutID)
	if err != nil {
		return store.Rollout{}, leaseError(err)
	}
	return r, nil
}
