package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/rollout"
)

// rolloutRoutes registers the flywheel/1 rollout routes (claim, heartbeat,
// release, output; SPEC §4.3–§4.6), their description, and the batch and
// rollout admin API (§4.2, §4.8).
func (s *Server) rolloutRoutes() {
	s.handle("GET /.well-known/gyre-flywheel.json", public, s.flywheelDescription)

	s.handle("POST /agents/{agent_id}/claim", agentOnly, s.claim)
	s.handle("POST /rollouts/{rollout_id}/heartbeat", agentOnly, s.heartbeat)
	s.handle("POST /rollouts/{rollout_id}/release", agentOnly, s.release)
	s.handle("POST /rollouts/{rollout_id}/output", agentOnly, s.output)

	s.handle("POST /api/v1/batches", adminOnly, s.createBatch)
	s.handle("GET /api/v1/batches", reader, s.listBatches)
	s.handle("GET /api/v1/batches/{id}", reader, s.getBatch)
	s.handle("POST /api/v1/batches/{id}/cancel", adminOnly, s.cancelBatch)
	s.handle("GET /api/v1/rollouts", reader, s.listRollouts)
	s.handle("GET /api/v1/rollouts/{id}", reader, s.getRollout)
	s.handle("POST /api/v1/rollouts/{id}/cancel", adminOnly, s.cancelRollout)
	s.handle("GET /api/v1/agents", reader, s.listAgents)
}

// rollouts returns the rollout service, or 503 when the server runs
// without one.
func (s *Server) rollouts() (*rollout.Service, error) {
	if s.rollout == nil {
		return nil, gyre.Errorf(gyre.CodeUnavailable, "this server does not run the rollout service")
	}
	return s.rollout, nil
}

// pathAgentID returns the {agent_id} path parameter, percent-decoded and
// checked against the contract's agent_id grammar (SPEC §2).
func pathAgentID(r *http.Request) (string, error) {
	id := r.PathValue("agent_id")
	if err := flywheel.ValidateAgentID(id); err != nil {
		return "", gyre.Errorf(gyre.CodeInvalidPathParam, "path parameter agent_id is not a valid flywheel/1 agent_id: %v", err)
	}
	return id, nil
}

// claimBody is the optional body of a claim (gyre's own, SPEC §4.3).
type claimBody struct {
	MaxRollouts   *int     `json:"max_rollouts"`
	LeaseSeconds  *float64 `json:"lease_seconds"`
	WorkerID      *string  `json:"worker_id"`
	WorkerVersion *string  `json:"worker_version"`
}

// claim is POST /agents/{agent_id}/claim.
func (s *Server) claim(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.rollouts()
	if err != nil {
		return err
	}
	agentID, err := pathAgentID(r)
	if err != nil {
		return err
	}
	if err := auth.RequireAgent(r.Context(), agentID); err != nil {
		return err
	}
	p, _ := auth.FromContext(r.Context())
	q, err := queryParams(r, "wait_ms")
	if err != nil {
		return err
	}
	var wait time.Duration
	if v, ok := q["wait_ms"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 30000 {
			return gyre.Errorf(gyre.CodeInvalidBody, "query parameter wait_ms must be an integer from 0 to 30000")
		}
		wait = time.Duration(n) * time.Millisecond
	}
	b, err := readBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	var body claimBody
	if len(bytes.TrimSpace(b)) > 0 {
		if err := decodeObject(b, &body); err != nil {
			return err
		}
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	params := rollout.ClaimParams{
		TenantID: p.TenantID, AgentID: agentID, KeyID: p.KeyID, Wait: wait,
		LeaseSeconds: body.LeaseSeconds, IdempotencyKey: idem,
	}
	if body.MaxRollouts != nil {
		if *body.MaxRollouts < 1 || *body.MaxRollouts > 64 {
			return gyre.Errorf(gyre.CodeInvalidBody, "max_rollouts must be an integer from 1 to 64").AtPointer("/max_rollouts")
		}
		params.MaxRollouts = *body.MaxRollouts
	}
	if body.WorkerID != nil {
		params.WorkerID = *body.WorkerID
	}
	if body.WorkerVersion != nil {
		params.WorkerVersion = *body.WorkerVersion
	}
	res, err := svc.Claim(r.Context(), params)
	if errors.Is(err, rollout.ErrClaimPending) {
		// Not the client's fault, and a 4xx would stop gyre's worker:
		// retrying with the same key returns the running claim's rollouts.
		w.Header().Set("Retry-After", "1")
		return gyre.Errorf(gyre.CodeUnavailable, "a claim with this Idempotency-Key is still running: retry with the same key")
	}
	if err != nil {
		return err
	}
	w.Header().Set("Date", res.Now.UTC().Format(http.TimeFormat))
	w.Header().Set("Cache-Control", "no-store")
	writeRaw(w, http.StatusOK, res.Body)
	return nil
}

// leaseToken reads the Lease-Token header; a missing one is no lease.
func leaseToken(r *http.Request) string { return r.Header.Get("Lease-Token") }

// rolloutForAgent checks the rollout path parameter and, for keys limited
// to some agents, that the rollout is one of theirs.
func (s *Server) rolloutForAgent(r *http.Request) (auth.Principal, string, error) {
	p, err := principal(r)
	if err != nil {
		return p, "", err
	}
	id, err := pathUUID(r, "rollout_id")
	if err != nil {
		return p, "", err
	}
	if p.AgentIDs != nil {
		ro, err := s.store.GetRollout(r.Context(), p.TenantID, id)
		if err != nil {
			return p, "", err
		}
		if err := auth.RequireAgent(r.Context(), ro.AgentID); err != nil {
			return p, "", err
		}
	}
	return p, id, nil
}

// heartbeat is POST /rollouts/{rollout_id}/heartbeat.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.rollouts()
	if err != nil {
		return err
	}
	p, id, err := s.rolloutForAgent(r)
	if err != nil {
		return err
	}
	exp, err := svc.Heartbeat(r.Context(), p.TenantID, id, leaseToken(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]float64{"lease_expires_ts": float64(exp.UnixMicro()) / 1e6})
	return nil
}

