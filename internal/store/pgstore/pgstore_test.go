package pgstore

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/sqlstore"
	"github.com/gyrehq/gyre/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m, engine()) }

// engine locates each test database by a URL whose search_path is a fresh
// schema, so child processes need nothing but that URL.
func engine() storetest.Engine {
	latest, err := sqlstore.LatestVersion(Dialect().Migrations)
	if err != nil {
		panic(err)
	}
	return storetest.Engine{
		Fresh: func(t *testing.T) string {
			url := storetest.PostgresURL(t)
			return storetest.SearchPathURL(t, url, storetest.NewPostgresSchema(t, url))
		},
		Open: func(ctx context.Context, loc string, migrate bool) (store.Store, error) {
			s, err := Open(ctx, Config{URL: loc, Migrate: migrate})
			if err != nil {
				return nil, err // a nil interface, not a nil *sqlstore.Store
			}
			return s, nil
		},
		Migrate: func(ctx context.Context, loc string) error { return Migrate(ctx, Config{URL: loc}) },
		Raw:     func(loc string) (*sql.DB, error) { return sql.Open("pgx", loc) },
		DownTo: func(ctx context.Context, loc string, version int64) error {
			db, err := sql.Open("pgx", loc)
			if err != nil {
				return err
			}
			defer db.Close()
			d := Dialect()
			p, err := goose.NewProvider(d.Goose, db, d.Migrations, goose.WithDisableGlobalRegistry(true))
			if err != nil {
				return err
			}
			_, err = p.DownTo(ctx, version)
			return err
		},
		Latest: latest,
	}
}

// TestConformance runs the suite with Config.Schema, the other way of
// choosing a schema.
func TestConformance(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	storetest.Run(t, func(t *testing.T, clk clock.Clock) store.Store {
		s, err := Open(t.Context(), Config{URL: url, Schema: storetest.NewPostgresSchema(t, url), Clock: clk, InjectedLeaseClock: true, Migrate: true})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return s
	})
}

func TestEngine(t *testing.T) {
	t.Parallel()
	storetest.PostgresURL(t) // skip (or fail) once, not per subtest
	storetest.RunEngine(t, engine())
}
