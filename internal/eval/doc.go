// Package eval is gyre's evaluator (SPEC §7): a Harness API v1 client, the
// experiment runner behind `gyre eval run`, and the reports behind `gyre
// eval show` and `gyre eval compare`. docs/eval.md is the user's reference.
//
// A Runner takes a loaded suite and runs every (case, repetition) against
// one harness:
//
//	client, _ := eval.NewClient(url, apiKey, nil, eval.Limits{})
//	runner, _ := eval.NewRunner(cfg, eval.Deps{Client: client, Recorder: rec, Fixtures: fx})
//	res, err := runner.Run(ctx, suite) // *ConfigError: nothing was created; exit 1
//
// Before any run it snapshots the capabilities, checks every case input
// against the harness's input_schema (CompileInputSchema) and the model and
// fixture delivery the harness accepts. Runs then go at most
// min(concurrency, limits.max_concurrent_runs) at a time; each one is
// created, recorded with its run_id at once, polled with backoff, stopped
// on timeout, its trajectory fetched once and validated (package atif), its
// workspace fetched, and graded (package grade). Calls to the harness are
// classified (CallError): backpressure slows the experiment down, transport
// errors, 5xx and invalid answers are retried with new runs, other 4xx are
// not. The harness is untrusted: no redirects, bounded sizes (Limits),
// escaped paths, the key only to its origin.
//
// A Recorder persists the experiment: StoreRecorder into the embedded store
// and blob store, RemoteRecorder into a gyre serve through its API (SPEC
// §7.5, the wire types of wire.go). Fixtures deliver case files as
// multipart parts or as URLs: blob store URLs, or signed gyre URLs that a
// FixtureSigner mints and Fixtures.Handler serves.
//
// A run record goes to the recorder as soon as it is made and is not kept;
// the run's report is reduced from per-case samples (grade.Reduce) into a
// Report with the exit code of SPEC §7.2, so memory grows by a sample per
// run, not a record. Stored experiments are read back a page at a time
// (Recorder.AllRuns): ReportFrom summarises one the same way, Show and
// CompareReports build the show and compare forms, and WriteJUnit writes
// one testcase per (case, repetition).
package eval
