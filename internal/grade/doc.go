// Package grade is gyre's one grading engine (SPEC §8). It grades eval runs
// and rollouts alike, from a single documented input, the graded item
// (gyre.graded-item/1, see Item), through graders declared in suites.
//
// The flow is:
//
//	specs, err := grade.ParseSpecs(raw)   // strict; errors carry JSON Pointers
//	suite, err := grade.Compile(specs)    // frozen, reusable, safe for concurrent use
//	set, err := suite.Grade(ctx, item, env)
//	set.Classify()                         // passed | failed | unscored
//	set.Reward()                           // weighted mean score, or nil
//
// A verdict's pass is true, false or nil; nil is an abstention, which is
// never a failure: the grader could not judge from the evidence it was given
// (tool calls not reported, a list known to be incomplete, an outcome the
// agent could not observe, a digest without content…). Abstention reasons
// are a stable vocabulary (the Reason… constants) so that they can be counted.
//
// The package also decides whether a rollout is training grade (SPEC §9,
// TrainingGrade). It never reads the agent's advisory reward, success or
// fingerprint: they are not part of the graded item.
package grade
