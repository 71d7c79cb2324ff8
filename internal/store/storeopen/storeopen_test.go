package storeopen

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storetest"
)

func TestResolveName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		db, engine, loc string
		bad             bool
	}{
		{db: "", engine: "sqlite", loc: ""},
		{db: "gyre.db", engine: "sqlite", loc: "gyre.db"},
		{db: "/var/lib/gyre/x.db", engine: "sqlite", loc: "/var/lib/gyre/x.db"},
		{db: "./rel/x.db", engine: "sqlite", loc: "./rel/x.db"},
		{db: "sqlite:///var/lib/x.db", engine: "sqlite", loc: "/var/lib/x.db"},
		{db: "sqlite://localhost/var/lib/x.db", engine: "sqlite", loc: "/var/lib/x.db"},
		{db: "sqlite:rel/x.db", engine: "sqlite", loc: "rel/x.db"},
		{db: "file:/var/lib/x.db", engine: "sqlite", loc: "/var/lib/x.db"},
		{db: "SQLite:///x.db", engine: "sqlite", loc: "/x.db"},
		{db: "odd:name.db", engine: "sqlite", loc: "odd:name.db"},
		{db: "postgres://u:p@db:5432/gyre?sslmode=require", engine: "postgres", loc: "postgres://u:p@db:5432/gyre?sslmode=require"},
		{db: "postgresql://db/gyre", engine: "postgres", loc: "postgresql://db/gyre"},
		{db: "mysql://db/gyre", bad: true},
		{db: "sqlite://otherhost/x.db", bad: true},
		{db: "sqlite:///x.db?_pragma=foo", bad: true},
		{db: "sqlite:", bad: true},
	}
	for _, tc := range tests {
		got, err := resolveName(tc.db)
		if tc.bad {
			if err == nil {
				t.Errorf("resolveName(%q) = %+v, want an error", tc.db, got)
			}
			continue
		}
		if err != nil || got.engine != tc.engine || got.loc != tc.loc {
			t.Errorf("resolveName(%q) = %+v, %v; want %s at %q", tc.db, got, err, tc.engine, tc.loc)
		}
	}
}

func TestSQLiteInDataDir(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "data", "nested")
	o := Options{DataDir: dir}
	if e, err := Engine(o); err != nil || e != "sqlite" {
		t.Errorf("Engine = %q, %v; want sqlite", e, err)
	}
	if s, err := Open(ctx, o); !errors.Is(err, store.ErrNotMigrated) {
		if err == nil {
			s.Close()
		}
		t.Fatalf("Open(unmigrated) error = %v, want ErrNotMigrated", err)
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data directory = %v, %v; want a 0700 directory", fi, err)
	}
	if err := Migrate(ctx, o); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("Open after Migrate: %v", err)
	}
	defer s.Close()
	if s.Engine() != "sqlite" {
		t.Errorf("Engine() = %q", s.Engine())
	}
	if _, err := os.Stat(filepath.Join(dir, SQLiteFile)); err != nil {
		t.Errorf("database file: %v", err)
	}
}

func TestSQLiteURL(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "custom.db")
	s, err := Open(t.Context(), Options{DB: "sqlite://" + path, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(t.Context()); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database file: %v", err)
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	o := Options{DB: storetest.SearchPathURL(t, url, storetest.NewPostgresSchema(t, url))}
	if e, err := Engine(o); err != nil || e != "postgres" {
		t.Errorf("Engine = %q, %v; want postgres", e, err)
	}
	if err := Migrate(t.Context(), o); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := Open(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Engine() != "postgres" {
		t.Errorf("Engine() = %q", s.Engine())
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{}, {DB: "mysql://x/y", DataDir: t.TempDir()}} {
		if s, err := Open(t.Context(), o); err == nil {
			s.Close()
			t.Errorf("Open(%+v) succeeded", o)
		}
		if err := Migrate(t.Context(), o); err == nil {
			t.Errorf("Migrate(%+v) succeeded", o)
		}
	}
}
