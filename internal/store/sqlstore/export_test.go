package sqlstore

// PGClaimSQL is the one-statement claim, for plan tests in sqlstore_test.
const PGClaimSQL = pgClaimSQL
