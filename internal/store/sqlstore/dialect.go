package sqlstore

import (
	"io/fs"

	"github.com/pressly/goose/v3"
)

// Dialect is everything sqlstore needs to know about one SQL engine. It is
// deliberately small: queries are shared, so a dialect only classifies
// errors and names the few engine-specific statements.
type Dialect struct {
	// Engine is what Store.Engine reports: "sqlite" or "postgres".
	Engine string
	// Goose is the goose dialect of the engine's migrations.
	Goose goose.Dialect
	// Migrations holds the engine's goose SQL migrations at its root.
	Migrations fs.FS
	// VersionTableExists is a query returning one boolean row: whether
	// goose's version table exists where the store looks for it.
	VersionTableExists string
	// TxLock, when set, is a statement taking a lock identified by the
	// int64 $1 until the transaction ends (pg_advisory_xact_lock). It is
	// empty on engines whose write transactions already exclude each other.
	TxLock string
	// LockRows is appended to a SELECT that picks rows to change, to lock
	// them against other transactions (" FOR UPDATE OF r"); empty where
	// write transactions already exclude each other.
	LockRows string
	// SkipLocked is like LockRows but skips rows other transactions hold
	// (" FOR UPDATE OF r SKIP LOCKED"), for claims and sweeps.
	SkipLocked string
	// NowExpr, when set, is an SQL expression of the database's current
	// time in microseconds since the epoch; lease and deadline decisions
	// use it when Config.DatabaseClock is set.
	NowExpr string
	// OneStatementClaim leases with pgClaimSQL, one round trip, when
	// the database's clock decides leases (PostgreSQL).
	OneStatementClaim bool
	// AnalyzeRollouts, when set, are the statements, run in one
	// transaction, that refresh the planner's statistics of the rollouts
	// table after a batch queues many rollouts at once. Claims
	// must find the claimable index however fresh the table is: without
	// statistics PostgreSQL estimates one row per agent, picks the
	// tenant index and sorts every rollout the agent ever had on each
	// claim (3.9 ms instead of 0.2 ms at 5,000 rollouts, growing with
	// history), and autovacuum's analyze comes only a minute or more later.
	AnalyzeRollouts []string
	// GroupCommit runs concurrent write transactions as savepoints of one
	// transaction with one commit (see groupWriter). For engines with a
	// single writer connection, where every commit waits for the previous.
	GroupCommit bool
	// InProcessReads means a read is a call into the process, never a wait
	// on a peer (SQLite in WAL mode: readers take no locks). The hottest
	// point reads then run without the caller's cancellation: for a
	// cancellable context database/sql and the driver each start a
	// goroutine per query to watch it, which costs more than the read.
	InProcessReads bool
	// JSONArrayText is a FROM item, with %s standing for a TEXT column
	// holding a JSON array of strings, that yields one row per element
	// with the element's text in column j.value.
	JSONArrayText string
	// JSONIsString is an SQL expression, with %[1]s standing for a TEXT
	// column holding a JSON object and %[2]s for a member name, that is 1
	// when the member holds a string and 0 otherwise (null or absent).
	JSONIsString string
	// IsUniqueViolation reports whether err is a unique-constraint violation.
	IsUniqueViolation func(err error) bool
	// IsRetryable reports whether a write transaction failed only because
	// of a concurrent one and may be run again from the start. Nil means
	// never.
	IsRetryable func(err error) bool
}

// versionTable is goose's version table, the same on both engines.
const versionTable = goose.DefaultTablename
