package api

import (
	"testing"

	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/store/storetest"
)

// postgresEngine opens a store in a fresh schema of the PostgreSQL server
// named by GYRE_TEST_POSTGRES_URL; without one, tests on it skip (or fail
// when GYRE_REQUIRE_POSTGRES=1).
var postgresEngine = engine{name: "postgres", open: func(t *testing.T) store.Store {
	url := storetest.PostgresURL(t)
	schema := storetest.NewPostgresSchema(t, url)
	return openStore(t, storeopen.Options{DB: storetest.SearchPathURL(t, url, schema)})
}}
