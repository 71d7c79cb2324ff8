package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/store"
)

// gatewayRoutes registers the policy admin API (SPEC §6.1, §4.8), the LLM
// gateway routes and the production policy endpoint.
func (s *Server) gatewayRoutes() {
	s.handle("POST /api/v1/policies", adminOnly, s.createPolicy)
	s.handle("GET /api/v1/policies", reader, s.listPolicies)

	for _, p := range gateway.Protocols {
		s.gatewayRoute("POST /gw/{token}/v1"+p.Path(), func(w http.ResponseWriter, r *http.Request) {
			s.gateway.ServeRollout(w, r, r.PathValue("token"), p)
		})
		s.gatewayRoute("POST /agents/{agent_id}/v1"+p.Path(), func(w http.ResponseWriter, r *http.Request) {
			s.policyEndpoint(w, r, p)
		})
	}
	s.gatewayRoute("GET /gw/{token}/v1/models", func(w http.ResponseWriter, r *http.Request) {
		s.gateway.ServeModels(w, r, r.PathValue("token"))
	})
	// Every other path and method under a token: 404 unsupported_endpoint.
	s.gatewayRoute("/gw/{token}/", func(w http.ResponseWriter, r *http.Request) {
		s.gateway.ServeUnsupported(w, r)
	})
}

// gatewayRoute registers a gateway handler. Gateway routes answer in the
// OpenAI error shape (the Anthropic one on /v1/messages), take bodies up to the gateway's limit and run
// without the handler timeout (streams and slow models outlast it; the
// gateway bounds its upstream calls itself). Their route label is the
// template, so no token reaches a log line or a metric.
func (s *Server) gatewayRoute(pattern string, h http.HandlerFunc) {
	route := pattern
	if _, r, ok := strings.Cut(pattern, " "); ok {
		route = r
	}
	s.patterns[pattern] = true
	params := patternParams(route)
	proto := routeProtocol(route)
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := infoFrom(r.Context())
		info.route = route
		if err := checkParams(r, params); err != nil {
			gateway.WriteProtocolError(w, proto, err.Status(), err.Code, err.Message)
			return
		}
		if s.gateway == nil {
			gateway.WriteProtocolError(w, proto, http.StatusServiceUnavailable, "gateway_unavailable", "This server does not run the LLM gateway.")
			return
		}
		maxBody := s.gateway.MaxBodyBytes()
		if r.ContentLength > maxBody {
			gateway.WriteProtocolError(w, proto, http.StatusRequestEntityTooLarge, gateway.CodeBodyTooLarge, "The request body is larger than the gateway's limit.")
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		}
		h(w, r)
	}))
}

// routeProtocol is the protocol of a gateway route, by its path: the
// protocol whose errors the route answers in.
func routeProtocol(route string) gateway.Protocol {
	for _, p := range gateway.Protocols {
		if strings.HasSuffix(route, "/v1"+p.Path()) {
			return p
		}
	}
	return gateway.ProtocolChat
}

// policyEndpoint is POST /agents/{agent_id}/v1/chat/completions (and
// /v1/responses, /v1/messages by protocol p): the agent's promoted policy
// for production traffic (SPEC §6.1), for inference and agent keys
// allowed for the agent. Its errors are in the protocol's shape; on
// Messages the key may come as x-api-key, as Anthropic SDKs send it.
func (s *Server) policyEndpoint(w http.ResponseWriter, r *http.Request, proto gateway.Protocol) {
	fail := func(status int, code, message string) { gateway.WriteProtocolError(w, proto, status, code, message) }
	if proto == gateway.ProtocolMessages && len(r.Header.Values("Authorization")) == 0 {
		if vs := r.Header.Values("X-Api-Key"); len(vs) == 1 {
			r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(vs[0]))
		}
	}
	p, err := s.auth.Authenticate(r)
	if err != nil {
		var ge *gyre.Error
		if errors.As(err, &ge) {
			fail(http.StatusUnauthorized, gateway.CodeInvalidAPIKey, ge.Message)
			return
		}
		if clientGone(r.Context(), err) {
			s.writeError(w, r, err) // a client that hung up: debug log, 499
			return
		}
		s.log.Error("policy endpoint authentication failed", "request_id", infoFrom(r.Context()).id, "error", err)
		fail(http.StatusServiceUnavailable, gateway.CodeInternal, "The server cannot check API keys right now.")
		return
	}
	infoFrom(r.Context()).keyID = p.KeyID
	if !p.Permits(gyre.RoleInference, gyre.RoleAgent) {
		fail(http.StatusForbidden, gateway.CodeForbidden, "The policy endpoint needs an inference or agent key.")
		return
	}
	agentID := r.PathValue("agent_id")
	if err := flywheel.ValidateAgentID(agentID); err != nil {
		fail(http.StatusBadRequest, gateway.CodeInvalidRequest, "The path's agent_id is not a valid flywheel/1 agent_id.")
		return
	}
	if !p.AllowsAgent(agentID) {
		fail(http.StatusForbidden, gateway.CodeForbidden, "This API key may not act for this agent.")
		return
	}
	if !s.gatewayRateLimit(w, r, proto, p.TenantID, p.KeyID) {
		return
	}
	s.gateway.ServeAgent(w, r.WithContext(auth.WithPrincipal(r.Context(), p)), p.TenantID, agentID, proto)
}

