package harnesskit

import (
	"context"
)

// Agent is the Go code a Server wraps: it performs one run. The kit calls Run
// on a worker goroutine once the run leaves the queue, with every fixture
// file already delivered (uploaded or fetched).
//
// ctx is cancelled when the evaluator stops the run (POST /runs/{id}/stop) or
// the server closes; an agent should return promptly then, and the run ends
// cancelled whatever it returns. An error ends the run failed with the
// error's text as RunStatus.error (the text reaches the evaluator: keep
// secrets out of it). A nil error ends it completed with the Result. A
// panic is recovered and fails the run.
//
// Record the trajectory, workspace files and display data through run, which
// is safe for concurrent use while Run executes.
type Agent interface {
	Run(ctx context.Context, run *Run) (Result, error)
}

// AgentFunc adapts a function to Agent.
type AgentFunc func(ctx context.Context, run *Run) (Result, error)

// Run calls f.
func (f AgentFunc) Run(ctx context.Context, run *Run) (Result, error) { return f(ctx, run) }

// Result is what a completed run produced. A completed RunStatus carries
// answer, output or both: Answer is reported when it is not empty or when
// Output is nil, so a completed run always carries one of them.
type Result struct {
	// Answer is the final user-visible answer.
	Answer string
	// Output is the agent's structured result, for agents that return
	// typed data. It must encode to a JSON object (a struct, a map or a
	// json.RawMessage holding an object); anything else fails the run.
	Output any
	// Error is a non-fatal error a completed run reports, for example with
	// a partial answer.
	Error string
	// Artifacts are deliverables the run produced, reported in RunStatus
	// after those added with Run.AddArtifact or Run.WriteArtifact.
	Artifacts []ArtifactRef
}

// File is one fixture file of a run, delivered before the agent starts.
type File struct {
	// Name is the fixture key: the name to present to the agent.
	Name string
	// Context says what the file holds, from the suite's fixture registry;
	// empty when the request gave none.
	Context string
	// URL is the url the kit fetched the bytes from (accepts.file_urls);
	// empty for a multipart upload.
	URL string
	// ContentType is the media type the upload or the fetch declared, if
	// any.
	ContentType string
	// Data is the file's bytes.
	Data []byte
}
