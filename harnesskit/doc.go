// Package harnesskit is gyre's implementation of Harness API v1, the HTTP
// contract a team's agent harness implements so that an evaluator can drive
// it: GET /capabilities, POST /runs, GET /runs/{id} until terminal, then the
// run's ATIF trajectory, workspace files and artifacts.
//
// The contract is an OpenAPI 3.1 document, embedded byte for byte as
// ContractJSON for validators; it is the authority. This package holds
// hand-written Go types for every component schema (Capabilities, Accepts,
// Provides, Limits, RunRequest, RunMetadata, FileRef, RunCreated, RunStatus,
// ArtifactRef, RunList, RunListItem, FileList, FileEntry). gyre's evaluator
// uses them as a client.
//
// # Serving a harness
//
// New wraps any Agent (a Go function, with AgentFunc) in a Server, an
// http.Handler that implements every endpoint of the contract:
//
//	srv, err := harnesskit.New(harnesskit.AgentFunc(answer), harnesskit.Options{Agent: "desk", Model: "gpt-4.1"})
//	…
//	defer srv.Close()
//	http.ListenAndServe(addr, srv)
//
// GET /capabilities is built from Options. POST /runs validates the request
// against the contract's RunRequest schema and the input against the
// declared input_schema (or the default question schema), answering 422
// with a JSON Pointer when either fails; it takes a JSON body (fixture
// files as urls the kit fetches itself, http and https only unless
// Options.FetchFile says otherwise, bounded in size and time) or multipart
// (a payload part and one part per file, paired by filename or form name).
// Runs wait in a bounded queue for a bounded pool of workers and go queued,
// running, then completed, failed or cancelled; POST /runs/{id}/stop
// cancels the context the agent runs under. The agent records the run's
// ATIF trajectory (ATIFVersion) and writes workspace files through its
// *Run; the kit serves them at GET /runs/{id}/trajectory (once terminal)
// and GET /runs/{id}/files, from a per-run temporary directory opened as
// an *os.Root. GET /runs lists runs with the contract's filters.
//
// Errors are JSON, {"error":{"code","message","pointer"}} (see Error).
// Finished runs are dropped, with their workspaces, beyond
// Options.RetainRuns or after Options.RetainFor. Package harnesskittest
// validates responses against the embedded contract in tests.
//
// Every schema allows additional properties, and the types keep them: a
// member a type does not name lands in its Extra map and is written back, so
// a capabilities snapshot taken through Capabilities is complete. Nullable
// members are pointers (or json.RawMessage) and are omitted when nil; the
// contract gives each of them the default null. Flags default to false,
// Capabilities.ContractVersion to "v1" (see Capabilities.Version). A test
// walks the embedded document and fails when the types drift from it.
package harnesskit
