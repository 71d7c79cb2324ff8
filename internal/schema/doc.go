// Package schema compiles the JSON Schemas gyre does not own: a harness's
// input_schema and a suite's json_schema grader. They come from customers
// and harness authors, so SPEC §2 holds them to one rule, and this package
// is the one place that rule is written down:
//
//   - No URL is ever fetched. $ref and $schema resolve only inside the
//     document and to the meta-schemas of drafts 4, 6, 7, 2019-09 and
//     2020-12 that the library carries; every other URL is refused
//     (ExternalRefError). A root $schema must name one of those five drafts
//     (SPEC §7.2); without one the schema is draft 2020-12.
//   - Formats are asserted.
//   - A pattern runs with Go's RE2 where it compiles, so in linear time;
//     otherwise with an ECMA-262 engine bounded by MatchTimeout per match. A
//     match that times out does not match, so it is a validation error:
//     never a hang and never a pass (Pattern).
//
// Only gyre's embedded contracts (flywheel/1, Harness API v1) are compiled
// elsewhere: they are trusted, so their patterns run without a timeout.
//
// harnesskit (serving an input_schema), internal/eval (checking case inputs
// before a run) and internal/grade (json_schema graders) all compile through
// Compile, so the rule cannot drift between them. Each keeps its own
// wording: Options.Name names the schema in every error, and FirstViolation
// gives the pointer and message of a failure for the caller to frame.
package schema
