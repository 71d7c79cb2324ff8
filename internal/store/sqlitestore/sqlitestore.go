// Package sqlitestore is gyre's embedded store: SQLite through the pure Go
// driver modernc.org/sqlite (no cgo), behind the shared sqlstore
// implementation.
//
// One writer, many readers. All writes go through a *sql.DB holding a
// single connection whose transactions begin IMMEDIATE, so a write
// transaction takes SQLite's write lock before its first statement and
// never has to upgrade a read lock (the upgrade is what fails with
// SQLITE_BUSY without waiting). Concurrent writers in this process queue
// for that connection inside database/sql; writers in other processes wait
// in SQLite's busy handler (busy_timeout). Reads use a separate pool of
// query_only connections, which WAL lets run alongside the writer.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store/migrations"
	"github.com/gyrehq/gyre/internal/store/sqlstore"
)

// DefaultBusyTimeout is how long a statement waits, by default, for a lock
// held by another process before failing.
const DefaultBusyTimeout = 30 * time.Second

// Config configures Open and Migrate.
type Config struct {
	// Path is the database file. Required. The file is created if missing;
	// its directory must exist. Next to it live the WAL (-wal, -shm) and the
	// migration lock (<Path>.migrate.lock).
	Path string
	// Clock stamps stored times. Defaults to the wall clock.
	Clock clock.Clock
	// Logger receives diagnostics. Defaults to discarding them.
	Logger *slog.Logger
	// Migrate applies pending migrations during Open. Without it Open
	// refuses a database that is not at this gyre's schema version
	// (store.ErrNotMigrated, store.ErrSchemaTooNew).
	Migrate bool
	// BusyTimeout bounds how long a statement waits for a lock another
	// process holds. Default DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Readers caps the read pool. Default max(4, GOMAXPROCS).
	Readers int
}

func (c Config) withDefaults() (Config, error) {
	if c.Path == "" {
		return c, errors.New("sqlite: no database path")
	}
	abs, err := filepath.Abs(c.Path)
	if err != nil {
		return c, fmt.Errorf("sqlite: %w", err)
	}
	c.Path = abs
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.BusyTimeout <= 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.Readers <= 0 {
		c.Readers = max(4, runtime.GOMAXPROCS(0))
	}
	return c, nil
}

// Dialect returns the SQLite dialect of sqlstore.
func Dialect() sqlstore.Dialect {
	sub, err := fs.Sub(migrations.SQLite, "sqlite")
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	return sqlstore.Dialect{
		Engine:     "sqlite",
		Goose:      goose.DialectSQLite3,
		Migrations: sub,
		VersionTableExists: `SELECT EXISTS (SELECT 1 FROM sqlite_master
			WHERE type = 'table' AND name = 'goose_db_version')`,
		JSONArrayText:     `json_each(%s) AS j`,
		JSONIsString:      `CASE WHEN json_type(%[1]s, '$.%[2]s') = 'text' THEN 1 ELSE 0 END`,
		IsUniqueViolation: isUniqueViolation,
		// One writer connection: concurrent writes share commits.
		GroupCommit:    true,
		InProcessReads: true,
		// Nothing to retry: IMMEDIATE transactions on one writer connection
		// cannot deadlock or lose a snapshot, and lock waits happen inside
		// busy_timeout.
	}
}

func isUniqueViolation(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// Open opens (creating if needed) the SQLite store at cfg.Path, migrating
// it first when cfg.Migrate is set.
func Open(ctx context.Context, cfg Config) (*sqlstore.Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := Dialect()
	writer, err := openWriter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	lock := migrationLock(cfg.Path)
	if cfg.Migrate {
		if err := sqlstore.Migrate(ctx, writer, d, lock, cfg.Logger); err != nil {
			return nil, errors.Join(fmt.Errorf("sqlite: %w", err), writer.Close())
		}
	}
	reader, err := openDB(ctx, dsn(cfg.Path, cfg.BusyTimeout, false), cfg.BusyTimeout)
	if err != nil {
		return nil, errors.Join(err, writer.Close())
	}
	reader.SetMaxOpenConns(cfg.Readers)
	reader.SetMaxIdleConns(cfg.Readers)
	if err := sqlstore.CheckSchema(ctx, reader, d); err != nil {
		return nil, errors.Join(fmt.Errorf("sqlite: %w", err), reader.Close(), writer.Close())
	}
	s, err := sqlstore.New(sqlstore.Config{
		Dialect:       d,
		Writer:        writer,
		Reader:        reader,
		Clock:         cfg.Clock,
		Logger:        cfg.Logger,
		MigrationLock: lock,
	})
	if err != nil {
		return nil, errors.Join(err, reader.Close(), writer.Close())
	}
	cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "store opened",
		slog.String("engine", "sqlite"), slog.String("path", cfg.Path))
	return s, nil
}

