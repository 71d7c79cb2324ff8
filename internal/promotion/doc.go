// Package promotion owns an agent's promoted policy (SPEC §10): the
// policy its production endpoint serves and every new batch without a
// policy of its own resolves to, with a history of who set it, when, and
// through which promotion.
//
// This package holds the rules and the small store interface they need;
// the SQL store implements it on both engines. The promotion job itself
// (paired statistics, the gate) is not built yet: it will set the policy
// through Store.SetPromotedPolicy, a compare-and-set against the baseline
// it measured.
package promotion
