// Package promotion owns an agent's promoted policy (SPEC §10): the
// policy its production endpoint serves and every new batch without a
// policy of its own resolves to, with a history of who set it, when, and
// through which promotion.
//
// This package holds the rules and the small store interface they need;
// the SQL store implements it on both engines. Decide is the promotion
// gate: a pure function from both sides' per-task counts to a decision
// (promoted or rejected, with every failed rule) and its evidence, using
// the paired bootstrap of gyre eval compare. The promotion job sets the
// policy through Store.SetPromotedPolicy, a compare-and-set against the
// baseline it measured.
package promotion
