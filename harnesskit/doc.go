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
// uses them as a client; a later part of this package will use them to serve
// a harness around a Go agent.
//
// Every schema allows additional properties, and the types keep them: a
// member a type does not name lands in its Extra map and is written back, so
// a capabilities snapshot taken through Capabilities is complete. Nullable
// members are pointers (or json.RawMessage) and are omitted when nil; the
// contract gives each of them the default null. Flags default to false,
// Capabilities.ContractVersion to "v1" (see Capabilities.Version). A test
// walks the embedded document and fails when the types drift from it.
package harnesskit
