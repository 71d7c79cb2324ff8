// Package gateway is gyre's LLM gateway (SPEC §6): a per-rollout
// OpenAI-compatible proxy that admits a request by the rollout's gateway
// token and api_key, routes it to the policy's upstream with the policy's
// model and sampling overrides, streams the answer back event by event, and
// records every call — bodies as content-addressed blobs, usage, cost,
// timings, the server-derived fingerprint and the tool_call_ids emitted and
// consumed — so that grading can reconcile what the agent reported with
// what really went over the wire.
//
// The request path does no blocking write except twice per rollout and
// replica: a durable touch row before the rollout's first request goes
// upstream, and a provisional record before its first counted completion
// is delivered (so that a release right after it answers 409). Everything
// else goes to the Recorder, which batches records in memory and flushes
// them within a bounded delay together with the replica's heartbeat and
// flush watermark, the two facts reconciliation waits on (§6.3).
//
// Revocation reaches requests in flight: the Recorder re-reads the state of
// every rollout with a request in flight twice a second and cancels those
// whose credential no longer admits requests, on every replica, because the
// store is shared.
package gateway
