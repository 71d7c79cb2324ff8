package grade

// Verdict is one grader's judgement of one item. Pass nil is an abstention:
// the grader could not judge, which is never a failure and is left out of
// every pass-rate denominator. Score, when set, is in [0, 1]. Reason is a
// short explanation; for an abstention it is one of the Reason… codes.
type Verdict struct {
	Grader string   `json:"grader"`
	Pass   *bool    `json:"pass"`
	Score  *float64 `json:"score"`
	Reason string   `json:"reason"`
	// GradingCallIDs link a judge's verdict to the grading calls it made,
	// in order (retries of a malformed answer included); absent for every
	// other grader and where calls are not recorded.
	GradingCallIDs []string `json:"grading_call_ids,omitempty"`
}

// Abstained reports whether v is an abstention.
func (v Verdict) Abstained() bool { return v.Pass == nil }

// Abstention reasons. They are stable codes: stored, counted and shown as
// they are, so a code is never renamed or reused for another meaning.
const (
	// ReasonToolCallsNotReported: tool_calls is null (not reported).
	ReasonToolCallsNotReported = "tool_calls_not_reported"
	// ReasonToolCallsOmitted: tool_calls_omitted_count > 0, so the list is
	// known to be incomplete.
	ReasonToolCallsOmitted = "tool_calls_omitted"
	// ReasonToolCallsNotProvided: an eval run whose harness does not declare
	// provides.tool_calls.
	ReasonToolCallsNotProvided = "tool_calls_not_provided"
	// ReasonTrajectoryInvalid: an eval run without a valid trajectory.
	ReasonTrajectoryInvalid = "trajectory_invalid"
	// ReasonEmittedNotReported: source: emitted, but the gateway's list of
	// emitted calls is unknown (always so on eval runs).
	ReasonEmittedNotReported = "emitted_tool_calls_not_reported"
	// ReasonTargetNull: a text or JSON grader's target is null.
	ReasonTargetNull = "target_null"
	// ReasonPointerNotFound: the grader's pointer does not resolve in output.
	ReasonPointerNotFound = "pointer_not_found"
	// ReasonOutcomeUnknown: the judged call's outcome is unknown.
	ReasonOutcomeUnknown = "outcome_unknown"
	// ReasonOutcomeContradicted: the judged call's status_code contradicts
	// its outcome (ok with >= 400, failed with 2xx).
	ReasonOutcomeContradicted = "outcome_contradicted"
	// ReasonNoEntityIDs: the judged call carries no entity_ids.
	ReasonNoEntityIDs = "no_entity_ids"
	// ReasonEntityKeyMissing: entity_ids exist but not under the asked key.
	ReasonEntityKeyMissing = "entity_key_missing"
	// ReasonArtifactsNotReported: no artifacts were reported at all.
	ReasonArtifactsNotReported = "artifacts_not_reported"
	// ReasonDigestOnly: a content check on an artifact reported by digest only.
	ReasonDigestOnly = "digest_only"
	// ReasonArtifactSkipped: the artifact was reported with a skip marker.
	ReasonArtifactSkipped = "artifact_skipped"
	// ReasonLLMCallsNotReported: no count of LLM calls is known.
	ReasonLLMCallsNotReported = "llm_calls_not_reported"
	// ReasonStepsNotReported: no step count is known.
	ReasonStepsNotReported = "steps_not_reported"
	// ReasonUsageNotReported: no token usage evidence.
	ReasonUsageNotReported = "usage_not_reported"
	// ReasonCostNotReported: no cost evidence.
	ReasonCostNotReported = "cost_not_reported"
	// ReasonRegexTimeout: an ECMA-262 fallback pattern ran out of time.
	ReasonRegexTimeout = "regex_timeout"
	// ReasonJudgeError: the judge answered malformed JSON three times, or
	// the call to it failed.
	ReasonJudgeError = "judge_error"
	// ReasonJudgeUnavailable: no judge is configured where grading runs.
	ReasonJudgeUnavailable = "judge_unavailable"
	// ReasonGraderError: a command grader failed, timed out or printed
	// something other than a verdict.
	ReasonGraderError = "grader_error"
	// ReasonGraderNotAllowed: a command grader that this environment does
	// not allow.
	ReasonGraderNotAllowed = "grader_not_allowed"
	// ReasonNotImplemented: the grader cannot grade this kind of item yet.
	ReasonNotImplemented = "not_implemented"
)

