package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// The environment of PostgreSQL tests.
const (
	// EnvPostgresURL names the PostgreSQL server tests use
	// (postgres://user@host:port/db?sslmode=disable). Tests create a
	// schema of their own in it and drop it afterwards.
	EnvPostgresURL = "GYRE_TEST_POSTGRES_URL"
	// EnvRequirePostgres set to 1 turns a missing EnvPostgresURL from a
	// skip into a failure (CI sets it, so PostgreSQL tests cannot silently
	// stop running).
	EnvRequirePostgres = "GYRE_REQUIRE_POSTGRES"
)

var warnSkip sync.Once

// PostgresURL returns the test server's URL from GYRE_TEST_POSTGRES_URL.
// Without it the test is skipped, loudly, or fails when
// GYRE_REQUIRE_POSTGRES=1.
func PostgresURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvPostgresURL); u != "" {
		return u
	}
	if os.Getenv(EnvRequirePostgres) == "1" {
		t.Fatalf("%s=1 but %s is not set: PostgreSQL tests cannot run", EnvRequirePostgres, EnvPostgresURL)
	}
	msg := "SKIPPING PostgreSQL store tests: " + EnvPostgresURL + " is not set"
	warnSkip.Do(func() { fmt.Fprintf(os.Stderr, "\n!!! %s !!!\n\n", msg) })
	t.Skip(msg)
	return ""
}

// NewPostgresSchema creates a fresh, empty schema on the server at url for
// this test and drops it (with everything in it) when the test ends. It
// returns the schema's name.
func NewPostgresSchema(t testing.TB, url string) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "gyre_test_" + hex.EncodeToString(b[:])
	ident := pgx.Identifier{name}.Sanitize()

	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatalf("open %s: %v", EnvPostgresURL, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+ident); err != nil {
		_ = db.Close()
		t.Fatalf("create test schema: %v", err)
	}
	t.Cleanup(func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			t.Errorf("drop test schema %s: %v", name, err)
		}
	})
	return name
}

// SearchPathURL returns url with its connections' search_path set to
// schema, for code that takes only a URL (child processes, storeopen).
func SearchPathURL(t testing.TB, rawURL, schema string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL", EnvPostgresURL)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