// Migrate brings the database at cfg.Path up to this gyre's schema, with a
// connection of its own (what `gyre migrate` runs). Safe to run from
// several processes at once; store.ErrSchemaTooNew if a newer gyre already
// migrated it.
func Migrate(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	writer, err := openWriter(ctx, cfg)
	if err != nil {
		return err
	}
	err = sqlstore.Migrate(ctx, writer, Dialect(), migrationLock(cfg.Path), cfg.Logger)
	if err != nil {
		err = fmt.Errorf("sqlite: %w", err)
	}
	return errors.Join(err, writer.Close())
}

// openWriter opens the single-connection write handle and checks that the
// database really is in WAL mode.
func openWriter(ctx context.Context, cfg Config) (*sql.DB, error) {
	db, err := openDB(ctx, dsn(cfg.Path, cfg.BusyTimeout, true), cfg.BusyTimeout)
	if err != nil {
		return nil, err
	}
	// One connection: every write in this process is serialised here, in
	// database/sql's queue (which honours contexts), instead of contending
	// for SQLite's lock. It is never closed for idleness or age.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return nil, errors.Join(fmt.Errorf("sqlite: read journal mode: %w", err), db.Close())
	}
	if !strings.EqualFold(mode, "wal") {
		return nil, errors.Join(fmt.Errorf("sqlite: journal mode is %q, not wal (is the file system local?)", mode), db.Close())
	}
	return db, nil
}

// openDB opens a handle and connects it. Connecting runs the PRAGMAs (see
// dsn), and switching a new file to WAL can fail with SQLITE_BUSY without
// SQLite's busy handler ever waiting, when other processes open the same
// new file at the same moment; so a busy connect is retried, for up to
// busy.
func openDB(ctx context.Context, dsn string, busy time.Duration) (*sql.DB, error) {
	conn, err := newCachingConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	db := sql.OpenDB(conn)
	// sql.Open connects lazily; connect now so that a bad path or a
	// refused PRAGMA fails Open, and so that the writer switches the file
	// to WAL before any reader connects.
	deadline := time.Now().Add(busy)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := db.PingContext(ctx)
		if err == nil {
			return db, nil
		}
		if !isBusy(err) || time.Now().Add(wait).After(deadline) {
			return nil, errors.Join(fmt.Errorf("sqlite: connect: %w", err), db.Close())
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("sqlite: connect: %w", err), db.Close())
		}
	}
}

// isBusy reports whether err is SQLITE_BUSY, or one of its extended codes.
func isBusy(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_BUSY
}

// dsn builds the connection string of the writer or of a reader. Each
// connection runs the PRAGMAs when it opens:
//
//   - busy_timeout first, so that nothing after it fails with SQLITE_BUSY
//     while another process holds a lock;
//   - foreign_keys on (SQLite's default is off);
//   - journal_mode WAL: readers never block the writer nor it them; it is
//     persistent, so the writer (opened first) sets it for every process;
//   - synchronous FULL, not NORMAL: in WAL mode NORMAL does not sync the WAL
//     at commit, so a commit survives a crash of gyre (kill -9) but can be
//     rolled back by a power loss or kernel crash after gyre already
//     answered 2xx. SPEC §12 says an acknowledged write is never lost, so
//     every commit is synced before it returns;
//   - the writer begins every transaction IMMEDIATE (_txlock); readers are
//     query_only, so a stray write on the read pool fails loudly instead of
//     bypassing the one-writer discipline.
func dsn(path string, busy time.Duration, writer bool) string {
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(busy.Milliseconds(), 10))
	q.Set("_foreign_keys", "1")
	q.Set("_synchronous", "FULL")
	if writer {
		q.Set("_journal_mode", "WAL")
		q.Set("_txlock", "immediate")
	} else {
		q.Set("_query_only", "1")
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}
	return u.String()
}
