// Package migrations embeds gyre's versioned schema migrations, one
// directory per engine. Both directories must hold the same versions.
package migrations

import "embed"

// SQLite holds the SQLite migrations under "sqlite/".
//
//go:embed sqlite/*.sql
var SQLite embed.FS

// Postgres holds the PostgreSQL migrations under "postgres/".
//
//go:embed postgres/*.sql
var Postgres embed.FS
