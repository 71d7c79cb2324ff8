package grade

// Reasons a rollout is not training grade (SPEC §9). They are stable codes,
// listed on the rollout and counted in dataset manifests. Codes with a
// trailing colon take a suffix.
const (
	// NotGradeState + <state>: the rollout ended in a server-side state
	// other than submitted or graded (abandoned, deadline_exceeded,
	// cancelled, released), or has not been submitted yet (queued, leased).
	NotGradeState = "state:"
	// NotGradeExcluded + <reason>: the output carries an exclusion.
	NotGradeExcluded = "excluded:"
	// NotGradeToolCallsNotReported: tool_calls is null.
	NotGradeToolCallsNotReported = "tool_calls_not_reported"
	// NotGradeToolCallsOmitted: tool_calls_omitted_count > 0.
	NotGradeToolCallsOmitted = "tool_calls_omitted"
	// NotGradeLLMCallCountNotReported: the agent reported no llm_call_count,
	// so reconciliation could not decide (unreconciled for that reason).
	NotGradeLLMCallCountNotReported = "llm_call_count_not_reported"
	// NotGradeOffPolicy: the agent's count differs from the gateway's.
	NotGradeOffPolicy = "off_policy"
	// NotGradeUnreconciled + <reason>: reconciliation ended unreconciled
	// for another reason (e.g. gateway_records_lost).
	NotGradeUnreconciled = "unreconciled:"
	// NotGradeReconciliationPending: reconciliation has not decided yet.
	NotGradeReconciliationPending = "reconciliation_pending"
	// NotGradeLateSubmission: the output arrived after deadline_ts.
	NotGradeLateSubmission = "late_submission"
	// NotGradeLeaseLapsed: the output arrived after the lease had lapsed.
	NotGradeLeaseLapsed = "lease_lapsed"
	// NotGradeNoVerdict: no non-optional grader gave a non-abstaining verdict.
	NotGradeNoVerdict = "no_verdict"
	// NotGradeNoCompletions: the gateway counted no completion.
	NotGradeNoCompletions = "no_completions"
	// NotGradeBodiesNotCaptured: request/response bodies were not captured
	// (capture mode usage or none).
	NotGradeBodiesNotCaptured = "bodies_not_captured"
)

// Reconciliation states (SPEC §6.3).
const (
	OnPolicy     = "on_policy"
	OffPolicy    = "off_policy"
	Unreconciled = "unreconciled"
)

// TrainingFacts are the facts the training-grade decision reads. The
// advisory reward and success an agent reports are deliberately not among
// them.
type TrainingFacts struct {
	// State is the rollout state (queued, leased, submitted, graded,
	// abandoned, deadline_exceeded, cancelled, released).
	State string
	// Exclusion is the output's exclusion reason, "" when none.
	Exclusion string
	// ToolCallsReported is false when tool_calls was null.
	ToolCallsReported bool
	// ToolCallsOmittedCount is the output's tool_calls_omitted_count.
	ToolCallsOmittedCount int
	// Reconciliation is on_policy, off_policy, unreconciled, or "" while
	// undecided; ReconciliationReason is its reason (for unreconciled).
	Reconciliation       string
	ReconciliationReason string
	// SubmittedBeforeDeadline: the output was accepted at or before
	// deadline_ts (not merely within the grace period).
	SubmittedBeforeDeadline bool
	// LeaseLiveAtSubmit: the lease had not lapsed when the output was
	// accepted.
	LeaseLiveAtSubmit bool
	// Verdicts and Flags are the current verdict set (Flags parallel to
	// Verdicts; missing entries mean non-optional).
	Verdicts []Verdict
	Flags    []Flags
	// CountedCompletions is the gateway's count of counted completions.
	CountedCompletions int
	// BodiesCaptured: request and response bodies were recorded.
	BodiesCaptured bool
}

// TrainingGrade decides whether a rollout is training grade (SPEC §9) and,
// when it is not, lists every reason in a stable order. reasons is empty
// (not nil) for a training-grade rollout.
func TrainingGrade(f TrainingFacts) (ok bool, reasons []string) {
	reasons = []string{}
	switch f.State {
	case "submitted", "graded":
	case "":
		reasons = append(reasons, NotGradeState+"unknown")
	default:
		reasons = append(reasons, NotGradeState+f.State)
	}
	if f.Exclusion != "" {
		reasons = append(reasons, NotGradeExcluded+f.Exclusion)
	}
	if !f.ToolCallsReported {
		reasons = append(reasons, NotGradeToolCallsNotReported)
	}
	if f.ToolCallsOmittedCount > 0 {
		reasons = append(reasons, NotGradeToolCallsOmitted)
	}
	switch f.Reconciliation {
	case OnPolicy:
	case OffPolicy:
		reasons = append(reasons, NotGradeOffPolicy)
	case Unreconciled:
		switch f.ReconciliationReason {
		case NotGradeLLMCallCountNotReported:
			reasons = append(reasons, NotGradeLLMCallCountNotReported)
		case "":
			reasons = append(reasons, NotGradeUnreconciled+"unknown")
		default:
			reasons = append(reasons, NotGradeUnreconciled+f.ReconciliationReason)
		}
	case "":
		reasons = append(reasons, NotGradeReconciliationPending)
	default:
		reasons = append(reasons, NotGradeUnreconciled+f.Reconciliation)
	}
	if !f.SubmittedBeforeDeadline {
		reasons = append(reasons, NotGradeLateSubmission)
	}
	if !f.LeaseLiveAtSubmit {
		reasons = append(reasons, NotGradeLeaseLapsed)
	}
	decided := false
	for i, v := range f.Verdicts {
		if !flagAt(f.Flags, i).Optional && v.Pass != nil {
			decided = true
			break
		}
	}
	if !decided {
		reasons = append(reasons, NotGradeNoVerdict)
	}
	if f.CountedCompletions < 1 {
		reasons = append(reasons, NotGradeNoCompletions)
	}
	if !f.BodiesCaptured {
		reasons = append(reasons, NotGradeBodiesNotCaptured)
	}
	return len(reasons) == 0, reasons
}
