package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/jcs"
)

// Policy is a tenant's named routing of LLM traffic (SPEC §6.1): an
// upstream, the model forwarded in place of the agent's, and what else the
// gateway changes and records.
type Policy struct {
	Name     string `json:"name"`
	Upstream string `json:"upstream"`
	Model    string `json:"model"`
	// Tokenizer names the tokenizer of Model, for the fingerprint.
	Tokenizer *string `json:"tokenizer,omitempty"`
	// SamplingOverrides replace (or add) request members before the
	// request goes upstream, e.g. {"temperature": 1.0}.
	SamplingOverrides map[string]json.RawMessage `json:"sampling_overrides,omitempty"`
	// Prices price usage, in USD per million tokens; nil leaves cost null.
	Prices *Prices `json:"prices,omitempty"`
	// CaptureTokens asks the upstream for chosen-token logprobs and token
	// ids (logprobs, and vLLM's return_token_ids), stored with the response.
	CaptureTokens bool `json:"capture_tokens,omitempty"`
}

// Prices are a policy's prices in USD per million tokens.
type Prices struct {
	Input float64 `json:"input"`
	// CachedInput prices cached prompt tokens; nil prices them as Input.
	CachedInput *float64 `json:"cached_input,omitempty"`
	// CacheCreationInput prices prompt tokens written to the cache
	// (Anthropic's cache_creation_input_tokens); nil prices them as Input.
	CacheCreationInput *float64 `json:"cache_creation_input,omitempty"`
	Output             float64  `json:"output"`
}

// Cost is the ATIF cost of a call: (prompt − cached)·input +
// cached·cached_input + completion·output, per million tokens.
func (p Prices) Cost(prompt, cached, completion int64) float64 {
	cachedPrice := p.Input
	if p.CachedInput != nil {
		cachedPrice = *p.CachedInput
	}
	cached = min(max(cached, 0), prompt)
	return (float64(prompt-cached)*p.Input + float64(cached)*cachedPrice + float64(completion)*p.Output) / 1e6
}

// CostWithCacheWrites is Cost for usage that also counts prompt tokens
// written to the cache: of the prompt tokens, cached ones are priced as
// CachedInput, written ones as CacheCreationInput (else Input), the rest
// as Input.
func (p Prices) CostWithCacheWrites(prompt, cached, written, completion int64) float64 {
	writePrice := p.Input
	if p.CacheCreationInput != nil {
		writePrice = *p.CacheCreationInput
	}
	written = min(max(written, 0), prompt)
	return p.Cost(prompt-written, cached, completion) + float64(written)*writePrice/1e6
}

// SamplingKeys are the request members a policy may override: sampling
// and decoding parameters, never the conversation, the tools or the
// transport (model, messages, tools, stream, stream_options).
var SamplingKeys = []string{
	"temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens", "seed", "stop", "n",
	"presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "logprobs", "top_logprobs",
	"tool_choice", "parallel_tool_calls", "response_format", "reasoning_effort", "verbosity",
}

// FingerprintSamplingKeys are the sampling params the server fingerprint
// records, after overrides (SPEC §6.2).
var FingerprintSamplingKeys = []string{
	"temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop", "n", "tool_choice", "response_format",
}

// PolicyInput is a policy as a client sent it, members already decoded
// from the top-level object (nil when absent).
type PolicyInput struct {
	Name              *string
	Upstream          *string
	Model             *string
	Tokenizer         *string
	SamplingOverrides json.RawMessage
	Prices            json.RawMessage
	CaptureTokens     *bool
}

