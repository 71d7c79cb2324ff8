// Package atif reads, checks, writes and converts ATIF documents: the Agent
// Trajectory Interchange Format that Harbor defined for one agent run (a
// root object with metadata and an ordered list of system, user and agent
// steps, with tool calls, their observations and per-step LLM metrics).
//
// # Types
//
// One set of Go types (Trajectory, Step, ToolCall, Observation, …) covers
// every field of ATIF-v1.0 to ATIF-v1.7. Which fields a document may use
// depends on its schema_version and is the validator's business. Values
// whose shape ATIF leaves open (extra, arguments, tool definitions) are
// json.RawMessage, kept as sent.
//
// # Accepted versions
//
// The embedded atif-accepted.json (AcceptedJSON, AcceptedVersions) lists
// the schema_version values gyre accepts, initially ATIF-v1.0 …
// ATIF-v1.7. A document whose schema_version is missing (Harbor would
// default it) or not listed is invalid.
//
// # Validation
//
// Check, Validate and Parse (and the same methods of a Validator built
// with NewValidator) enforce the required subset of ATIF in one pass over
// the JSON text and report every violation, in document order, with a
// Harbor-style path such as
//
//	steps.3.observation.results.0.source_call_id: "call_9" does not match any tool_call_id of this step
//	subagent_trajectories.1.agent.version: field required
//
// Paths are relative to the document root, use 0-based array indexes, and
// continue into embedded subagent trajectories, which are checked
// recursively against their own schema_version.
//
// The rules, where gyre follows Harbor and where it is stricter:
//
//   - Objects are closed, as in Harbor's models: an unknown key is a
//     violation ("unexpected field (not part of ATIF schema)"), except
//     inside extra, arguments and tool_definitions entries, which hold any
//     JSON. A key repeated within one object is a violation too.
//   - Fields are gated by version (reference/atif.md §5), which Harbor does
//     not do: a field added in a later version than the document's is an
//     unexpected field ("not part of ATIF-v1.2; added in ATIF-v1.7"), content
//     part arrays need v1.6, an observation on a system step needs v1.2.
//   - Required: schema_version; agent.name and agent.version (strings);
//     steps (at least one); step_id, source and message on every step;
//     tool_call_id, function_name and arguments on every tool call;
//     observation.results; session_id before v1.7 (root and subagent
//     references); trajectory_id on every embedded subagent trajectory.
//   - step_id equals position + 1 ("expected 2 (sequential from 1), got
//     3"); source is system, user or agent; model_name, reasoning_effort,
//     reasoning_content, tool_calls (even []) and metrics only on agent
//     steps; each non-null source_call_id names a tool_call_id of the same
//     step; arguments is an object, never a JSON-encoded string; content is
//     a string or an array of well-formed parts (text with text, image with
//     a source of type image/jpeg, png, gif or webp).
//   - Types are JSON types, without Harbor's coercions: a numeric string
//     is not a number, true is not an integer. Integers may be written 1,
//     1.0 or 1e3 (pydantic accepts integral floats) and lie within
//     ±(2^53−1); numbers must be finite doubles. null means absent for
//     every optional field.
//   - Timestamps are ISO 8601 in the extended forms real producers write:
//     YYYY-MM-DD, optionally followed by T or a space, hh:mm[:ss[.f]]
//     (1–9 fraction digits) and Z or ±hh:mm. Harbor (Python's
//     fromisoformat) also takes basic, week-date and hour-only forms; gyre
//     does not.
//   - v1.7: llm_call_count ≥ 0, and 0 on an agent step forbids metrics and
//     reasoning_content; each subagent reference carries trajectory_id or
//     trajectory_path; embedded trajectory_ids are unique among siblings.
//     Like Harbor v1.7, a trajectory_id reference need not resolve to an
//     embedded trajectory (the subagents may be stored elsewhere), and a
//     tool_call_id may repeat within a step.
//   - total_steps ≥ 0. Token counts are not bounded and totals are not
//     checked against the steps (Harbor does neither).
//
// Work is bounded: documents over Options.MaxBytes, text that is not UTF-8
// or not JSON, and nesting deeper than Options.MaxDepth get one violation;
// at most Options.MaxViolations violations are listed and the rest counted.
// Image files are checked only when Options.ImageDir is set.
//
// # Converters and helpers
//
// ToChat turns a trajectory into OpenAI chat messages, dropping steps
// marked is_copied_context. FromGateway builds a trajectory from the LLM
// gateway's records of one rollout (GatewayRecord) and the rollout's
// flywheel/1 output. AgentSteps, LLMCalls, TotalUsage and ToolUses read a
// trajectory the way the evaluator scores it.
package atif
