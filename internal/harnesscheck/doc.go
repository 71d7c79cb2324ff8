// Package harnesscheck implements `gyre harness check` and `gyre lint`
// (SPEC §7.3): a conformance check of a Harness API v1 server, and a static
// check of a suite, optionally against a harness's capabilities.
//
// Run checks one harness and returns a Report, one Check per name in Names,
// each PASS, FAIL, WARN or SKIP with a detail:
//
//	rep, err := harnesscheck.Run(ctx, harnesscheck.Config{URL: "http://127.0.0.1:8080", APIKey: key})
//	rep.WriteText(os.Stdout) // "PASS capabilities: agent \"desk\"; …"
//	if rep.Failed() { … }
//
// The checks are: capabilities (GET /capabilities validated against the
// embedded OpenAPI document with format assertions), contract_version (v1),
// check_input (against the declared input_schema or the default question
// schema), run (check_input end to end: create, 201, poll, terminal status
// with a model), fixtures (a fixture delivered as a URL the harness must
// fetch from an ephemeral listener, and as a multipart part, as accepts
// declares), trajectory (valid ATIF), stop (a stopped run goes cancelled),
// listing.query, listing.pagination, listing.time_range and
// listing.session_id (the contract's GET /runs semantics, on runs the
// check creates), and workspace (listed paths are workspace-relative and
// files are served with the listed sizes). Every answer the harness sends
// is validated against its operation in harnesskit.ContractJSON; a check
// that cannot apply (a capability the harness does not declare, no run
// input) is skipped with the reason. docs/harness-check.md is the user's
// reference.
//
// The harness is untrusted: the client never follows a redirect (a 3xx is
// a failure), sends x-api-key only to the harness's origin, bounds every
// answer it reads (capabilities 1 MiB, statuses and listings 8 MiB,
// trajectories 256 MiB, files 64 MiB) and every call in time.
//
// Lint checks a suite file or directory (through package suite: syntax,
// unique case ids, grader configs, fixture names and presence) and, given
// a harness's capabilities, every case input against its input schema and
// whether the case's fixtures can be delivered with its accepts.
package harnesscheck
