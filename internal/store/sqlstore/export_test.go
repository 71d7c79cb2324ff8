package sqlstore

// PGClaimSQL is the one-statement claim picking up to limit rollouts, for
// plan tests in sqlstore_test.
func PGClaimSQL(limit int) string { return claimSQL[limit] }

// ClaimStatements is how many combined claim statements s has run.
func ClaimStatements(s *Store) int64 { return s.claims.statements.Load() }
