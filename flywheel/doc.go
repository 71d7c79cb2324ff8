// Package flywheel is gyre's implementation of flywheel/1, the wire contract
// between a customer-run agent (the flywheel) and the control plane.
//
// The contract is a JSON Schema 2020-12 document, embedded here byte for byte
// as ContractJSON; it is the authority, and nothing in this package is
// generated from it or changes it. The package offers three things on top:
//
//   - Hand-written Go types, one per $defs entry (ToolCallRecord,
//     ProductionTurn, ProductionTurnBatch, Exclusion, RolloutRequest,
//     RolloutOutput, ClaimResponse), whose JSON encoding keeps every
//     distinction the contract draws. A required-but-nullable member is
//     always sent, as null or a value (ToolCallRecord.StatusCode,
//     ProductionTurn.ToolCalls). An optional member is omitted when absent.
//     An optional-and-nullable member is an Optional, which tells absent,
//     null and a value apart: RolloutOutput.ToolCalls set to Null means "not
//     reported", set to Some of an empty slice means "observed zero calls".
//     Members of unknown shape (arguments, output, metadata, fingerprints,
//     events, timing) are json.RawMessage, kept byte for byte. Tests walk the
//     schema and the types by reflection and fail when either drifts.
//
//   - A Validator that checks a body against a definition with a real draft
//     2020-12 validator (github.com/santhosh-tekuri/jsonschema/v6): formats
//     asserted, if/then and additionalProperties:false enforced, and the
//     contract's lookahead patterns run with ECMA-262 semantics (see
//     regex.go). Its *ValidationError lists every violation with an RFC 6901
//     pointer, ordered by position in the JSON text, so the first one is what
//     a 422 invalid_body answer points at, e.g.
//     /turns/3/tool_calls/0/status_code. It also rejects what gyre cannot
//     store faithfully: text that is not I-JSON (duplicate keys, invalid
//     UTF-8, unpaired surrogates, numbers beyond the double range) and
//     integers beyond ±(2^53−1).
//
//   - Helpers for both directions of the wire: Validate and Unmarshal for
//     bodies received, Marshal and ValidateValue for bodies sent (a server
//     validates every RolloutRequest and ClaimResponse before it sends one),
//     and ValidateAgentID and ValidateTurnID for identifiers that arrive as
//     path parameters.
//
// What the contract leaves to the server (claim, heartbeat and output
// routes, leases, replay and conflict rules, artifact digest checks) is
// gyre's, described in its SPEC; Artifact.Verify implements the artifact
// intake rule because it is a property of the value alone.
//
// The package is also the agent side's SDK (SPEC §5):
//
//   - Client speaks the flywheel/1 routes of a gyre server (claim,
//     heartbeat, release, output, POST /turns) and validates what it sends
//     and receives.
//   - Serve is gyre worker's loop as a library: it claims rollouts, runs a
//     Handler for each, heartbeats every third of the granted lease,
//     corrects deadlines for the server's clock, submits outputs (with a
//     minimal fallback after a 422 or 413), and drains on shutdown.
//   - Recorder records a Go agent's tool calls with honest outcomes
//     (unknown unless observed; a status code only with an observed
//     verdict), counts its completions, and writes the Report that gyre
//     worker reads from GYRE_REPORT. LoadAgentEnv reads the rest of the
//     environment gyre worker gives an agent.
//   - Encoder, ReportedToolCalls and NotReported keep null, [] and
//     required-null members exact on the wire.
//   - Attach captures production turns: validated, queued without ever
//     blocking the agent, sent in batches to POST /turns, retried, split
//     to isolate a bad turn, flushed on Close.
package flywheel
