// Package supportdesk is the example support-desk agent (examples/agent):
// an OpenAI chat model with three tools over an in-memory order system
// (lookup_order, cancel_order, issue_refund). It is an ordinary program —
// question in, answer out — that also speaks gyre's side channel:
//
//   - under gyre worker it records its tool calls with flywheel.Recorder
//     and writes the report to GYRE_REPORT and its files to
//     GYRE_ARTIFACTS_DIR;
//   - in production, with GYRE_CAPTURE_URL, GYRE_CAPTURE_KEY and
//     GYRE_CAPTURE_AGENT set, it sends each turn it answers, with its
//     tool calls, to gyre's POST /turns through flywheel.Attach.
//
// examples/agent's main calls Main; gyre demo runs the same code as the
// hidden command gyre demo agent, so a gyre binary needs no Go toolchain
// to run the demo's agent.
package supportdesk
