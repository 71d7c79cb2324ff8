package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/sqlstore"
	"github.com/gyrehq/gyre/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m, engine()) }

func engine() storetest.Engine {
	latest, err := sqlstore.LatestVersion(Dialect().Migrations)
	if err != nil {
		panic(err)
	}
	return storetest.Engine{
		Fresh: func(t *testing.T) string { return filepath.Join(t.TempDir(), "gyre.db") },
		Open: func(ctx context.Context, loc string, migrate bool) (store.Store, error) {
			s, err := Open(ctx, Config{Path: loc, Migrate: migrate})
			if err != nil {
				return nil, err // a nil interface, not a nil *sqlstore.Store
			}
			return s, nil
		},
		Migrate: func(ctx context.Context, loc string) error { return Migrate(ctx, Config{Path: loc}) },
		Raw:     rawDB,
		DownTo: func(ctx context.Context, loc string, version int64) error {
			db, err := rawDB(loc)
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
		Check:  checkIntegrity,
	}
}

func rawDB(path string) (*sql.DB, error) {
	return sql.Open("sqlite", dsn(path, DefaultBusyTimeout, true))
}

func checkIntegrity(t *testing.T, path string) {
	t.Helper()
	db, err := rawDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var res string
	if err := db.QueryRowContext(t.Context(), `PRAGMA integrity_check`).Scan(&res); err != nil || res != "ok" {
		t.Errorf("integrity_check = %q, %v; want ok", res, err)
	}
	rows, err := db.QueryContext(t.Context(), `PRAGMA foreign_key_check`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if rows.Next() {
		t.Error("foreign_key_check reports violations")
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, clk clock.Clock) store.Store {
		s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "gyre.db"), Clock: clk, Migrate: true})
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
	storetest.RunEngine(t, engine())
}

// TestConnectionSettings checks what every writer and reader connection
// runs with, through the same DSNs Open uses.
func TestConnectionSettings(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gyre.db")
	s, err := Open(t.Context(), Config{Path: path, Migrate: true, BusyTimeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		writer bool
		want   map[string]string
	}{
		{"writer", true, map[string]string{
			"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "7000", "query_only": "0",
		}},
		{"reader", false, map[string]string{
			"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "7000", "query_only": "1",
		}},
	} {
		db, err := sql.Open("sqlite", dsn(path, 7*time.Second, tc.writer))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for pragma, want := range tc.want {
			var got string
			if err := db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
				t.Fatalf("%s: PRAGMA %s: %v", tc.name, pragma, err)
			}
			if got != want {
				t.Errorf("%s: PRAGMA %s = %q, want %q", tc.name, pragma, got, want)
			}
		}
		if !tc.writer {
			if _, err := db.ExecContext(ctx, `INSERT INTO tenants (id, name, created_us) VALUES ('x', 'x', 0)`); err == nil {
				t.Error("reader connection accepted a write")
			}
		}
	}
}

// TestWriterBeginsImmediate shows that the writer's transactions take the
// write lock at BEGIN: while one is open, a second writer connection (from
// any process) cannot begin, and waits instead of failing later at an
// upgrade.
func TestWriterBeginsImmediate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gyre.db")
	if err := Migrate(t.Context(), Config{Path: path}); err != nil {
		t.Fatal(err)
	}
	open := func(busy time.Duration) *sql.DB {
		db, err := sql.Open("sqlite", dsn(path, busy, true))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		return db
	}
	a, b := open(DefaultBusyTimeout), open(time.Millisecond)
	tx, err := a.BeginTx(t.Context(), nil) // no statement yet
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	tx2, err := b.BeginTx(t.Context(), nil)
	if err == nil {
		tx2.Rollback()
		t.Fatal("a second writer began while the first held an IMMEDIATE transaction; want SQLITE_BUSY")
	}
	// A reader is not blocked by the open write transaction.
	r, err := sql.Open("sqlite", dsn(path, time.Millisecond, false))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var n int
	if err := r.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM tenants`).Scan(&n); err != nil {
		t.Errorf("read during a write transaction: %v", err)
	}
}

// TestMigrationLockFile shows that migrations wait for the lock file
// next to the database.
func TestMigrationLockFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gyre.db")
	unlock, err := migrationLock(path)(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + ".migrate.lock"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v, %v", fi, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := Migrate(ctx, Config{Path: path}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Migrate while the lock is held = %v, want it to wait until its context ends", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(t.Context(), Config{Path: path}); err != nil {
		t.Fatalf("Migrate after unlock: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	if _, err := Open(t.Context(), Config{}); err == nil {
		t.Error("Open with no path succeeded")
	}
	if _, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "missing", "gyre.db"), Migrate: true}); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
}

// TestAwkwardPath: the path reaches SQLite intact whatever it contains
// (the DSN is a file: URI, so '?', '#', '%' and spaces must be escaped).
func TestAwkwardPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a dir?with#odd%20chars&_txlock=deferred")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gyre db.sqlite")
	s, err := Open(t.Context(), Config{Path: path, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateTenant(t.Context(), "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database not at its path: %v", err)
	}
	if _, err := os.Stat(path + ".migrate.lock"); err != nil {
		t.Errorf("lock file not next to the database: %v", err)
	}
}

// TestOpenDB_RetriesABusyConnect: switching a file to WAL needs it to
// itself, and SQLite can answer SQLITE_BUSY without waiting in its busy
// handler (several processes opening one new file at once did, in
// TestEngine/MigrateConcurrentProcesses). Here busy_timeout is 0, so the
// PRAGMA fails at once while another connection holds the file: openDB
// retries until the file is free, and gives up after its bound.
func TestOpenDB_RetriesABusyConnect(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "busy.db")
	holder, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	holder.SetMaxOpenConns(1)
	ctx := context.Background()
	hold := func() *sql.Tx {
		tx, err := holder.BeginTx(ctx, nil)
		if err == nil {
			_, err = tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS t (x)`)
		}
		if err == nil {
			_, err = tx.ExecContext(ctx, `INSERT INTO t VALUES (1)`) // an exclusive lock once it spills; a reserved one now
		}
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}

	tx := hold()
	_, err = openDB(ctx, dsn(path, 0, true), 50*time.Millisecond)
	if !isBusy(err) {
		t.Fatalf("connect while the file is held: %v, want SQLITE_BUSY after the bound", err)
	}

	time.AfterFunc(200*time.Millisecond, func() { _ = tx.Rollback() })
	db, err := openDB(ctx, dsn(path, 0, true), 10*time.Second)
	if err != nil {
		t.Fatalf("connect once the file is free: %v", err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal mode %q, %v", mode, err)
	}
}