// release is POST /rollouts/{rollout_id}/release.
func (s *Server) release(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.rollouts()
	if err != nil {
		return err
	}
	p, id, err := s.rolloutForAgent(r)
	if err != nil {
		return err
	}
	err = svc.Release(r.Context(), p.TenantID, id, leaseToken(r))
	s.forgetCredentials(id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"rollout_id": id, "state": string(gyre.StateReleased)})
	return nil
}

// forgetCredentials drops the gateway's cached credentials of the rollout
// (all of them without ids) after a request that may have revoked them,
// so their next use reads the revocation (gateway.Config.GrantCacheTTL).
func (s *Server) forgetCredentials(rolloutIDs ...string) {
	if s.gateway == nil {
		return
	}
	if len(rolloutIDs) == 0 {
		s.gateway.Recorder().ForgetAll()
		return
	}
	for _, id := range rolloutIDs {
		s.gateway.Recorder().Forget(id)
	}
}

// output is POST /rollouts/{rollout_id}/output.
func (s *Server) output(w http.ResponseWriter, r *http.Request) error {
	svc, err := s.rollouts()
	if err != nil {
		return err
	}
	p, id, err := s.rolloutForAgent(r)
	if err != nil {
		return err
	}
	b, err := readBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	res, err := svc.SubmitOutput(r.Context(), p.TenantID, id, leaseToken(r), b)
	s.forgetCredentials(id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// flywheelDescription is GET /.well-known/gyre-flywheel.json: the routes
// gyre chose for the parts of flywheel/1 whose bodies the contract defines
// but whose paths it leaves to the server (SPEC §4).
func (s *Server) flywheelDescription(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, flywheelDescription)
	return nil
}

var flywheelDescription = map[string]any{
	"contract":        flywheel.ContractVersion,
	"contract_sha256": flywheel.ContractSHA256,
	"routes": map[string]any{
		"turns": map[string]any{"method": "POST", "path": "/turns", "body": "ProductionTurnBatch",
			"answer": `{"accepted": N, "duplicates": M}`},
		"claim": map[string]any{"method": "POST", "path": "/agents/{agent_id}/claim", "query": map[string]string{"wait_ms": "0..30000, long-poll"},
			"body":   `optional {"max_rollouts": 1..64, "lease_seconds": number, "worker_id": string, "worker_version": string}`,
			"answer": "ClaimResponse", "headers": []string{"Idempotency-Key"}},
		"heartbeat": map[string]any{"method": "POST", "path": "/rollouts/{rollout_id}/heartbeat", "headers": []string{"Lease-Token"},
			"answer": `{"lease_expires_ts": number}`},
		"release": map[string]any{"method": "POST", "path": "/rollouts/{rollout_id}/release", "headers": []string{"Lease-Token"}},
		"output": map[string]any{"method": "POST", "path": "/rollouts/{rollout_id}/output", "headers": []string{"Lease-Token"},
			"body": "RolloutOutput", "answer": `{"rollout_id": string, "state": string, "replayed": bool}`},
	},
	"auth": "Authorization: Bearer <agent key>",
}

// writeRaw answers with JSON bytes already encoded.
func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}

// rawOrNull is a JSON value or null.
func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}
