// Package sqlstore is gyre's one implementation of store.Store, written
// once over database/sql and parametrised by a small Dialect. The engine
// packages (sqlitestore, pgstore) only open connections, pick the dialect
// and hand both to New; every query and rule lives here, so the two
// engines cannot drift apart.
//
// Conventions for code in this package:
//
//   - SQL is written once, with $1, $2… placeholders, which both drivers
//     accept natively (modernc.org/sqlite binds $N to the N-th argument), so
//     no query is rewritten per engine. Go bools, int64, string and []byte
//     bind and scan the same way on both.
//   - Every write goes through Store.write, which runs a function in one
//     transaction: IMMEDIATE on SQLite (one writer, no SQLITE_BUSY upgrades),
//     READ COMMITTED on PostgreSQL, retried when PostgreSQL reports a
//     serialization failure or deadlock. Reads go to the reader pool.
//   - Ids minted here are UUIDv7; times are microseconds since the epoch
//     (store.Micros) read from the injected clock.
//   - Files are split by concept (tenants.go, keys.go, bootstrap.go…), with
//     the plumbing in store.go, tx.go, dialect.go and migrate.go.
package sqlstore
