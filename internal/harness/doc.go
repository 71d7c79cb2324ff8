// Package harness is the harness registry (SPEC §4.8, §7.3): a tenant's
// Harness API v1 servers, registered once with their API key, and the
// calls the web UI's sessions browser makes to them.
//
// A Registry owns the rules: a harness name follows the name grammar and
// is registered once per tenant (the same name with the same URL and key
// is the existing harness; anything else is harness_exists); its base URL
// is http or https without credentials, query or fragment, and — unless
// the operator allows private targets — neither it nor the address it
// resolves to at each dial may be loopback, private, link-local or shared
// address space, the rule the gateway applies to its upstreams. The
// harness's key is sealed with package secret under GYRE_SECRET_KEY,
// bound to its tenant and harness id; without that key a harness with an
// API key is refused (secret_key_unset) rather than stored in clear, and
// the key is never shown again.
//
// The sessions browser's calls go through the evaluator's harness client
// (package eval), which treats the harness as untrusted: no redirects, the
// key only to its origin, bounded answers. The Registry bounds each call's
// time as well and turns every failure into a clear 502 (harness_timeout,
// harness_unreachable, harness_invalid_response, harness_error), never a
// hang or a 500.
package harness