// NewPolicy checks a policy a tenant named tenantName sends: a valid name,
// an upstream the operator configured and allows for the tenant (else 422
// upstream_not_allowed), a model, sampling overrides limited to
// SamplingKeys and non-negative prices. Errors are *gyre.Error with a
// pointer.
func NewPolicy(in PolicyInput, upstreams []Upstream, tenantName string) (Policy, error) {
	bad := func(ptr, format string, args ...any) error {
		return gyre.Errorf(gyre.CodeInvalidBody, format, args...).AtPointer(ptr)
	}
	var p Policy
	switch {
	case in.Name == nil:
		return p, bad("/name", "name is required")
	case !ValidName(*in.Name):
		return p, bad("/name", "name must be 1 to 255 characters from [A-Za-z0-9._-], not . or ..")
	case in.Upstream == nil || *in.Upstream == "":
		return p, bad("/upstream", "upstream is required: the name of an upstream in the server's configuration")
	case in.Model == nil || *in.Model == "":
		return p, bad("/model", "model is required")
	case in.Tokenizer != nil && *in.Tokenizer == "":
		return p, bad("/tokenizer", "tokenizer must not be empty; leave it out when unknown")
	}
	p.Name, p.Upstream, p.Model, p.Tokenizer = *in.Name, *in.Upstream, *in.Model, in.Tokenizer
	i := slices.IndexFunc(upstreams, func(u Upstream) bool { return u.Name == p.Upstream })
	if i < 0 || !upstreams[i].AllowsTenant(tenantName) {
		return p, gyre.Errorf(gyre.CodeUpstreamNotAllowed,
			"upstream %q is not configured on this server or not allowed for this tenant", p.Upstream).AtPointer("/upstream")
	}
	if len(in.SamplingOverrides) > 0 && !isNull(in.SamplingOverrides) {
		if err := strictObject(in.SamplingOverrides, &p.SamplingOverrides); err != nil {
			return p, bad("/sampling_overrides", "sampling_overrides must be a JSON object")
		}
		for k, v := range p.SamplingOverrides {
			if !slices.Contains(SamplingKeys, k) {
				return p, bad("/sampling_overrides/"+jcs.EscapePointerToken(k), "%q cannot be overridden (allowed: %v)", k, SamplingKeys)
			}
			c, err := jcs.Canonicalize(v)
			if err != nil {
				return p, bad("/sampling_overrides/"+jcs.EscapePointerToken(k), "value is not I-JSON: %v", err)
			}
			p.SamplingOverrides[k] = c
		}
		if len(p.SamplingOverrides) == 0 {
			p.SamplingOverrides = nil
		}
		// Every protocol the upstream speaks must be able to apply every
		// override: a policy never applies some of them on some calls.
		for _, proto := range upstreams[i].speaks() {
			if _, key, err := MapOverrides(proto, p.SamplingOverrides); err != nil {
				return p, bad("/sampling_overrides/"+jcs.EscapePointerToken(key), "upstream %q speaks %s: %v", p.Upstream, proto, err)
			}
		}
	}
	if len(in.Prices) > 0 && !isNull(in.Prices) {
		var pr struct {
			Input              *float64 `json:"input"`
			CachedInput        *float64 `json:"cached_input"`
			CacheCreationInput *float64 `json:"cache_creation_input"`
			Output             *float64 `json:"output"`
		}
		if err := strictObject(in.Prices, &pr); err != nil {
			return p, bad("/prices", "prices must be an object {input, cached_input?, cache_creation_input?, output} in USD per million tokens")
		}
		for name, v := range map[string]*float64{"input": pr.Input, "output": pr.Output} {
			if v == nil {
				return p, bad("/prices/"+name, "prices.%s is required (USD per million tokens)", name)
			}
		}
		for name, v := range map[string]*float64{"input": pr.Input, "cached_input": pr.CachedInput,
			"cache_creation_input": pr.CacheCreationInput, "output": pr.Output} {
			if v != nil && (*v < 0 || math.IsInf(*v, 0)) {
				return p, bad("/prices/"+name, "prices.%s must be a non-negative number", name)
			}
		}
		p.Prices = &Prices{Input: *pr.Input, CachedInput: pr.CachedInput, CacheCreationInput: pr.CacheCreationInput, Output: *pr.Output}
	}
	if in.CaptureTokens != nil {
		p.CaptureTokens = *in.CaptureTokens
	}
	return p, nil
}

func isNull(b json.RawMessage) bool { return string(bytes.TrimSpace(b)) == "null" }

// strictObject decodes a JSON object refusing unknown members.
func strictObject(b json.RawMessage, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the object")
	}
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		return nil
	}
	return fmt.Errorf("not an object")
}

// Canonical returns the policy document in canonical JSON and its
// SHA-256: two creations of a name are identical when these agree.
func (p Policy) Canonical() ([]byte, string, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, "", err
	}
	c, err := jcs.Canonicalize(raw)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(c)
	return c, hex.EncodeToString(sum[:]), nil
}

// ParsePolicy decodes a stored policy document.
func ParsePolicy(body []byte) (Policy, error) {
	var p Policy
	if err := json.Unmarshal(body, &p); err != nil {
		return Policy{}, fmt.Errorf("stored policy: %w", err)
	}
	return p, nil
}