// Reasons that appear on failures (pass false) rather than abstentions.
const (
	// ReasonNoSuchCall: a complete tool-call list holds no matching call.
	ReasonNoSuchCall = "no_such_call"
	// ReasonArtifactMissing: the reported artifacts do not include the name.
	ReasonArtifactMissing = "artifact_missing"
	// ReasonNotJSON: a JSON grader's target text does not parse as JSON.
	ReasonNotJSON = "not_json"
)

// Flags are the parts of a grader's declaration that decide what its
// verdict counts for.
type Flags struct {
	// Optional verdicts are reported but never decide.
	Optional bool `json:"optional"`
	// Weight is the grader's weight in Reward; 0 means the default, 1.
	Weight float64 `json:"weight"`
}

func (f Flags) weight() float64 {
	if f.Weight <= 0 {
		return 1
	}
	return f.Weight
}

// GraderRef records which grader produced a verdict, at which version, with
// which flags, so that a stored verdict set can be classified and compared
// without the suite that produced it.
type GraderRef struct {
	// Label is the verdict's grader field.
	Label string `json:"grader"`
	// Name is the grader kind, e.g. "tool_called".
	Name string `json:"name"`
	// Version is the grader implementation's version.
	Version string `json:"version"`
	Flags
}

// VerdictSet is the result of grading one item with one suite: verdicts in
// the suite's order, with the graders that produced them.
type VerdictSet struct {
	// ItemSchema is the graded item's schema tag.
	ItemSchema string `json:"item_schema"`
	// Verdicts holds one verdict per grader, in suite order.
	Verdicts []Verdict `json:"verdicts"`
	// Graders is parallel to Verdicts.
	Graders []GraderRef `json:"graders"`
}

// Flags returns the flags of each grader, parallel to Verdicts.
func (s VerdictSet) Flags() []Flags {
	out := make([]Flags, len(s.Graders))
	for i, g := range s.Graders {
		out[i] = g.Flags
	}
	return out
}

// Classify classifies the set; see Classify.
func (s VerdictSet) Classify() Classification { return Classify(s.Verdicts, s.Flags()) }

// Reward is the set's reward; see Reward.
func (s VerdictSet) Reward() *float64 { return Reward(s.Verdicts, s.Flags()) }

// Classification is how a graded run or rollout counts (SPEC §7.2). The
// evaluator adds "error" for runs that never produced a gradable item.
type Classification string

// The classifications that verdicts can produce.
const (
	Passed   Classification = "passed"
	Failed   Classification = "failed"
	Unscored Classification = "unscored"
)

func flagAt(flags []Flags, i int) Flags {
	if i < len(flags) {
		return flags[i]
	}
	return Flags{}
}

// Classify decides a run or rollout from its verdicts: failed when any
// non-optional, non-abstaining grader failed; passed when at least one
// non-optional grader gave a verdict and all of those passed; unscored when
// every non-optional grader abstained or there is none. flags is parallel
// to verdicts; missing entries mean non-optional.
func Classify(verdicts []Verdict, flags []Flags) Classification {
	decided := 0
	for i, v := range verdicts {
		if flagAt(flags, i).Optional || v.Pass == nil {
			continue
		}
		if !*v.Pass {
			return Failed
		}
		decided++
	}
	if decided == 0 {
		return Unscored
	}
	return Passed
}

// Score is the verdict's score: its own when set, else 1 for a pass and 0
// for a failure; nil for an abstention.
func Score(v Verdict) *float64 {
	if v.Pass == nil {
		return nil
	}
	if v.Score != nil {
		s := *v.Score
		return &s
	}
	s := 0.0
	if *v.Pass {
		s = 1
	}
	return &s
}

// Reward is the weighted mean score of the non-abstaining, non-optional
// verdicts (SPEC §9), or nil when there is none. flags is parallel to
// verdicts; missing entries mean non-optional with weight 1. The advisory
// reward an agent reports is never an input.
func Reward(verdicts []Verdict, flags []Flags) *float64 {
	var sum, total float64
	for i, v := range verdicts {
		f := flagAt(flags, i)
		if f.Optional {
			continue
		}
		s := Score(v)
		if s == nil {
			continue
		}
		sum += f.weight() * *s
		total += f.weight()
	}
	if total == 0 {
		return nil
	}
	r := sum / total
	return &r
}

func boolp(b bool) *bool { return &b }

func pass(reason string) Verdict  { return Verdict{Pass: boolp(true), Reason: reason} }
func fail(reason string) Verdict  { return Verdict{Pass: boolp(false), Reason: reason} }
func abstain(code string) Verdict { return Verdict{Reason: code} }
func judged(ok bool, reason string) Verdict {
	if ok {
		return pass(reason)
	}
	return fail(reason)
}