// policyBody is POST /api/v1/policies (SPEC §6.1).
type policyBody struct {
	Name              *string         `json:"name"`
	Upstream          *string         `json:"upstream"`
	Model             *string         `json:"model"`
	Tokenizer         *string         `json:"tokenizer"`
	SamplingOverrides json.RawMessage `json:"sampling_overrides"`
	Prices            json.RawMessage `json:"prices"`
	CaptureTokens     *bool           `json:"capture_tokens"`
}

// policyView is a policy as the API shows it: every key present.
type policyView struct {
	Name              string                     `json:"name"`
	Upstream          string                     `json:"upstream"`
	Model             string                     `json:"model"`
	Tokenizer         *string                    `json:"tokenizer"`
	SamplingOverrides map[string]json.RawMessage `json:"sampling_overrides"`
	Prices            *gateway.Prices            `json:"prices"`
	CaptureTokens     bool                       `json:"capture_tokens"`
	SHA256            string                     `json:"sha256"`
	CreatedAt         time.Time                  `json:"created_at"`
}

func toPolicyView(sp store.Policy) (policyView, error) {
	p, err := gateway.ParsePolicy(sp.Body)
	if err != nil {
		return policyView{}, err
	}
	return policyView{Name: p.Name, Upstream: p.Upstream, Model: p.Model, Tokenizer: p.Tokenizer,
		SamplingOverrides: p.SamplingOverrides, Prices: p.Prices, CaptureTokens: p.CaptureTokens,
		SHA256: sp.SHA256, CreatedAt: sp.CreatedAt}, nil
}

// createPolicy is POST /api/v1/policies: 201 when created, 200 when the
// identical policy exists, 409 policy_exists when a different one has the
// name, 422 upstream_not_allowed for an upstream the operator did not
// configure or allow for the tenant.
func (s *Server) createPolicy(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	var body policyBody
	if err := s.decodeJSON(r, &body); err != nil {
		return err
	}
	tenant, err := s.store.TenantByID(r.Context(), p.TenantID)
	if err != nil {
		return err
	}
	var upstreams []gateway.Upstream
	if s.gateway != nil {
		upstreams = s.gateway.Upstreams()
	}
	pol, err := gateway.NewPolicy(gateway.PolicyInput{
		Name: body.Name, Upstream: body.Upstream, Model: body.Model, Tokenizer: body.Tokenizer,
		SamplingOverrides: body.SamplingOverrides, Prices: body.Prices, CaptureTokens: body.CaptureTokens,
	}, upstreams, tenant.Name)
	if err != nil {
		return err
	}
	doc, sha, err := pol.Canonical()
	if err != nil {
		return err
	}
	sp, created, err := s.store.CreatePolicy(r.Context(), store.Policy{TenantID: p.TenantID, Name: pol.Name, Body: doc, SHA256: sha})
	if errors.Is(err, store.ErrPolicyExists) {
		return gyre.Errorf(gyre.CodePolicyExists, "policy %q exists with a different body; policies are immutable, so a new version needs a new name", pol.Name).AtPointer("/name")
	}
	if err != nil {
		return err
	}
	v, err := toPolicyView(sp)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, v)
	return nil
}

// listPolicies is GET /api/v1/policies.
func (s *Server) listPolicies(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	pg, err := pageOnly(r)
	if err != nil {
		return err
	}
	ps, next, err := s.store.ListPolicies(r.Context(), p.TenantID, pg)
	if err != nil {
		return err
	}
	items := make([]policyView, 0, len(ps))
	for _, sp := range ps {
		v, err := toPolicyView(sp)
		if err != nil {
			return err
		}
		items = append(items, v)
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}
